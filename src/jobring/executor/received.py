"""The runs this executor accepted recently, kept on disk: ``/run`` is idempotent by run.

An admin node that takes over a dead node's jobs cannot tell whether a fire the dead node
recorded was sent just before it died. It asks the executors (``/received``, a jobring
extension: which of these runs did you accept?) and sends again, with the same run id, only
the ones nobody received. A repeated ``/run`` of a run accepted before answers 200 "already
received" and does not run it twice.

A run is identified by its ``logId`` and its trigger time in whole seconds (``logDateTime``),
as its log file is (runlog.py): two admins on different databases may reuse a log id, not
with the same trigger second.

The window is bounded (``window`` runs, the most recent) and survives a restart of the
executor: accepted runs are appended to ``<log_path>/received-runs.txt``; once it holds
``window`` lines it is renamed ``received-runs.1.txt`` (replacing the one before) and a new file
begins. The two files hold at least the window's runs, and nothing is ever rewritten: the
rewrite of the window this replaced took tens of milliseconds on the event loop every
``window`` runs (1.7 % of the executor's CPU at full load, bench/RESULTS.md, issue 27).

When a run reaches the file: before its handler starts. ``add`` only remembers the run (in
memory, and in a pending batch); ``flush`` appends the batch in one write, and the engine calls
it before it starts any run's handler (and at shutdown). Under load one write then carries
every run accepted in that event-loop iteration, instead of one write per run on the loop
thread. The guarantee a takeover needs holds: a run whose handler started is on disk (no
fsync: a process crash keeps it, a machine crash may not). A run accepted but not started
when the process dies may be missing from the file; it never ran, and it did not survive the
crash either (the queue is in memory), so sending it again runs it once. Its ``/run`` answer
may have left before the write: that answer only said the run was queued.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections import deque
from pathlib import Path

log = logging.getLogger(__name__)

FILE_NAME = "received-runs.txt"
PREVIOUS_FILE_NAME = "received-runs.1.txt"
DEFAULT_WINDOW = 100_000
# Pending runs past which ``add`` writes at once (runs queued behind a long one start late).
MAX_PENDING = 1000
MSG_ALREADY_RECEIVED = "already received: this run was accepted before (not run again)"

Run = tuple[int, int]  # (logId, logDateTime in whole seconds)


def run_key(log_id: int, log_date_time_ms: int) -> Run:
    return log_id, log_date_time_ms // 1000


class ReceivedRuns:
    """A bounded, persisted set of the runs accepted (see the module docstring)."""

    def __init__(self, folder: Path | None, window: int = DEFAULT_WINDOW) -> None:
        self.window = max(1, window)
        self._order: deque[Run] = deque()
        self._set: set[Run] = set()
        self._path = None if folder is None else folder / FILE_NAME
        self._previous = None if folder is None else folder / PREVIOUS_FILE_NAME
        self._fd: int | None = None
        self._lines = 0  # in the current file
        self._pending: list[str] = []  # lines of runs remembered but not written yet
        if self._path is not None and self._previous is not None:
            self._load(self._previous)
            self._lines = 0
            self._load(self._path)

    def _load(self, path: Path) -> None:
        try:
            with path.open("r", encoding="ascii", errors="replace") as fh:
                for line in fh:
                    parts = line.split()
                    self._lines += 1
                    if len(parts) == 2 and parts[0].isdigit() and parts[1].isdigit():
                        run = (int(parts[0]), int(parts[1]))
                        if run not in self._set:
                            self._remember(run)
        except FileNotFoundError:
            pass
        except OSError as exc:
            log.warning("cannot read the runs received before (%s): a run sent again after a "
                        "takeover may run twice", exc)

    def __contains__(self, run: Run) -> bool:
        return run in self._set

    def __len__(self) -> int:
        return len(self._set)

    def _remember(self, run: Run) -> None:
        """Remember a run not remembered yet."""
        self._order.append(run)
        self._set.add(run)
        while len(self._order) > self.window:
            self._set.discard(self._order.popleft())

    def add(self, run: Run) -> None:
        """Remember an accepted run (in memory at once; on disk at the next :meth:`flush`)."""
        if run in self._set:
            return
        self._remember(run)
        if self._path is None:
            return
        pending = self._pending
        pending.append(f"{run[0]} {run[1]}\n")
        if len(pending) >= MAX_PENDING:
            self.flush()

    def flush(self) -> None:
        """Append the runs remembered since the last flush to the file, in one write."""
        if not self._pending:
            return
        assert self._path is not None
        batch, self._pending = self._pending, []
        try:
            if self._fd is None:
                self._path.parent.mkdir(parents=True, exist_ok=True)
                self._fd = os.open(self._path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
            data = memoryview("".join(batch).encode("ascii"))
            while data:
                data = data[os.write(self._fd, data):]
            self._lines += len(batch)
            if self._lines >= self.window:
                self._rotate()
        except OSError as exc:
            log.warning("cannot record %d received run(s) on disk (%s): they are known until a restart",
                        len(batch), exc)

    def _rotate(self) -> None:
        """The full file becomes the previous one; the next write begins a new file."""
        assert self._path is not None and self._previous is not None
        self._close_fd()
        os.replace(self._path, self._previous)
        self._lines = 0

    def close(self) -> None:
        """Write what is pending and close the file."""
        if self._pending:
            self.flush()
        self._close_fd()

    def _close_fd(self) -> None:
        if self._fd is not None:
            with contextlib.suppress(OSError):
                os.close(self._fd)
            self._fd = None
