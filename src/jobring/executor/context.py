"""What a job handler is and what it sees while it runs.

A :class:`JobHandler` is built by the ``Executor.job`` decorator. While a run
is active, :func:`current_context` returns its :class:`JobContext` (a
contextvar, so it follows the run's asyncio task or the thread it runs in);
``ctx.log`` and records of the stdlib ``logging`` module (through
:class:`RunLogHandler`) go to the run's log file.

Cancellation (timeout, kill, cover-early, executor stop) is reported to the
admin at once by the engine; the handler learns about it through
``ctx.cancelled`` and through :class:`JobCancelled`, raised by its next
``ctx.log`` call. Async handlers are additionally cancelled (CancelledError).
"""

from __future__ import annotations

import contextvars
import inspect
import logging
import sys
import threading
import traceback
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal, Protocol

from jobring.errors import JobringError
from jobring.executor.workflow_context import WorkflowContext

__all__ = [
    "JobCancelled",
    "JobContext",
    "JobHandler",
    "LineSink",
    "RunLogHandler",
    "current_context",
]

Isolation = Literal["thread", "process"]


class JobCancelled(JobringError):
    """Raised inside a handler by ``ctx.log`` once its run was cancelled."""


@dataclass(frozen=True)
class JobHandler:
    """A registered handler: its function, optional init/destroy hooks, isolation mode.

    ``func`` may be sync or async; it receives the :class:`JobContext` when it
    declares at least one parameter. ``init`` runs once per worker before its
    first run, ``destroy`` when the worker retires, is replaced or the executor
    stops. ``isolation="process"`` (sync functions only) runs each call in a
    subprocess that is really terminated on timeout/kill; the function must then
    be importable by ``module`` + ``qualname`` (a top-level function).
    """

    name: str
    func: Callable[..., Any]
    init: Callable[[], Any] | None = None
    destroy: Callable[[], Any] | None = None
    isolation: Isolation = "thread"
    is_async: bool = field(init=False, repr=False, compare=False)
    wants_context: bool = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not self.name or not isinstance(self.name, str):
            raise ValueError("a job handler needs a non-empty name")
        if not callable(self.func):
            raise TypeError(f"job handler [{self.name}]: func is not callable")
        if self.isolation not in ("thread", "process"):
            raise ValueError(f"job handler [{self.name}]: isolation must be 'thread' or 'process'")
        is_async = inspect.iscoroutinefunction(self.func)
        if is_async and self.isolation == "process":
            raise ValueError(f"job handler [{self.name}]: isolation='process' needs a sync function")
        if self.isolation == "process":
            qualname = getattr(self.func, "__qualname__", "")
            if "<" in qualname or not getattr(self.func, "__module__", None):
                raise ValueError(
                    f"job handler [{self.name}]: isolation='process' needs a top-level function "
                    f"importable by module and name (got {qualname!r})"
                )
        object.__setattr__(self, "is_async", is_async)
        object.__setattr__(self, "wants_context", _takes_an_argument(self.func))


def _takes_an_argument(func: Callable[..., Any]) -> bool:
    try:
        params = inspect.signature(func).parameters.values()
    except (TypeError, ValueError):  # builtins without a signature: call them bare
        return False
    return any(
        p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.VAR_POSITIONAL) for p in params
    )


class LineSink(Protocol):
    """Where a run's formatted log lines go (a run log writer, or stderr in a subprocess)."""

    def write_line(self, line: str) -> None: ...


_current: contextvars.ContextVar[JobContext | None] = contextvars.ContextVar(
    "jobring_job_context", default=None
)


def current_context() -> JobContext | None:
    """The context of the run active in this task/thread, or None."""
    return _current.get()


