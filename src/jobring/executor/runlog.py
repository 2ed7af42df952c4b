"""Run logs: each run's lines, written by line, read by line range.

Choices (documented in docs/executor.md):

- A run's lines go to this process's segment of the run's day (``<base>/<yyyy-mm-dd>/runs-<n>.log``,
  one append-only file per day and process, with an index ``runs-<n>.idx``; see segments.py),
  not to a file of their own: creating a file per run set the executor's pace under load.
- A run is keyed by its ``logId`` AND its trigger time (``logDateTime`` of ``/run``,
  ``logDateTim`` of ``/log``) in whole epoch seconds, so an admin that reuses a log id (e.g. a
  deleted run's, or another admin's) never reads another run's lines. An XXL-JOB admin on
  MySQL sends ``/log`` the trigger time as stored (DATETIME rounds to the second), so a read
  also tries the second before. Files of the per-run layout before segments
  (``<logId>-<trigger second>.log`` in the day folder) are still read when the segments have
  nothing of the run; files of the older ``<logId>.log`` layout are not read.
- The day folder comes from the run's ``logDateTime`` in the executor's local
  time zone, as the reference executor does (pass ``tz`` to pin another zone).
- Lines look like the reference's:
  ``yyyy-MM-dd HH:mm:ss [module#function]-[line]-[thread] message``
  (second precision, local time); script output is written raw, one line each.
- Ids are checked before any path is built: ``logId`` must be a positive int and
  ``logDateTime`` a non-negative int within datetime's range; only digits and dashes are
  joined to the base folder. Bad ids raise ``ValueError``.
- ``read`` finds where the run's lines are (a writer of this process remembers them for its
  ``recent_runs`` latest runs; otherwise the day's index files are searched) and streams
  them: it counts newlines chunk by chunk up to ``from_line`` and then collects at most
  ``max_read_lines`` lines / ``max_read_bytes`` bytes (one overlong line is cut at
  ``max_line_bytes``), so memory stays bounded whatever the log's size. ``toLineNum`` is the
  last line returned; the admin asks again from ``toLineNum + 1``. A trailing line without
  its newline (still being written) is left for the next read. ``isEnd`` is always false for
  an existing log (the admin decides the end from the run's status), as the reference does.
- Writers never block the event loop on the disk: lines are gathered in memory and appended
  by one background thread, a batch of runs at a time (two writes per day: lines and index;
  no fsync); a ``read`` first writes out the run's pending lines, so a live /log read sees
  every line written so far. A run's lines are queued for that thread when the run ends (so
  a short run makes one record); those of a run still running are written by the thread's
  sweep every 0.5 s. Call ``flush()`` at shutdown. When more than ``max_backlog``
  run logs wait for that thread (a stuck or very slow disk), ``behind()`` says so and the
  engine holds back new runs until it catches up.
- ``cleanup`` deletes day folders at least ``retention_days`` old; below 3 days
  cleanup is off, as the reference's.
"""

from __future__ import annotations

import atexit
import io
import logging
import re
import shutil
import threading
import time
import weakref
from collections import OrderedDict, deque
from datetime import date, datetime, timedelta, tzinfo
from pathlib import Path
from typing import BinaryIO

from jobring.executor.segments import Extent, ExtentReader, Segment, find_extents, index_files, open_segment
from jobring.protocol.models import LogResult

__all__ = ["RunLog", "RunLogWriter", "format_line", "MSG_LOG_FILE_NOT_EXISTS", "GLUE_SOURCE_DIR"]

logger = logging.getLogger(__name__)

MSG_LOG_FILE_NOT_EXISTS = "readLog fail, logFile not exists"
GLUE_SOURCE_DIR = "gluesource"
MIN_RETENTION_DAYS = 3
_DAY_DIR = re.compile(r"\d{4}-\d{2}-\d{2}")  # fullmatch
_CHUNK = 1 << 20
_COALESCE_S = 0.01
# How often the writer thread writes the lines of runs still running (a run's lines are
# otherwise queued once, when it ends): at most this long in memory only. A read writes
# out the run's pending lines first, whatever their age.
_SWEEP_S = 0.5
# Run logs waiting for the writer thread beyond which new runs wait (see RunLog.behind): on a
# stuck or slow disk the pending lines would pile up in memory without bound.
MAX_BACKLOG = 5000
# Runs whose extents (where their lines went) are kept after they are written: a /log read of
# one of them needs no index search. Bounded: ~300 bytes each.
RECENT_RUNS = 10_000
_BATCH_RUNS = 2000  # runs per batch of the writer thread (bounds the bytes joined at once)
_READ_BUFFER = 64 << 10

