"""The received-runs window on disk: written in batches, and before a run's handler starts."""

from __future__ import annotations

from pathlib import Path

from jobring.executor import received as received_module
from jobring.executor.context import JobContext, JobHandler
from jobring.executor.received import FILE_NAME, ReceivedRuns
from jobring.executor.runlog import RunLog
from jobring.executor.worker import JobRunner
from tests.executor.enginekit import LOG_TIME, Reports, trigger


def _on_disk(folder: Path) -> list[str]:
    path = folder / FILE_NAME
    return path.read_text().splitlines() if path.exists() else []


def test_add_remembers_at_once_and_writes_at_the_next_flush(tmp_path: Path) -> None:
    runs = ReceivedRuns(tmp_path)
    runs.add((1, 10))
    runs.add((2, 10))
    runs.add((1, 10))  # known: not written twice
    assert (1, 10) in runs and (2, 10) in runs
    assert _on_disk(tmp_path) == []
    runs.flush()
    assert _on_disk(tmp_path) == ["1 10", "2 10"]
    runs.add((3, 11))
    runs.close()  # writes what is pending
    assert _on_disk(tmp_path) == ["1 10", "2 10", "3 11"]
    assert (3, 11) in ReceivedRuns(tmp_path)


def test_a_long_pending_batch_is_written_without_a_flush(tmp_path: Path) -> None:
    runs = ReceivedRuns(tmp_path)
    for n in range(received_module.MAX_PENDING):
        runs.add((n + 1, 0))
    assert len(_on_disk(tmp_path)) == received_module.MAX_PENDING
    runs.close()


async def test_a_run_is_on_disk_before_its_handler_starts(tmp_path: Path) -> None:
    seen: list[list[str]] = []

    async def look(ctx: JobContext) -> None:
        seen.append(_on_disk(tmp_path))

    reports = Reports()
    runner = JobRunner({"h": JobHandler("h", look)}, RunLog(tmp_path / "logs"), reports,
                       received=ReceivedRuns(tmp_path))
    try:
        assert (await runner.run(trigger(1, 5))).ok
        assert (await runner.run(trigger(2, 6))).ok
        assert _on_disk(tmp_path) == []  # accepted, no handler started yet: not written yet
        await reports.wait(5)
        await reports.wait(6)
    finally:
        await runner.close(timeout=2)
    second = LOG_TIME // 1000
    # Both runs were accepted before either handler started: the first start wrote both at once.
    assert seen == [[f"5 {second}", f"6 {second}"]] * 2


def test_a_full_file_becomes_the_previous_one_and_the_window_survives_a_restart(tmp_path: Path) -> None:
    runs = ReceivedRuns(tmp_path, window=5)
    for n in range(1, 13):
        runs.add((n, 0))
        runs.flush()  # as the engine does before each handler starts
    # Full at 5 and at 10: the file of runs 6-10 is the previous one, 11-12 begin a new one.
    assert (tmp_path / received_module.PREVIOUS_FILE_NAME).read_text().split("\n")[:-1] == [
        f"{n} 0" for n in range(6, 11)]
    assert _on_disk(tmp_path) == ["11 0", "12 0"]
    # No close: as after a crash, the two files still hold the whole window.
    restarted = ReceivedRuns(tmp_path, window=5)
    assert sorted(r for r, _ in restarted._order) == [8, 9, 10, 11, 12]  # noqa: SLF001
    assert (7, 0) not in restarted
    restarted.add((13, 0))
    restarted.add((14, 0))
    restarted.add((15, 0))
    restarted.close()  # the current file reaches 5 lines: renamed, the runs 6-10 are gone
    assert not (tmp_path / FILE_NAME).exists()
    again = ReceivedRuns(tmp_path, window=5)
    assert sorted(r for r, _ in again._order) == [11, 12, 13, 14, 15]  # noqa: SLF001
    again.close()
