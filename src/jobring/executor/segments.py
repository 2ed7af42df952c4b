"""Run-log segments: the lines of many runs in one append-only file per day, with an index.

Layout (see docs/executor.md, "Run logs"):

- ``<day>/runs-<n>.log``: records, each a header line ``#jobring-run <logId>-<trigger second>
  <bytes>`` followed by that many bytes of one run's lines. A run's lines usually make one
  record (the writer thread gathers them for 10 ms); a run that writes over a longer time
  makes several, in order.
- ``<day>/runs-<n>.idx``: one 32-byte entry per record (little-endian int64 logId, trigger
  second, offset and length of the record's lines in ``runs-<n>.log``), in the order written.

Each process opens a segment of its own per day, the first ``n`` not used yet, created with
O_EXCL: a restarted executor, or two executors sharing a log folder, never append to the same
file, so the offsets a process counts are the file's. The lines are written before their index
entry: an entry found always points at lines on disk. No fsync (as the per-run files before).

Why not one file per run (the reference's layout): creating a file costs the kernel 20 µs on a
quiet ext4 and several times that after a mass delete (a retention cleanup, a bench's), and it
set the executor's pace under load (bench/RESULTS.md, issue 27). A segment costs two appends per
batch of runs, and retention deletes a handful of files per day instead of one per run.
"""

from __future__ import annotations

import bisect
import contextlib
import io
import os
import re
import struct

__all__ = ["ENTRY_SIZE", "Extent", "ExtentReader", "Segment", "find_extents", "index_files", "open_segment"]

Extent = tuple[str, int, int]  # segment file, offset of the lines, length in bytes

_ENTRY = struct.Struct("<qqqq")
_KEY = struct.Struct("<qq")
ENTRY_SIZE = _ENTRY.size
_SCAN_CHUNK = ENTRY_SIZE * 32768  # 1 MiB of entries: chunks never split one
_SEGMENT = re.compile(r"runs-(\d+)\.log")
_INDEX = re.compile(r"runs-(\d+)\.idx")
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_NEW_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND | _CLOEXEC
_INDEX_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND | _CLOEXEC


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


class Segment:
    """This process's segment of one day: appends records and their index entries."""

    __slots__ = ("log_path", "idx_path", "_log_fd", "_idx_fd", "size")

    def __init__(self, log_path: str, idx_path: str, log_fd: int, idx_fd: int) -> None:
        self.log_path = log_path
        self.idx_path = idx_path
        self._log_fd = log_fd
        self._idx_fd = idx_fd
        self.size = 0  # bytes in the file: only this process appends to it

    def gone(self) -> bool:
        """Whether the file was deleted under us (its day folder removed by hand)."""
        return os.fstat(self._log_fd).st_nlink == 0

    def append(self, records: list[tuple[int, int, bytes]]) -> list[Extent]:
        """Append ``(logId, second, lines)`` records; the extent of each one's lines, in order.

        Raises OSError; the segment must not be used after that (its size is unknown)."""
        parts: list[bytes] = []
        entries: list[bytes] = []
        extents: list[Extent] = []
        offset = self.size
        for log_id, second, data in records:
            header = b"#jobring-run %d-%d %d\n" % (log_id, second, len(data))
            offset += len(header)
            entries.append(_ENTRY.pack(log_id, second, offset, len(data)))
            extents.append((self.log_path, offset, len(data)))
            offset += len(data)
            parts.append(header)
            parts.append(data)
        _write_all(self._log_fd, b"".join(parts))
        self.size = offset
        _write_all(self._idx_fd, b"".join(entries))
        return extents

    def close(self) -> None:
        for fd in (self._log_fd, self._idx_fd):
            with contextlib.suppress(OSError):
                os.close(fd)