RunKey = tuple[str, int, int]  # day folder, logId, trigger second

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
    if type(log_id) is int and type(log_date_time_ms) is int and log_id > 0 and log_date_time_ms >= 0:
        return  # the usual case, decided by four cheap tests (bool is not exactly int)
    if isinstance(log_id, bool) or not isinstance(log_id, int) or log_id <= 0:
        raise ValueError(f"invalid logId {log_id!r}: must be a positive integer")
    if isinstance(log_date_time_ms, bool) or not isinstance(log_date_time_ms, int) or log_date_time_ms < 0:
        raise ValueError(f"invalid logDateTim {log_date_time_ms!r}: must be a non-negative integer")


def _flush_at_exit(ref: weakref.ref[RunLog]) -> None:
    runlog = ref()
    if runlog is not None:
        runlog.flush()


class RunLogWriter:
    """Collects one run's lines; the RunLog's writer thread appends them to the day's segment.

    ``write_line`` never touches the disk (the event loop must not wait on a
    slow file system); lines are written in batches by the RunLog's writer
    thread, and before any ``RunLog.read`` of the same run, so a reader always
    sees every line written so far. Thread-safe; lines written after
    :meth:`close` (a thread that outlived its run) are still appended. The
    writer keeps where its lines went (``extents``), so reading a recent run
    needs no index look-up.
    """

    __slots__ = ("key", "day_dir", "log_id", "second", "extents", "_runlog", "_pending", "_queued", "_closed")

    def __init__(self, runlog: RunLog, day_dir: str, log_id: int, second: int) -> None:
        self.key = (day_dir, log_id, second)
        self.day_dir = day_dir
        self.log_id = log_id
        self.second = second
        self.extents: list[Extent] = []  # written by the RunLog under its segment lock
        self._runlog = runlog
        # No lock (a run writes ~3 lines; a lock per line cost more than the rest of the
        # line's path): lines are appended to a deque and taken one by one (each step atomic),
        # and ``_queued`` goes down before the lines are taken, so a line written meanwhile is
        # taken now or queues its writer again; at worst the writer is queued once too often.
        self._pending: deque[str] = deque()
        self._queued = False
        self._closed = False

    def write_line(self, line: str) -> None:
        self._pending.append(line if line.endswith("\n") else line + "\n")
        # A running run's lines wait for its close (one record per run, its writer queued
        # once) or for the writer thread's sweep; only a late line (after the close) queues.
        if self._closed and not self._queued:
            self._queued = True
            self._runlog._enqueue(self)

    def close(self) -> None:
        """The run is over; pending lines are still written."""
        self._closed = True
        if not self._queued:
            self._queued = True
            self._runlog._enqueue(self)

    def flush(self) -> None:
        """Append pending lines now (a reader, shutdown)."""
        self._runlog._write_out([self])

    def _take(self) -> tuple[list[str], bool]:
        """The lines written so far, and whether the run was over before them (caller holds
        the RunLog's segment lock: one taker at a time)."""
        self._queued = False
        closed = self._closed
        pending = self._pending
        return [pending.popleft() for _ in range(len(pending))], closed

    @property
    def queued(self) -> bool:
        """Whether lines (or the close) wait for the writer thread."""
        return self._queued

    def has_lines(self) -> bool:
        """Whether lines wait to be written."""
        return bool(self._pending)


