"""Per-run log files: ``<base>/<yyyy-mm-dd>/<logId>.log``, written by line, read by line range.

Choices (documented for the README):

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
- Writers keep the file open for the run only, line-buffered (one write per
  line, no fsync), so a live /log read sees every finished line.
- ``cleanup`` deletes day folders at least ``retention_days`` old; below 3 days
  cleanup is off, as the reference's.
"""

from __future__ import annotations

import re
import shutil
import threading
import time
from datetime import date, datetime, timedelta, tzinfo
from pathlib import Path
from typing import BinaryIO, TextIO

from jobring.protocol.models import LogResult

__all__ = ["RunLog", "RunLogWriter", "format_line", "MSG_LOG_FILE_NOT_EXISTS", "GLUE_SOURCE_DIR"]

MSG_LOG_FILE_NOT_EXISTS = "readLog fail, logFile not exists"
GLUE_SOURCE_DIR = "gluesource"
MIN_RETENTION_DAYS = 3
_DAY_DIR = re.compile(r"^\d{4}-\d{2}-\d{2}$")
_CHUNK = 1 << 20

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


class RunLogWriter:
    """Appends lines to one run's log file; open for the run, line-buffered.

    Thread-safe: a sync handler's thread and the event loop may both write.
    Writes after :meth:`close` (a thread that outlived its run) open, append
    and close the file once per line.
    """

    __slots__ = ("path", "_file", "_lock", "_closed", "_runlog")

    def __init__(self, runlog: RunLog, path: Path) -> None:
        self.path = path
        self._runlog = runlog
        self._file: TextIO | None = None
        self._lock = threading.Lock()
        self._closed = False

    def write_line(self, line: str) -> None:
        data = line if line.endswith("\n") else line + "\n"
        with self._lock:
            if self._closed:
                with self._runlog.open_append(self.path) as late:
                    late.write(data)
                return
            if self._file is None:
                self._file = self._runlog.open_append(self.path)
            self._file.write(data)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            if self._file is not None:
                self._file.close()
                self._file = None


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
    ) -> None:
        self.base = Path(base_path).absolute()
        self.tz = tz
        self.max_read_lines = max_read_lines
        self.max_read_bytes = max_read_bytes
        self.max_line_bytes = max_line_bytes
        self._known_dirs: set[Path] = set()

    @property
    def glue_dir(self) -> Path:
        """Where GLUE sources are written (``<base>/gluesource``)."""
        return self.base / GLUE_SOURCE_DIR

    def _day(self, log_date_time_ms: int) -> str:
        try:
            moment = datetime.fromtimestamp(log_date_time_ms / 1000, tz=self.tz)
        except (OverflowError, OSError, ValueError) as exc:
            raise ValueError(f"invalid logDateTim {log_date_time_ms!r}: out of range") from exc
        return moment.strftime("%Y-%m-%d")

    def path_for(self, log_date_time_ms: int, log_id: int) -> Path:
        """``<base>/<yyyy-mm-dd>/<logId>.log``; raises ValueError for ids that are not sane."""
        _check_ids(log_date_time_ms, log_id)
        path = self.base / self._day(log_date_time_ms) / f"{log_id}.log"
        if not path.is_relative_to(self.base):  # belt and braces: the parts above are digits only
            raise ValueError("log path escapes the log folder")
        return path

    def open_append(self, path: Path) -> TextIO:
        folder = path.parent
        if folder not in self._known_dirs:
            folder.mkdir(parents=True, exist_ok=True)
            self._known_dirs.add(folder)
        try:
            return path.open("a", encoding="utf-8", buffering=1)
        except FileNotFoundError:  # the day folder was cleaned up meanwhile
            folder.mkdir(parents=True, exist_ok=True)
            return path.open("a", encoding="utf-8", buffering=1)

    def writer(self, log_date_time_ms: int, log_id: int) -> RunLogWriter:
        """A writer for one run; the file is created at the first line."""
        return RunLogWriter(self, self.path_for(log_date_time_ms, log_id))

    def append(self, log_date_time_ms: int, log_id: int, line: str) -> None:
        """Append one line (opens and closes the file; use :meth:`writer` for many lines)."""
        with self.open_append(self.path_for(log_date_time_ms, log_id)) as fh:
            fh.write(line if line.endswith("\n") else line + "\n")

    def read(self, log_date_time_ms: int, log_id: int, from_line: int) -> LogResult:
        """Lines ``from_line..`` (1-based) of a run's log, bounded in lines and bytes."""
        path = self.path_for(log_date_time_ms, log_id)
        try:
            fh = path.open("rb")
        except FileNotFoundError:
            return LogResult(from_line, 0, MSG_LOG_FILE_NOT_EXISTS, True)
        with fh:
            start = max(from_line, 1)
            line_no = self._skip_to(fh, start)  # lines fully before the current position
            if line_no < start - 1:
                return LogResult(from_line, line_no, "", False)
            lines, last = self._collect(fh, line_no)
        return LogResult(from_line, last, "".join(lines), False)

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
            if not _DAY_DIR.match(entry.name) or not entry.is_dir() or entry.is_symlink():
                continue
            try:
                day = date.fromisoformat(entry.name)
            except ValueError:
                continue
            if today - day >= timedelta(days=retention_days):
                shutil.rmtree(entry)
                self._known_dirs.discard(entry)
                removed += 1
        return removed