def open_segment(day_dir: str) -> Segment:
    """A new segment of this process in ``day_dir`` (created with the folder as needed)."""
    os.makedirs(day_dir, exist_ok=True)
    used = [int(m.group(1)) for name in os.listdir(day_dir) if (m := _SEGMENT.fullmatch(name))]
    n = max(used, default=-1) + 1
    while True:
        log_path = f"{day_dir}/runs-{n}.log"
        try:
            log_fd = os.open(log_path, _NEW_FLAGS, 0o666)
        except FileExistsError:  # another process took it just now
            n += 1
            continue
        break
    idx_path = f"{day_dir}/runs-{n}.idx"
    try:
        idx_fd = os.open(idx_path, _INDEX_FLAGS, 0o666)  # a stale one without its .log is replaced
    except OSError:
        os.close(log_fd)
        raise
    return Segment(log_path, idx_path, log_fd, idx_fd)


def index_files(day_dir: str) -> list[str]:
    """The day's index files, oldest segment first."""
    try:
        names = os.listdir(day_dir)
    except (FileNotFoundError, NotADirectoryError):
        return []
    found = sorted((int(m.group(1)), name) for name in names if (m := _INDEX.fullmatch(name)))
    return [f"{day_dir}/{name}" for _, name in found]


def find_extents(idx_path: str, log_id: int, second: int) -> list[Extent]:
    """The extents of one run's lines listed in an index file, in the order written.

    Reads the index in 1 MiB chunks and lets ``bytes.find`` look for the run's 16-byte key
    (9 ms of CPU for an index of 1,000,000 runs, 32 MB, from the page cache)."""
    needle = _KEY.pack(log_id, second)
    log_path = idx_path[: -len(".idx")] + ".log"
    found: list[Extent] = []
    try:
        fh = open(idx_path, "rb")  # noqa: SIM115 - closed below
    except FileNotFoundError:
        return found
    with fh:
        while chunk := fh.read(_SCAN_CHUNK):
            # Every chunk but the last is whole entries; the last may end inside an entry being
            # appended right now (left out below), and nothing after it is read.
            pos = chunk.find(needle)
            while pos >= 0:
                if pos % ENTRY_SIZE == 0 and pos + ENTRY_SIZE <= len(chunk):
                    _, _, offset, length = _ENTRY.unpack_from(chunk, pos)
                    found.append((log_path, offset, length))
                    pos = chunk.find(needle, pos + ENTRY_SIZE)
                else:  # the bytes matched across two entries
                    pos = chunk.find(needle, pos + 1)
            if len(chunk) < _SCAN_CHUNK:
                break
    return found


class ExtentReader(io.RawIOBase):
    """The extents of one run, read as one seekable stream (wrap it in ``io.BufferedReader``).

    Raises FileNotFoundError when a segment is gone (its day was cleaned up meanwhile)."""

    def __init__(self, extents: list[Extent]) -> None:
        super().__init__()
        self._fds: dict[str, int] = {}
        self._starts: list[int] = []
        self._parts: list[tuple[int, int, int]] = []  # fd, offset, length
        total = 0
        try:
            for path, offset, length in extents:
                fd = self._fds.get(path)
                if fd is None:
                    fd = self._fds[path] = os.open(path, os.O_RDONLY | _CLOEXEC)
                self._starts.append(total)
                self._parts.append((fd, offset, length))
                total += length
        except OSError:
            self.close()
            raise
        self._size = total
        self._pos = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, pos: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: self._size}[whence]
        self._pos = max(0, base + pos)
        return self._pos

    def readinto(self, buffer: memoryview) -> int:  # type: ignore[override]  # typeshed: Buffer
        if self._pos >= self._size:
            return 0
        part = bisect.bisect_right(self._starts, self._pos) - 1
        fd, offset, length = self._parts[part]
        skip = self._pos - self._starts[part]
        want = min(len(buffer), length - skip)
        data = os.pread(fd, want, offset + skip)
        if not data:  # the file is shorter than its index says (cut by hand): stop there
            self._size = self._pos
            return 0
        buffer[: len(data)] = data
        self._pos += len(data)
        return len(data)

    def close(self) -> None:
        fds, self._fds = self._fds, {}
        for fd in fds.values():
            with contextlib.suppress(OSError):
                os.close(fd)
        super().close()
