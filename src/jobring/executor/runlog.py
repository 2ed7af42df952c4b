"""Per-run log files: ``<base>/<yyyy-mm-dd>/<logId>-<trigger second>.log``, written by line,
read by line range.

Choices (documented in docs/executor.md):

- A file is keyed by the run's ``logId`` AND its trigger time (``logDateTime`` of ``/run``,
  ``logDateTim`` of ``/log``) in whole epoch seconds, so an admin that reuses a log id (e.g. a
  deleted run's, or another admin's) never reads another run's lines. An XXL-JOB admin on
  MySQL sends ``/log`` the trigger time as stored (DATETIME rounds to the second), so a read
  also tries the second before. Files of the older ``<logId>.log`` layout are not read.

- The day folder comes from the run's ``logDateTime`` in the executor's local
  time zone, as the reference executor does (pass ``tz`` to pin another zone).
- Lines look like the reference's:
  ``yyyy-MM-dd HH:mm:ss [module#function]-[line]-[thread] message``
  (second precision, local time); script output is written raw, one line each.
- Ids are checked before any path is built: ``logId`` must be a positive int and
  ``logDateTime`` a non-negative int within datetime's range; the result is
  also checked to stay inside the base folder. Bad ids raise ``ValueError``.
- ``read`` streams the file: it counts newlines chunk by chunk up to
  ``from_line`` and then collects at most ``max_read_lines`` lines /
  ``max_read_bytes`` bytes (one overlong line is cut at ``max_line_bytes``), so
  memory stays bounded whatever the file size. ``toLineNum`` is the last line
  returned; the admin asks again from ``toLineNum + 1``. A trailing line without
  its newline (still being written) is left for the next read. ``isEnd`` is
  always false for an existing file (the admin decides the end from the run's
  status), as the reference does.
- Writers never block the event loop on the disk: lines are batched in memory
  and appended by one background thread (open, write, close; no fsync); a
  ``read`` first flushes the file's pending lines, so a live /log read sees
  every line written so far. Call ``flush()`` at shutdown. When more than ``max_backlog``
  run logs wait for that thread (one new file per run can fall behind a sustained load),
  ``behind()`` says so and the engine holds back new runs until it catches up.
- ``cleanup`` deletes day folders at least ``retention_days`` old; below 3 days
  cleanup is off, as the reference's.
"""

from __future__ import annotations

import atexit
import logging
import os
import re
import shutil
import threading
import time
import weakref
from collections import deque
from datetime import date, datetime, timedelta, tzinfo
from pathlib import Path
from typing import BinaryIO, TextIO

from jobring.protocol.models import LogResult

__all__ = ["RunLog", "RunLogWriter", "format_line", "MSG_LOG_FILE_NOT_EXISTS", "GLUE_SOURCE_DIR"]

logger = logging.getLogger(__name__)

MSG_LOG_FILE_NOT_EXISTS = "readLog fail, logFile not exists"
GLUE_SOURCE_DIR = "gluesource"
MIN_RETENTION_DAYS = 3
_DAY_DIR = re.compile(r"\d{4}-\d{2}-\d{2}")  # fullmatch
_CHUNK = 1 << 20
_COALESCE_S = 0.01
# Run logs waiting for the writer thread beyond which new runs wait (see RunLog.behind): under a
# sustained load the disk (one new file per run) can fall behind the runs, and the pending lines
# would pile up in memory without bound.
MAX_BACKLOG = 5000
_APPEND_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_APPEND | getattr(os, "O_CLOEXEC", 0)

_stamp_lock = threading.Lock()
_stamp_cache: tuple[int, str] = (-1, "")


def _stamp(now: float | None = None) -> str:
    """Local ``yyyy-MM-dd HH:mm:ss`` for ``now``, cached per second (hot path)."""
    global _stamp_cache
    second = int(time.time() if now is None else now)
    cached = _stamp_cache
    if cached[0] == second:
        return cached[1]
    text = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(second))
    with _stamp_lock:
        _stamp_cache = (second, text)
    return text


def format_line(source: str, lineno: int, thread: str, message: str) -> str:
    """One log line in the reference's shape (without the newline)."""
    return f"{_stamp()} [{source}]-[{lineno}]-[{thread}] {message}"


