"""Process isolation: run a sync handler in a fresh Python subprocess that can really be stopped.

How it differs from the default (``isolation="thread"``):

- thread: the handler runs in the executor's thread pool. A thread cannot be
  stopped from outside, so on timeout/kill the outcome is reported at once,
  ``ctx.cancelled`` becomes True and the next ``ctx.log`` raises
  ``JobCancelled``; the thread itself runs on until the handler returns. Cheap
  (no process start), shares the process's memory and connections.
- process: each run starts a Python interpreter running
  ``jobring.executor.isolation.child_main`` (about as costly as starting an
  interpreter and importing the handler's module). The
  function is looked up in the child by its module and qualified name, so it
  must be a top-level function of an importable module (a script run as
  ``__main__`` works if its top level is guarded by ``if __name__ ==
  "__main__"``); arguments are the usual JobContext only. The child gets the
  parent's ``sys.path``. ``ctx.log``, ``logging`` records and anything printed
  to stdout/stderr go to the run log. On timeout/kill the child's process group
  gets SIGTERM, then SIGKILL after a grace period: the work really stops.
  ``init``/``destroy`` hooks still run in the executor process. In the child
  ``ctx.cancelled`` is always False (it is terminated instead).
"""

from __future__ import annotations

import json
import logging
import os
import sys
import traceback
from collections.abc import Callable
from typing import Any

from jobring.executor.context import JobContext, JobHandler, RunLogHandler, exception_summary
from jobring.executor.runlog import format_line
from jobring.executor.subproc import run_streaming
from jobring.executor.workflow_context import ContextError

__all__ = ["run_in_process", "function_reference", "child_main"]

_CHILD_BOOT = "import sys; from jobring.executor.isolation import child_main; sys.exit(child_main())"


def function_reference(func: Callable[..., Any]) -> dict[str, str]:
    """How the child finds ``func``: its module (or the main script's path) and qualified name."""
    module = func.__module__
    ref = {"module": module, "qualname": func.__qualname__, "main_file": ""}
    if module == "__main__":
        main = sys.modules["__main__"]
        spec = getattr(main, "__spec__", None)
        if spec is not None and spec.name:
            ref["module"] = spec.name
        else:
            ref["main_file"] = os.path.abspath(getattr(main, "__file__", "") or "")
            if not ref["main_file"]:
                raise ValueError("cannot run a function of an interactive __main__ in a subprocess")
    return ref


async def run_in_process(
    handler: JobHandler,
    ctx: JobContext,
    *,
    max_handle_msg: int = 15000,
    kill_grace_s: float = 2.0,
    on_start: Callable[[int], None] | None = None,
) -> tuple[int, str | None]:
    """Run ``handler.func`` in a subprocess for this run; returns (handleCode, handleMsg)."""
    request = {
        "sys_path": sys.path,
        "func": function_reference(handler.func),
        "wants_context": handler.wants_context,
        "max_handle_msg": max_handle_msg,
        "ctx": {
            "job_id": ctx.job_id,
            "params": ctx.params,
            "log_id": ctx.log_id,
            "log_date_time": ctx.log_date_time,
            "shard_index": ctx.shard_index,
            "shard_total": ctx.shard_total,
            "logical_time_ms": ctx.logical_time_ms,
            "data_interval_start_ms": ctx.data_interval_start_ms,
            "workflow_context": None if ctx.workflow is None else dict(ctx.workflow.items()),
        },
    }
    # -c rather than -m: running a module of an imported package as __main__ warns on stderr.
    argv = [sys.executable, "-c", _CHILD_BOOT]
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    code, out = await run_streaming(
        argv,
        on_line=ctx.write_raw,
        stdin_data=json.dumps(request).encode(),
        capture_stdout=True,
        env=env,
        kill_grace_s=kill_grace_s,
        on_start=on_start,
    )
    try:
        result = json.loads(out.decode("utf-8")) if out.strip() else None
    except ValueError:
        result = None
    if not isinstance(result, dict) or not isinstance(result.get("code"), int):
        return 500, f"isolated process exited with code {code} without a result"
    msg = result.get("msg")
    added = result.get("workflow")
    if ctx.workflow is not None and isinstance(added, dict):
        try:
            for key, value in added.items():  # checked again here: the child is not trusted
                ctx.workflow.set(key, value)
        except ContextError as exc:
            return 500, str(exc)
    return int(result["code"]), msg if isinstance(msg, str) else None


# --- child side -------------------------------------------------------------------------------


class _StderrSink:
    def write_line(self, line: str) -> None:
        sys.stderr.write(line if line.endswith("\n") else line + "\n")
        sys.stderr.flush()


def _resolve(ref: dict[str, str]) -> Callable[..., Any]:
    import importlib
    import runpy

    if ref.get("main_file"):
        namespace: dict[str, Any] = runpy.run_path(ref["main_file"], run_name="__jobring_main__")
        target: Any = namespace[ref["qualname"].split(".")[0]]
        parts = ref["qualname"].split(".")[1:]
    else:
        target = importlib.import_module(ref["module"])
        parts = ref["qualname"].split(".")
    for part in parts:
        target = getattr(target, part)
    # The decorator may have wrapped it; the registered function is what we want.
    func = getattr(target, "func", target) if isinstance(target, JobHandler) else target
    if not callable(func):
        raise TypeError(f"{ref['module']}.{ref['qualname']} is not callable")
    return func  # type: ignore[no-any-return]


def child_main() -> int:
    """Entry point of the isolated child process (reads its request on stdin)."""
    request = json.loads(sys.stdin.read())
    # stdout is kept for the result; whatever the handler prints goes to stderr -> run log.
    result_fd = os.dup(1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    sys.path[:] = request["sys_path"]
    cap = int(request["max_handle_msg"])
    ctx = JobContext(**request["ctx"], sink=_StderrSink(), line_format=format_line)
    logging.getLogger().addHandler(RunLogHandler())
    token = ctx.activate()
    try:
        func = _resolve(request["func"])
        func(ctx) if request["wants_context"] else func()
        fail = ctx.fail_message
        result: dict[str, Any] = {"code": 200} if fail is None else {"code": 500, "msg": fail}
        if ctx.workflow is not None and fail is None:
            result["workflow"] = ctx.workflow.additions()
    except BaseException as exc:  # the child reports everything, including SystemExit
        # The traceback goes to the run log (stderr), its last line is the run's message.
        sys.stderr.write("".join(traceback.format_exception(exc)))
        sys.stderr.flush()
        text = exception_summary(exc)
        result = {"code": 500, "msg": text if len(text) <= cap else text[:cap] + "..."}
    finally:
        ctx.deactivate(token)
    with os.fdopen(result_fd, "w", encoding="utf-8") as out:
        out.write(json.dumps(result))
    return 0

