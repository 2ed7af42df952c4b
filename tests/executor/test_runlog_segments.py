"""Run-log segments: many runs per file, found again through the writer or the day's index."""

from __future__ import annotations

import shutil
import struct
import time
import tracemalloc
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from jobring.executor.runlog import MSG_LOG_FILE_NOT_EXISTS, RunLog
from jobring.executor.segments import find_extents

T = 1795350973184  # 2026-11-22T05:56:13Z
DAY = "2026-11-22"


@pytest.fixture
def base(tmp_path: Path) -> Path:
    return tmp_path / "logs"


def _content(runlog: RunLog, log_id: int, from_line: int = 1, stamp: int = T) -> str:
    return runlog.read(stamp, log_id, from_line).log_content


def test_interleaved_runs_read_back_apart_and_in_order(base: Path) -> None:
    runlog = RunLog(base, tz=UTC)
    first, second = runlog.writer(T, 1), runlog.writer(T, 2)
    for n in range(3):  # a flush per round: each run's lines end up in several records
        first.write_line(f"a{n}")
        second.write_line(f"b{n}")
        runlog.flush()
    first.close()
    second.close()
    runlog.flush()
    assert _content(runlog, 1) == "a0\na1\na2\n"
    assert _content(runlog, 2, 2) == "b1\nb2\n"
    result = runlog.read(T, 2, 3)
    assert (result.to_line_num, result.log_content) == (3, "b2\n")
    assert sorted(p.name for p in (base / DAY).iterdir()) == ["runs-0.idx", "runs-0.log"]


def test_a_run_no_longer_remembered_is_found_through_the_index(base: Path) -> None:
    runlog = RunLog(base, tz=UTC, recent_runs=2)
    for log_id in range(1, 6):
        runlog.append(T, log_id, f"line of {log_id}")
    runlog.flush()
    assert len(runlog._recent) == 2  # noqa: SLF001 - the memory bound is the point
    assert [_content(runlog, log_id) for log_id in (1, 5)] == ["line of 1\n", "line of 5\n"]
    assert _content(runlog, 6) == MSG_LOG_FILE_NOT_EXISTS


def test_a_restarted_executor_writes_a_new_segment_and_reads_the_old_one(base: Path) -> None:
    before = RunLog(base, tz=UTC)
    before.append(T, 7, "before the restart")
    before.flush()
    after = RunLog(base, tz=UTC)
    assert _content(after, 7) == "before the restart\n"  # from runs-0's index
    writer = after.writer(T, 7)  # the same run written again (e.g. sent again, not deduplicated)
    writer.write_line("after the restart")
    writer.close()
    after.flush()
    names = sorted(p.name for p in (base / DAY).iterdir())
    assert names == ["runs-0.idx", "runs-0.log", "runs-1.idx", "runs-1.log"]
    assert _content(after, 7) == "before the restart\nafter the restart\n"
    assert _content(RunLog(base, tz=UTC), 7) == "before the restart\nafter the restart\n"


def test_reads_of_a_live_run_see_each_line_at_once(base: Path) -> None:
    runlog = RunLog(base, tz=UTC)
    writer = runlog.writer(T, 3)
    seen = []
    for n in range(1, 4):
        writer.write_line(f"step {n}")
        result = runlog.read(T, 3, n)  # as the admin polls: from the line after the last one
        seen.append((result.to_line_num, result.log_content))
    assert seen == [(1, "step 1\n"), (2, "step 2\n"), (3, "step 3\n")]


def test_a_short_run_is_one_record_and_a_running_runs_lines_reach_the_disk_unread(base: Path) -> None:
    runlog = RunLog(base, tz=UTC)
    short = runlog.writer(T, 5)
    for n in range(3):
        short.write_line(f"s{n}")
    short.close()
    running = runlog.writer(T, 6)
    running.write_line("still running")  # no close, no read: the writer thread's sweep writes it
    segment = base / DAY / "runs-0.log"
    deadline = time.monotonic() + 10.0
    while not (segment.exists() and b"still running" in segment.read_bytes()):
        assert time.monotonic() < deadline, "a running run's line never reached the disk"
        time.sleep(0.02)
    records = [line for line in segment.read_bytes().splitlines() if line.startswith(b"#jobring-run 5-")]
    assert len(records) == 1  # the run's three lines were taken together, at its close
    assert _content(runlog, 5) == "s0\ns1\ns2\n" and _content(runlog, 6) == "still running\n"


def test_a_late_line_after_its_day_was_cleaned_up_opens_a_new_segment(base: Path) -> None:
    runlog = RunLog(base, tz=UTC)
    runlog.append(T, 4, "first")
    runlog.flush()
    now = datetime(2026, 11, 22, tzinfo=UTC) + timedelta(days=5)
    assert runlog.cleanup(3, now) == 1 and not (base / DAY).exists()
    assert _content(runlog, 4) == MSG_LOG_FILE_NOT_EXISTS
    runlog.append(T, 4, "late")
    runlog.flush()
    assert _content(runlog, 4) == "late\n"


def test_a_day_folder_removed_by_hand_is_made_again(base: Path) -> None:
    runlog = RunLog(base, tz=UTC)
    runlog.append(T, 5, "gone")
    runlog.flush()
    shutil.rmtree(base / DAY)
    runlog.append(T, 5, "written again")
    runlog.flush()
    assert (base / DAY / "runs-0.log").read_text().endswith("written again\n")
    assert _content(runlog, 5) == "written again\n"


def test_a_trigger_time_rounded_up_finds_the_segment_record(base: Path) -> None:
    runlog = RunLog(base, tz=UTC, recent_runs=1)
    runlog.append(T + 600, 8, "line")
    runlog.append(T, 9, "pushes 8 out of memory")
    runlog.flush()
    assert _content(runlog, 8, stamp=T + 1000) == "line\n"
    assert _content(runlog, 8, stamp=T + 2000) == MSG_LOG_FILE_NOT_EXISTS


def test_the_index_search_ignores_keys_that_match_across_two_entries(tmp_path: Path) -> None:
    entry = struct.Struct("<qqqq")
    idx = tmp_path / "runs-0.idx"
    # Entry (1, 100, 2000, 5): its bytes 8..24 are the key of run (100, 2000).
    idx.write_bytes(entry.pack(1, 100, 2000, 5) + entry.pack(100, 2000, 40, 6) + b"\x01\x02")
    log = str(tmp_path / "runs-0.log")
    assert find_extents(str(idx), 100, 2000) == [(log, 40, 6)]
    assert find_extents(str(idx), 1, 100) == [(log, 2000, 5)]
    assert find_extents(str(tmp_path / "missing.idx"), 1, 100) == []


def test_reading_a_big_run_costs_little_memory(base: Path) -> None:
    runlog = RunLog(base, tz=UTC)
    line = "2026-11-22 12:36:13 [demo#run]-[1]-[MainThread] " + "y" * 150
    block = "\n".join([line] * 1000)
    neighbour = runlog.writer(T, 2)
    writer = runlog.writer(T, 1)
    for _ in range(130):  # ~26 MB in 130 records, a neighbour's record between each
        writer.write_line(block)
        neighbour.write_line("other run")
        runlog.flush()
    total = 130 * 1000
    tracemalloc.start()
    try:
        near_end = runlog.read(T, 1, total - 2)
        middle = runlog.read(T, 1, total // 2)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert near_end.to_line_num == total and near_end.log_content == f"{line}\n" * 3
    assert middle.to_line_num - middle.from_line_num + 1 == runlog.max_read_lines
    assert peak < 6 * 1024 * 1024, peak