def _check_ids(log_date_time_ms: int, log_id: int) -> None:
    if isinstance(log_id, bool) or not isinstance(log_id, int) or log_id <= 0:
        raise ValueError(f"invalid logId {log_id!r}: must be a positive integer")
    if isinstance(log_date_time_ms, bool) or not isinstance(log_date_time_ms, int) or log_date_time_ms < 0:
        raise ValueError(f"invalid logDateTim {log_date_time_ms!r}: must be a non-negative integer")


def _flush_at_exit(ref: weakref.ref[RunLog]) -> None:
    runlog = ref()
    if runlog is not None:
        runlog.flush()


class RunLogWriter:
    """Collects one run's lines; a background thread of the RunLog appends them to the file.

    ``write_line`` never touches the disk (the event loop must not wait on a
    slow file system); lines are flushed in batches by the RunLog's writer
    thread, and before any ``RunLog.read`` of the same file, so a reader always
    sees every line written so far. Thread-safe; lines written after
    :meth:`close` (a thread that outlived its run) are still appended.
    """

    __slots__ = ("path", "_runlog", "_lock", "_io_lock", "_pending", "_queued", "_closed")

    def __init__(self, runlog: RunLog, path: str) -> None:
        self.path = path  # a str: the hot path avoids pathlib
        self._runlog = runlog
        self._lock = threading.Lock()  # guards the pending batch; held only briefly
        self._io_lock = threading.Lock()  # one flush at a time per file, in order
        self._pending: list[str] = []
        self._queued = False
        self._closed = False

    def write_line(self, line: str) -> None:
        data = line if line.endswith("\n") else line + "\n"
        with self._lock:
            self._pending.append(data)
            if self._queued:
                return
            self._queued = True
        self._runlog._enqueue(self)

    def close(self) -> None:
        """The run is over; pending lines are still written."""
        with self._lock:
            self._closed = True
            if self._queued:
                return
            self._queued = True
        self._runlog._enqueue(self)

    def flush(self) -> None:
        """Append pending lines to the file now (called by the writer thread or a reader)."""
        with self._io_lock:
            with self._lock:
                batch, self._pending = self._pending, []
                self._queued = False
                done = self._closed
            if batch:
                self._runlog.append_bytes(self.path, "".join(batch).encode("utf-8", "replace"))
            if done:
                with self._lock:
                    if not self._queued:  # nothing arrived meanwhile: readers need not find it anymore
                        self._runlog._forget(self)