class RunLog:
    """The executor's run log folder: writers, segments, ranged reads, retention cleanup."""

    def __init__(
        self,
        base_path: str | Path,
        *,
        tz: tzinfo | None = None,
        max_read_lines: int = 5000,
        max_read_bytes: int = 1 << 20,
        max_line_bytes: int = 64 << 10,
        max_backlog: int = MAX_BACKLOG,
        recent_runs: int = RECENT_RUNS,
    ) -> None:
        self.base = Path(base_path).absolute()
        self.tz = tz
        self.max_read_lines = max_read_lines
        self.max_read_bytes = max_read_bytes
        self.max_line_bytes = max_line_bytes
        self.max_backlog = max_backlog
        self.recent_runs = recent_runs
        self._base_text = str(self.base)
        self._days: dict[int, str] = {}
        self._active: dict[RunKey, RunLogWriter] = {}  # runs with lines not written yet
        # Where runs written out lately went (oldest first).
        self._recent: OrderedDict[RunKey, list[Extent]] = OrderedDict()
        self._dirty: deque[RunLogWriter] = deque()
        self._writing = 0  # run logs the writer thread took and is writing
        self._segments: dict[str, Segment] = {}  # day folder -> this process's segment
        self._own_indexes: set[str] = set()  # index files this process wrote
        self._seg_lock = threading.Lock()  # one append at a time; lines of a run in order
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
        """The run's own file of the layout before segments, ``<base>/<yyyy-mm-dd>/<logId>-<epoch
        s>.log``: still read when the segments have nothing of the run. Raises ValueError for ids
        that are not sane."""
        return Path(self._path_text(log_date_time_ms, log_id))

    def _day_dir(self, log_date_time_ms: int) -> str:
        # Only digits and dashes are joined to the base: no path tricks can get through.
        return f"{self._base_text}/{self._day(log_date_time_ms)}"

    def _path_text(self, log_date_time_ms: int, log_id: int) -> str:
        _check_ids(log_date_time_ms, log_id)
        return f"{self._day_dir(log_date_time_ms)}/{log_id}-{log_date_time_ms // 1000}.log"

    def _read_candidates(self, log_date_time_ms: int, log_id: int) -> list[int]:
        _check_ids(log_date_time_ms, log_id)
        if log_date_time_ms < 1000:
            return [log_date_time_ms]
        # The second before: a trigger time stored in a DATETIME(0) column may be rounded up.
        return [log_date_time_ms, (log_date_time_ms // 1000 - 1) * 1000]

    def check(self, log_date_time_ms: int, log_id: int) -> None:
        """Raise ValueError unless the ids are valid (cheap; builds no path)."""
        _check_ids(log_date_time_ms, log_id)
        self._day(log_date_time_ms)

    # --- background writing -------------------------------------------------------------------

    def behind(self, limit: int | None = None) -> bool:
        """Whether more than ``limit`` (default ``max_backlog``) run logs wait for the writer."""
        return len(self._dirty) + self._writing > (self.max_backlog if limit is None else limit)

    def _enqueue(self, writer: RunLogWriter) -> None:
        self._active.setdefault(writer.key, writer)  # a late line after the run: readers must flush it
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
        dirty = self._dirty
        swept = time.monotonic()
        while True:
            if self._wake.wait(_SWEEP_S):
                time.sleep(_COALESCE_S)  # let a burst gather; readers flush what they need themselves
            self._wake.clear()
            self._wake_pending = False
            if time.monotonic() - swept >= _SWEEP_S:
                swept = time.monotonic()
                self._sweep()
            while dirty:
                count = min(len(dirty), _BATCH_RUNS)
                self._writing = count  # still counted as behind until written
                batch = [dirty.popleft() for _ in range(count)]
                try:
                    self._write_out(batch)
                except Exception:  # the thread must go on: /run waits while it is behind
                    logger.exception("run log: writing a batch of %d run(s) failed", count)
                finally:
                    self._writing = 0

    def _sweep(self) -> None:
        """Write the lines of runs still running (a closed run's writer is queued)."""
        try:
            # list() of the values takes them in one step (no other thread runs meanwhile).
            running = [writer for writer in list(self._active.values()) if writer.has_lines()]
            if running:
                self._write_out(running)
        except Exception:  # the thread must go on
            logger.exception("run log: writing the lines of running runs failed")

    def _write_out(self, writers: list[RunLogWriter]) -> None:
        """Append the writers' pending lines to their days' segments (one write per day)."""
        with self._seg_lock:
            by_day: dict[str, list[tuple[RunLogWriter, bytes]]] = {}
            done: list[RunLogWriter] = []
            for writer in writers:
                lines, closed = writer._take()
                if lines:
                    data = "".join(lines).encode("utf-8", "replace")
                    by_day.setdefault(writer.day_dir, []).append((writer, data))
                if closed:
                    done.append(writer)
            for day_dir, records in by_day.items():
                try:
                    self.append_records(day_dir, records)
                except OSError:
                    # A full or read-only disk must not kill the writer thread; the lines are lost.
                    logger.exception("run log: writing %d run(s) to %s failed", len(records), day_dir)
            for writer in done:
                if not writer.queued:  # nothing arrived meanwhile: it need not be flushed anymore
                    self._forget(writer)

    def append_records(self, day_dir: str, records: list[tuple[RunLogWriter, bytes]]) -> None:
        """Append runs' lines to this process's segment of ``day_dir`` (caller holds the lock)."""
        segment = self._segments.get(day_dir)
        if segment is not None and segment.gone():  # the day folder was removed by hand
            segment.close()
            segment = None
        if segment is None:
            segment = self._segments[day_dir] = open_segment(day_dir)
            self._own_indexes.add(segment.idx_path)
        try:
            extents = segment.append([(w.log_id, w.second, data) for w, data in records])
        except OSError:
            segment.close()  # its size is unknown now: the next batch starts a new segment
            del self._segments[day_dir]
            raise
        for (writer, _), extent in zip(records, extents, strict=True):
            writer.extents.append(extent)

    def _forget(self, writer: RunLogWriter) -> None:
        key = writer.key
        if self._active.get(key) is writer:
            del self._active[key]
        recent = self._recent
        recent[key] = writer.extents  # the same list: a late line's record is added to it
        recent.move_to_end(key)
        if len(recent) > self.recent_runs:
            # O(1): a plain dict's first key is found by skipping the slots of every key
            # deleted before it, which grew with each run (5.7 % of the executor's Python CPU).
            recent.popitem(last=False)

    def flush(self) -> None:
        """Write every pending line now (shutdown, tests)."""
        self._write_out(list(self._active.values()))

    def writer(self, log_date_time_ms: int, log_id: int) -> RunLogWriter:
        """A writer for one run; its lines reach the disk in the writer thread's next batch."""
        _check_ids(log_date_time_ms, log_id)
        key = (self._day_dir(log_date_time_ms), log_id, log_date_time_ms // 1000)
        writer = self._active.get(key)
        if writer is None:
            writer = self._active[key] = RunLogWriter(self, *key)
        if self._thread is None:  # its sweep writes the lines of runs that are still running
            self._start_thread()
        return writer

    def append(self, log_date_time_ms: int, log_id: int, line: str) -> None:
        """Append one line to a run's log (written in the background, in order with the run's lines)."""
        _check_ids(log_date_time_ms, log_id)
        key = (self._day_dir(log_date_time_ms), log_id, log_date_time_ms // 1000)
        writer = self._active.get(key)
        if writer is None:  # not a running run's: written once, then forgotten
            writer = self._active[key] = RunLogWriter(self, *key)
            writer.write_line(line)
            writer.close()
        else:
            writer.write_line(line)

    # --- reading ------------------------------------------------------------------------------

    def read(self, log_date_time_ms: int, log_id: int, from_line: int) -> LogResult:
        """Lines ``from_line..`` (1-based) of a run's log, bounded in lines and bytes."""
        fh = self._open_for_read(log_id, self._read_candidates(log_date_time_ms, log_id))
        if fh is None:
            return LogResult(from_line, 0, MSG_LOG_FILE_NOT_EXISTS, True)
        with fh:
            start = max(from_line, 1)
            line_no = self._skip_to(fh, start)  # lines fully before the current position
            if line_no < start - 1:
                return LogResult(from_line, line_no, "", False)
            lines, last = self._collect(fh, line_no)
        return LogResult(from_line, last, "".join(lines), False)

    def _open_for_read(self, log_id: int, stamps: list[int]) -> BinaryIO | None:
        for stamp in stamps:
            day_dir = self._day_dir(stamp)
            extents = self._extents(day_dir, log_id, stamp // 1000)
            try:
                if extents:
                    return io.BufferedReader(ExtentReader(extents), _READ_BUFFER)
                return open(f"{day_dir}/{log_id}-{stamp // 1000}.log", "rb")  # noqa: SIM115 - the caller closes it
            except FileNotFoundError:  # no file of the earlier layout, or the day was cleaned up
                continue
        return None

    def _extents(self, day_dir: str, log_id: int, second: int) -> list[Extent]:
        """Where a run's lines are, oldest first: a writer of this process knows its own; the
        index files tell the rest (those of earlier processes, or of every process when this
        one no longer remembers the run)."""
        key = (day_dir, log_id, second)
        writer = self._active.get(key)
        if writer is not None:
            writer.flush()
            known: list[Extent] | None = writer.extents
        else:
            known = self._recent.get(key)
        own: list[Extent] = []
        skip: set[str] = set()
        if known is not None:
            with self._seg_lock:
                own = list(known)
                skip = set(self._own_indexes)
        found: list[Extent] = []
        for idx_path in index_files(day_dir):
            if idx_path not in skip:
                found += find_extents(idx_path, log_id, second)
        return found + own

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
                with self._seg_lock:  # a late line of that day opens a new segment
                    segment = self._segments.pop(str(entry), None)
                    if segment is not None:
                        segment.close()
                        self._own_indexes.discard(segment.idx_path)
                shutil.rmtree(entry)
                removed += 1
        return removed