class JobContext:
    """What a running handler sees: the trigger's fields, logging, result and cancellation."""

    __slots__ = (
        "job_id",
        "params",
        "log_id",
        "log_date_time",
        "shard_index",
        "shard_total",
        "logical_time_ms",
        "data_interval_start_ms",
        "workflow",
        "_sink",
        "_format",
        "_thread_label",
        "_cancelled",
        "_fail_msg",
        "_task_key",
        "_item",
        "_scope",
    )

    def __init__(
        self,
        *,
        job_id: int,
        params: str,
        log_id: int,
        log_date_time: int,
        shard_index: int,
        shard_total: int,
        sink: LineSink,
        line_format: Callable[[str, int, str, str], str],
        thread_label: str | None = None,
        logical_time_ms: int | None = None,
        data_interval_start_ms: int | None = None,
        workflow_context: Mapping[str, Any] | None = None,
    ) -> None:
        self.job_id = job_id
        # A workflow node's run: its workflow run's context (get/set); None for any other run
        # (and under an XXL-JOB admin, which sends none).
        self.workflow: WorkflowContext | None = (
            None if workflow_context is None else WorkflowContext(workflow_context))
        self.logical_time_ms = logical_time_ms
        self.data_interval_start_ms = data_interval_start_ms
        self.params = params
        self.log_id = log_id
        self.log_date_time = log_date_time
        self.shard_index = shard_index
        self.shard_total = shard_total
        self._sink = sink
        self._format = line_format
        # Async runs share the loop thread; name them after their worker instead.
        self._thread_label = thread_label
        self._cancelled = False
        self._fail_msg: str | None = None
        self._task_key: str | None = None
        self._item: Any = None
        self._scope: Any = None  # executor.distributed.MapScope: what map / results call

    @property
    def trigger_time(self) -> datetime:
        """When the admin triggered this run (logDateTime), as an aware UTC datetime."""
        return datetime.fromtimestamp(self.log_date_time / 1000, tz=UTC)

    @property
    def logical_time(self) -> datetime | None:
        """The instant this run stands for (its business time), as an aware UTC datetime: a
        scheduled run's planned instant, a backfill run's past instant; None when the admin
        sent none (a manual run, or an XXL-JOB admin)."""
        ms = self.logical_time_ms
        return None if ms is None else datetime.fromtimestamp(ms / 1000, tz=UTC)

    @property
    def data_interval(self) -> tuple[datetime | None, datetime] | None:
        """``(start, end)`` of the data this run covers: the previous instant of the job's
        schedule and :attr:`logical_time` (start None when the admin did not send it)."""
        end = self.logical_time
        if end is None:
            return None
        start = self.data_interval_start_ms
        return None if start is None else datetime.fromtimestamp(start / 1000, tz=UTC), end

    @property
    def cancelled(self) -> bool:
        """True once a timeout, kill, cover-early or executor stop hit this run."""
        return self._cancelled

    @property
    def fail_message(self) -> str | None:
        """The message given to :meth:`fail`, or None when the handler did not fail."""
        return self._fail_msg

    def log(self, msg: str, *args: object) -> None:
        """Append a line to the run's log (``msg % args`` when args are given).

        Raises :class:`JobCancelled` when the run was cancelled, so sync
        handlers stop at their next log call.
        """
        if self._cancelled:
            raise JobCancelled(f"job {self.job_id} run {self.log_id} was cancelled")
        text = msg % args if args else str(msg)
        caller = sys._getframe(1)
        source = f"{caller.f_globals.get('__name__', '?')}#{caller.f_code.co_name}"
        self.write(source, caller.f_lineno, text)

    def fail(self, msg: str) -> None:
        """Mark the run failed with ``msg`` (the handler may still return normally)."""
        self._fail_msg = str(msg)

    def write(self, source: str, lineno: int, text: str, thread: str | None = None) -> None:
        """Write one framework or handler line; never raises on cancellation."""
        label = thread or self._thread_label or threading.current_thread().name
        self._sink.write_line(self._format(source, lineno, label, text))

    def write_raw(self, line: str) -> None:
        """Write one line as is (script and subprocess output); never raises on cancellation."""
        self._sink.write_line(line)

    # --- distributed runs (docs/distributed-jobs.md) -------------------------------------------

    @property
    def task_key(self) -> str | None:
        """The sub-task's key (``r/0.17``, ``s/3``), None for a run's own handler."""
        return self._task_key

    @property
    def item(self) -> Any:
        """The map item this sub-task got (decoded JSON), None otherwise."""
        return self._item

    def map(self, items: Sequence[object], task_name: str) -> int:
        """Split the work: each item becomes a sub-task running the handler ``task_name`` on
        any executor of the group; returns the run's sub-task count so far. Blocks while the
        admin stores them (sync handlers; async ones await :meth:`map_async`)."""
        return int(self._distributed().map(items, task_name))

    async def map_async(self, items: Sequence[object], task_name: str) -> int:
        """:meth:`map` for async handlers."""
        return int(await self._distributed().map_async(items, task_name))

    def results(self) -> Iterator[Any]:
        """In a reduce handler: the succeeded sub-tasks' results, read from the admin a page
        at a time (sync handlers; async ones await :meth:`results_async`)."""
        return iter(self._distributed().results())

    async def results_async(self) -> list[Any]:
        """:meth:`results` for async handlers (all of them, as a list)."""
        return list(await self._distributed().results_async())

    def bind_subtask(self, key: str | None, item: Any, scope: Any) -> None:
        """Engine use: what this run may map, and its sub-task key and item."""
        self._task_key, self._item, self._scope = key, item, scope

    def _distributed(self) -> Any:
        if self._scope is None:
            raise JobringError("map and results need a jobring admin and a jobring executor that "
                               "started (not a glue script or a process-isolated handler)")
        return self._scope

    def mark_cancelled(self) -> None:
        self._cancelled = True

    def activate(self) -> contextvars.Token[JobContext | None]:
        """Make this the current context (engine use); undo with ``deactivate``."""
        return _current.set(self)

    @staticmethod
    def deactivate(token: contextvars.Token[JobContext | None]) -> None:
        _current.reset(token)


class RunLogHandler(logging.Handler):
    """A logging handler that copies records emitted during a run into that run's log.

    Attach it to the root logger (or any logger); outside a run, or after the
    run was cancelled, records are ignored by this handler.
    """

    def emit(self, record: logging.LogRecord) -> None:
        ctx = _current.get()
        if ctx is None or ctx.cancelled:
            return
        try:
            text = record.getMessage()
            if record.exc_info:
                text += "\n" + (self.formatter or _PLAIN).formatException(record.exc_info)
            ctx.write(f"{record.name}#{record.funcName}", record.lineno, text)
        except Exception:
            self.handleError(record)


_PLAIN = logging.Formatter()


def exception_summary(exc: BaseException) -> str:
    """The run's failure message for a handler exception: its last line as Python prints it
    (``ValueError: bad input``), not the traceback's first line; the traceback goes to the
    run log."""
    lines = [line for line in "".join(traceback.format_exception_only(exc)).splitlines() if line.strip()]
    return lines[-1].strip() if lines else type(exc).__name__
