"""Run a child process whose output streams into a run log, and really stop it when asked.

Used by GLUE scripts and by process-isolated handlers. The child is started in
its own session (process group), so cancellation signals the whole group:
SIGTERM, then SIGKILL after ``kill_grace_s`` if anything is still alive. POSIX only.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from collections.abc import Callable, Coroutine, Mapping, Sequence
from typing import Any

__all__ = ["run_streaming", "pump_lines"]

_READ_CHUNK = 64 << 10
_MAX_PENDING_LINE = 1 << 20


async def pump_lines(stream: asyncio.StreamReader, on_line: Callable[[str], None]) -> None:
    """Call ``on_line`` for every line of ``stream`` (decoded leniently, newline stripped).

    A line longer than 1 MiB is emitted in pieces rather than buffered without bound.
    """
    pending = b""
    while chunk := await stream.read(_READ_CHUNK):
        pending += chunk
        if b"\n" in chunk:
            *lines, pending = pending.split(b"\n")
            for raw in lines:
                on_line(raw.rstrip(b"\r").decode("utf-8", errors="replace"))
        if len(pending) > _MAX_PENDING_LINE:
            on_line(pending.decode("utf-8", errors="replace"))
            pending = b""
    if pending:
        on_line(pending.rstrip(b"\r").decode("utf-8", errors="replace"))


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


async def _terminate(proc: asyncio.subprocess.Process, kill_grace_s: float) -> None:
    _signal_group(proc.pid, signal.SIGTERM)
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(proc.wait(), kill_grace_s)
    # Whatever is left of the group (the leader or its children) does not get a second chance.
    _signal_group(proc.pid, signal.SIGKILL)
    await proc.wait()


async def run_streaming(
    argv: Sequence[str],
    *,
    on_line: Callable[[str], None],
    stdin_data: bytes | None = None,
    capture_stdout: bool = False,
    env: Mapping[str, str] | None = None,
    kill_grace_s: float = 2.0,
    on_start: Callable[[int], None] | None = None,
) -> tuple[int, bytes]:
    """Run ``argv``; stream its output lines to ``on_line``; return (exit code, captured stdout).

    With ``capture_stdout`` only stderr is streamed and stdout is returned;
    otherwise stderr is merged into the streamed stdout. When the awaiting task
    is cancelled the process group is terminated before the cancellation
    propagates. Raises FileNotFoundError/PermissionError when argv[0] cannot run.
    """
    proc = await asyncio.create_subprocess_exec(
        *argv,
        stdin=asyncio.subprocess.PIPE if stdin_data is not None else asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE if capture_stdout else asyncio.subprocess.STDOUT,
        start_new_session=True,
        env=dict(env) if env is not None else None,
    )
    if on_start is not None:
        on_start(proc.pid)
    try:
        assert proc.stdout is not None
        if stdin_data is not None:
            assert proc.stdin is not None
            proc.stdin.write(stdin_data)
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                await proc.stdin.drain()
            proc.stdin.close()
        captured = b""
        if capture_stdout:
            assert proc.stderr is not None
            captured, _ = await asyncio.gather(proc.stdout.read(), pump_lines(proc.stderr, on_line))
        else:
            await pump_lines(proc.stdout, on_line)
        code = await proc.wait()
    except BaseException:
        if proc.returncode is None or _group_may_live(proc):
            await _shielded(_terminate(proc, kill_grace_s))
        raise
    return code, captured


def _group_may_live(proc: asyncio.subprocess.Process) -> bool:
    try:
        os.killpg(proc.pid, 0)
    except (ProcessLookupError, PermissionError):
        return False
    return True


async def _shielded(coro: Coroutine[Any, Any, None]) -> None:
    """Finish the clean-up even if the caller is cancelled again meanwhile."""
    task = asyncio.ensure_future(coro)
    while not task.done():
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.shield(task)
    task.result()
