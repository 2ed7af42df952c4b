"""Run logs: path tricks, ranged streaming reads (also of the per-run files of the layout before
segments), memory bound, retention cleanup."""

from __future__ import annotations

import os
import tracemalloc
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from jobring.executor.runlog import MSG_LOG_FILE_NOT_EXISTS, RunLog, format_line

T = 1795350973184  # 2026-11-22T05:56:13Z


@pytest.fixture
def runlog(tmp_path: Path) -> RunLog:
    return RunLog(tmp_path / "logs", tz=UTC)


def test_path_layout(runlog: RunLog, tmp_path: Path) -> None:
    assert runlog.path_for(T, 1001) == tmp_path / "logs" / "2026-11-22" / f"1001-{T // 1000}.log"
    assert runlog.glue_dir == tmp_path / "logs" / "gluesource"


def test_a_reused_log_id_with_another_trigger_time_reads_nothing(runlog: RunLog) -> None:
    runlog.append(T, 7, "secret of the first run 7")
    runlog.flush()
    other = runlog.read(T + 60_000, 7, 1)
    assert other.log_content == MSG_LOG_FILE_NOT_EXISTS and other.to_line_num == 0
    assert "secret" in runlog.read(T, 7, 1).log_content


def test_a_trigger_time_rounded_up_to_the_second_still_finds_the_log(runlog: RunLog) -> None:
    # /run carried 12:00:00.600; an XXL-JOB admin on MySQL stores (and sends /log) 12:00:01.
    sent = T + 600
    runlog.append(sent, 8, "line")
    runlog.flush()
    assert runlog.read(T + 1000, 8, 1).log_content == "line\n"
    assert runlog.read(T + 600, 8, 1).log_content == "line\n"
    assert runlog.read(T + 2000, 8, 1).log_content == MSG_LOG_FILE_NOT_EXISTS


@pytest.mark.parametrize("log_id", [0, -1, True, "1", "../1", 1.5, None])
def test_path_tricks_in_log_id_are_refused(runlog: RunLog, log_id: object) -> None:
    with pytest.raises(ValueError, match="logId"):
        runlog.path_for(T, log_id)  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        runlog.read(T, log_id, 1)  # type: ignore[arg-type]


@pytest.mark.parametrize("stamp", [-1, 10**20, "2026-11-22", False])
def test_bad_log_date_time_is_refused(runlog: RunLog, stamp: object) -> None:
    with pytest.raises(ValueError, match="logDateTim"):
        runlog.path_for(stamp, 5)  # type: ignore[arg-type]


def test_missing_file_answers_like_the_reference(runlog: RunLog) -> None:
    result = runlog.read(T, 999999, 1)
    assert result.to_dict() == {
        "fromLineNum": 1,
        "toLineNum": 0,
        "logContent": MSG_LOG_FILE_NOT_EXISTS,
        "isEnd": True,
    }


def test_append_and_line_ranges(runlog: RunLog) -> None:
    for n in range(1, 5):
        runlog.append(T, 1001, f"line {n}")
    whole = runlog.read(T, 1001, 1)
    assert (whole.from_line_num, whole.to_line_num, whole.is_end) == (1, 4, False)
    assert whole.log_content == "line 1\nline 2\nline 3\nline 4\n"
    tail = runlog.read(T, 1001, 3)
    assert (tail.to_line_num, tail.log_content) == (4, "line 3\nline 4\n")
    nothing_new = runlog.read(T, 1001, 5)
    assert (nothing_new.to_line_num, nothing_new.log_content) == (4, "")
    beyond = runlog.read(T, 1001, 100)
    assert (beyond.from_line_num, beyond.to_line_num, beyond.log_content) == (100, 4, "")


def test_unterminated_tail_is_left_for_the_next_read(runlog: RunLog) -> None:
    path = runlog.path_for(T, 7)
    path.parent.mkdir(parents=True)
    path.write_bytes(b"one\r\ntwo\nthr")
    result = runlog.read(T, 7, 1)
    assert (result.to_line_num, result.log_content) == (2, "one\ntwo\n")
    with path.open("ab") as fh:
        fh.write(b"ee\n")
    again = runlog.read(T, 7, 3)
    assert (again.to_line_num, again.log_content) == (3, "three\n")