class RunLog:
    """The executor's run log folder: paths, writers, ranged reads, retention cleanup."""

    def __init__(
        self,
        base_path: str | Path,
        *,
        tz: tzinfo | None = None,
        max_read_lines: int = 5000,
        max_read_bytes: int = 1 << 20,
        max_line_bytes: int = 64 << 10,
        max_backlog: int = MAX_BACKLOG,
    ) -> None:
        self.base = Path(base_path).absolute()
        self.tz = tz
        self.max_read_lines = max_read_lines
        self.max_read_bytes = max_read_bytes
        self.max_line_bytes = max_line_bytes
        self.max_backlog = max_backlog
        self._known_dirs: set[str] = set()
        self._base_text = str(self.base)
        self._days: dict[int, str] = {}
        self._active: dict[str, RunLogWriter] = {}
        self._dirty: deque[RunLogWriter] = deque()
        self._wake = threading.Event()
        self._wake_pending = False
        self._thread: threading.Thread | None = None
        self._thread_lock = threading.Lock()
        atexit.register(_flush_at_exit, weakref.ref(self))

    @property
    def glue_dir(self) -> Path:
        """Where GLUE sources are written (``<base>/gluesource``)."""
        return self.base / GLUE_SOURCE_DIR

    def _day(self, log_date_time_ms: int) -> str:
        minute = log_date_time_ms // 60000  # every zone offset is whole minutes: a day never splits one
        day = self._days.get(minute)
        if day is None:
            try:
                moment = datetime.fromtimestamp(log_date_time_ms / 1000, tz=self.tz)
            except (OverflowError, OSError, ValueError) as exc:
                raise ValueError(f"invalid logDateTim {log_date_time_ms!r}: out of range") from exc
            day = moment.strftime("%Y-%m-%d")
            if len(self._days) > 4096:
                self._days.clear()
            self._days[minute] = day
        return day

    def path_for(self, log_date_time_ms: int, log_id: int) -> Path:
        """``<base>/<yyyy-mm-dd>/<logId>-<epoch s>.log``; raises ValueError for ids that are not sane."""
        return Path(self._path_text(log_date_time_ms, log_id))

    def _path_text(self, log_date_time_ms: int, log_id: int) -> str:
        _check_ids(log_date_time_ms, log_id)
        # Only digits and dashes are joined to the base: no path tricks can get through.
        return f"{self._base_text}/{self._day(log_date_time_ms)}/{log_id}-{log_date_time_ms // 1000}.log"

    def _read_candidates(self, log_date_time_ms: int, log_id: int) -> list[str]:
        exact = self._path_text(log_date_time_ms, log_id)
        if log_date_time_ms < 1000:
            return [exact]
        # The second before: a trigger time stored in a DATETIME(0) column may be rounded up.
        previous = (log_date_time_ms // 1000 - 1) * 1000
        return [exact, self._path_text(previous, log_id)]

    def check(self, log_date_time_ms: int, log_id: int) -> None:
        """Raise ValueError unless the ids make a valid log path (cheap; builds no path)."""
        _check_ids(log_date_time_ms, log_id)
        self._day(log_date_time_ms)

    # --- background writing -------------------------------------------------------------------

    def behind(self, limit: int | None = None) -> bool:
        """Whether more than ``limit`` (default ``max_backlog``) run logs wait for the writer."""
        return len(self._dirty) > (self.max_backlog if limit is None else limit)

    def _enqueue(self, writer: RunLogWriter) -> None:
        self._active.setdefault(writer.path, writer)  # a late line after the run: readers must flush it
        if self._thread is None:
            self._start_thread()
        self._dirty.append(writer)
        # Wake the writer thread once per batch, not once per line: each wake-up costs a GIL hand-off.
        if not self._wake_pending:
            self._wake_pending = True
            self._wake.set()

    def _start_thread(self) -> None:
        with self._thread_lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._write_loop, name="jobring-runlog", daemon=True)
                self._thread.start()

    def _write_loop(self) -> None:
        while True:
            self._wake.wait()
            time.sleep(_COALESCE_S)  # let a burst gather; readers flush what they need themselves
            self._wake.clear()
            self._wake_pending = False
            while self._dirty:
                writer = self._dirty.popleft()
                try:
                    writer.flush()
                except OSError:
                    # A full or read-only disk must not kill the writer thread; the lines are lost.
                    logger.exception("run log: writing %s failed", writer.path)

    def _forget(self, writer: RunLogWriter) -> None:
        if self._active.get(writer.path) is writer:
            del self._active[writer.path]

    def flush(self) -> None:
        """Write every pending line now (shutdown, tests)."""
        for writer in list(self._active.values()):
            writer.flush()

    def append_bytes(self, path: str, data: bytes) -> None:
        """Append ``data`` to ``path``, creating the file (and its day folder) as needed."""
        # os.open/os.write: no file object, codec or buffer per run (a run's file is written
        # once or twice), and the GIL is released in each system call.
        try:
            fd = os.open(path, _APPEND_FLAGS, 0o666)
        except FileNotFoundError:  # first file of the day, or the day folder was cleaned up
            os.makedirs(os.path.dirname(path), exist_ok=True)
            fd = os.open(path, _APPEND_FLAGS, 0o666)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
        finally:
            os.close(fd)

    def open_append(self, path: str) -> TextIO:
        folder = os.path.dirname(path)
        if folder not in self._known_dirs:
            os.makedirs(folder, exist_ok=True)
            self._known_dirs.add(folder)
        try:
            return open(path, "a", encoding="utf-8")  # noqa: SIM115 - the caller closes it
        except FileNotFoundError:  # the day folder was cleaned up meanwhile
            os.makedirs(folder, exist_ok=True)
            return open(path, "a", encoding="utf-8")  # noqa: SIM115

    def writer(self, log_date_time_ms: int, log_id: int) -> RunLogWriter:
        """A writer for one run; the file is created when its first lines are flushed."""
        path = self._path_text(log_date_time_ms, log_id)
        writer = self._active.get(path)
        if writer is None:
            writer = self._active[path] = RunLogWriter(self, path)
        return writer

    def append(self, log_date_time_ms: int, log_id: int, line: str) -> None:
        """Append one line to a run's log (written in the background, in order with the run's lines)."""
        path = self._path_text(log_date_time_ms, log_id)
        writer = self._active.get(path)
        if writer is None:
            writer = self._active[path] = RunLogWriter(self, path)
            writer.write_line(line)
            writer.close()
        else:
            writer.write_line(line)

    def read(self, log_date_time_ms: int, log_id: int, from_line: int) -> LogResult:
        """Lines ``from_line..`` (1-based) of a run's log, bounded in lines and bytes."""
        fh = self._open_for_read(self._read_candidates(log_date_time_ms, log_id))
        if fh is None:
            return LogResult(from_line, 0, MSG_LOG_FILE_NOT_EXISTS, True)
        with fh:
            start = max(from_line, 1)
            line_no = self._skip_to(fh, start)  # lines fully before the current position
            if line_no < start - 1:
                return LogResult(from_line, line_no, "", False)
            lines, last = self._collect(fh, line_no)
        return LogResult(from_line, last, "".join(lines), False)

    def _open_for_read(self, paths: list[str]) -> BinaryIO | None:
        for path in paths:
            pending = self._active.get(path)
            if pending is not None:
                pending.flush()
            try:
                return open(path, "rb")  # noqa: SIM115 - the caller closes it
            except FileNotFoundError:
                continue
        return None

    def _skip_to(self, fh: BinaryIO, start: int) -> int:
        """Position ``fh`` at the beginning of line ``start``; return how many lines precede it."""
        done = 0
        while done < start - 1:
            chunk_pos = fh.tell()
            chunk = fh.read(_CHUNK)
            if not chunk:
                return done
            newlines = chunk.count(b"\n")
            if done + newlines < start - 1:
                done += newlines
                continue
            idx = 0
            while done < start - 1:
                idx = chunk.index(b"\n", idx) + 1
                done += 1
            fh.seek(chunk_pos + idx)
        return done

    def _collect(self, fh: BinaryIO, line_no: int) -> tuple[list[str], int]:
        lines: list[str] = []
        used = 0
        while len(lines) < self.max_read_lines and used < self.max_read_bytes:
            raw = fh.readline(self.max_line_bytes)
            if not raw:
                break
            if not raw.endswith(b"\n"):
                if len(raw) < self.max_line_bytes:
                    break  # unterminated tail: still being written
                raw = raw + b" ...(line cut)" + self._discard_rest_of_line(fh)
            used += len(raw)
            line_no += 1
            lines.append(raw.rstrip(b"\r\n").decode("utf-8", errors="replace") + "\n")
        return lines, line_no

    def _discard_rest_of_line(self, fh: BinaryIO) -> bytes:
        while True:
            rest = fh.readline(self.max_line_bytes)
            if not rest or rest.endswith(b"\n"):
                return b"\n"

    def cleanup(self, retention_days: int, now: datetime) -> int:
        """Delete day folders at least ``retention_days`` old; returns how many were removed.

        Below 3 days (e.g. -1 = keep forever) nothing is deleted, as the reference.
        """
        if retention_days < MIN_RETENTION_DAYS or not self.base.is_dir():
            return 0
        today = (now.astimezone(self.tz) if now.tzinfo else now).date()
        removed = 0
        for entry in self.base.iterdir():
            if not _DAY_DIR.fullmatch(entry.name) or not entry.is_dir() or entry.is_symlink():
                continue
            try:
                day = date.fromisoformat(entry.name)
            except ValueError:
                continue
            if today - day >= timedelta(days=retention_days):
                shutil.rmtree(entry)
                self._known_dirs.discard(str(entry))
                removed += 1
        return removed