def test_reads_are_bounded_and_resume(tmp_path: Path) -> None:
    runlog = RunLog(tmp_path, tz=UTC, max_read_lines=10, max_line_bytes=100)
    path = runlog.path_for(T, 3)
    path.parent.mkdir(parents=True)
    path.write_text("".join(f"l{n}\n" for n in range(1, 26)) + "x" * 1000 + "\nlast\n")
    first = runlog.read(T, 3, 1)
    assert first.to_line_num == 10 and first.log_content.splitlines()[-1] == "l10"
    second = runlog.read(T, 3, first.to_line_num + 1)
    assert second.log_content.splitlines()[0] == "l11" and second.to_line_num == 20
    third = runlog.read(T, 3, 26)
    long_line, last = third.log_content.splitlines()
    assert long_line.startswith("x" * 100) and long_line.endswith("...(line cut)") and len(long_line) < 200
    assert (last, third.to_line_num) == ("last", 27)


def test_writer_keeps_lines_and_survives_late_writes(runlog: RunLog) -> None:
    writer = runlog.writer(T, 11)
    writer.write_line("a")
    assert runlog.read(T, 11, 1).log_content == "a\n"  # visible while the run is open
    writer.close()
    writer.write_line("late")  # a thread that outlived its run
    assert runlog.read(T, 11, 1).log_content == "a\nlate\n"


def test_line_format_is_close_to_the_reference() -> None:
    line = format_line("demo.jobs#hello", 12, "jobring, JobWorker-1", "hi")
    stamp, rest = line[:19], line[20:]
    datetime.strptime(stamp, "%Y-%m-%d %H:%M:%S")
    assert rest == "[demo.jobs#hello]-[12]-[jobring, JobWorker-1] hi"


def test_reading_a_big_file_costs_little_memory(tmp_path: Path) -> None:
    runlog = RunLog(tmp_path, tz=UTC)
    path = runlog.path_for(T, 42)
    path.parent.mkdir(parents=True)
    line = "2026-11-22 12:36:13 [demo#run]-[1]-[MainThread] " + "y" * 150 + "\n"
    count = 20 * 1024 * 1024 // len(line)
    with path.open("w") as fh:
        block = line * 1000
        for _ in range(count // 1000):
            fh.write(block)
    total = (count // 1000) * 1000
    assert path.stat().st_size > 19 * 1024 * 1024
    tracemalloc.start()
    try:
        near_end = runlog.read(T, 42, total - 2)
        middle = runlog.read(T, 42, total // 2)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert near_end.to_line_num == total and near_end.log_content.count("\n") == 3
    assert middle.to_line_num - middle.from_line_num + 1 == runlog.max_read_lines
    assert peak < 6 * 1024 * 1024, peak


def test_cleanup_deletes_old_day_folders_only(tmp_path: Path) -> None:
    runlog = RunLog(tmp_path, tz=UTC)
    now = datetime(2026, 11, 22, 12, 0, tzinfo=UTC)
    for days_ago in (0, 2, 3, 10):
        folder = tmp_path / (now - timedelta(days=days_ago)).strftime("%Y-%m-%d")
        folder.mkdir()
        (folder / "1.log").write_text("x\n")
    (tmp_path / "gluesource").mkdir()
    (tmp_path / "not-a-day").mkdir()
    os.symlink(tmp_path / "gluesource", tmp_path / "2000-01-01")
    assert runlog.cleanup(2, now) == 0  # below the minimum of 3 days: off, as the reference
    assert runlog.cleanup(3, now) == 2
    left = sorted(p.name for p in tmp_path.iterdir())
    assert left == ["2000-01-01", "2026-11-20", "2026-11-22", "gluesource", "not-a-day"]


def test_background_writer_reaches_the_disk_on_flush(runlog: RunLog, tmp_path: Path) -> None:
    writer = runlog.writer(T, 12)
    for n in range(3):
        writer.write_line(f"n{n}")
    writer.close()
    runlog.append(T, 12, "appended after the run")
    runlog.flush()
    day = tmp_path / "logs" / "2026-11-22"
    assert sorted(p.name for p in day.iterdir()) == ["runs-0.idx", "runs-0.log"]
    on_disk = (day / "runs-0.log").read_text()
    # One record: the late line arrived before the writer thread took the run's lines.
    assert on_disk == f"#jobring-run 12-{T // 1000} 32\nn0\nn1\nn2\nappended after the run\n"
    again = RunLog(tmp_path / "logs", tz=UTC)  # another process: through the index
    assert again.read(T, 12, 1).log_content == "n0\nn1\nn2\nappended after the run\n"
