"""Backpressure: while the run-log writer is far behind, /run waits instead of piling lines up."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import pytest

from jobring.executor.context import JobContext, JobHandler
from jobring.executor.runlog import RunLog, RunLogWriter
from jobring.executor.worker import MSG_NOT_ACCEPTING, JobRunner
from tests.executor.enginekit import Reports, trigger


async def test_runs_wait_while_the_writer_is_behind_and_go_on_when_it_catches_up(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    runlog = RunLog(tmp_path / "logs", max_backlog=4)
    disk = threading.Event()  # the disk is stuck until the test lets it go
    real_append = runlog.append_records

    def stuck_append(day_dir: str, records: list[tuple[RunLogWriter, bytes]]) -> None:
        if not disk.wait(10.0):
            raise OSError("test disk never came back")
        real_append(day_dir, records)

    monkeypatch.setattr(runlog, "append_records", stuck_append)

    async def quick(ctx: JobContext) -> None:
        ctx.log("done")

    reports = Reports()
    runner = JobRunner({"h": JobHandler("h", quick)}, runlog, reports)
    try:
        for log_id in range(1, 6):  # five runs, five files waiting: more than 4
            assert (await runner.run(trigger(log_id, log_id))).code == 200
            await reports.wait(log_id)
        assert runlog.behind()
        held = asyncio.create_task(runner.run(trigger(6, 6)))
        await asyncio.sleep(0.05)
        assert not held.done()  # held back until the writer is no more than 2 files behind
        disk.set()
        assert (await asyncio.wait_for(held, 5.0)).code == 200
        await reports.wait(6)
    finally:
        disk.set()
        await runner.close(timeout=2)
    for log_id in range(1, 7):  # nothing was lost while the disk was stuck
        assert "done" in runlog.read(trigger(log_id, log_id).log_date_time, log_id, 1).log_content


async def test_a_run_held_back_when_the_executor_stops_is_refused_at_once(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    runlog = RunLog(tmp_path / "logs", max_backlog=1)
    disk = threading.Event()  # stuck for the whole test: the writer never catches up
    real_append = runlog.append_records

    def stuck_append(day_dir: str, records: list[tuple[RunLogWriter, bytes]]) -> None:
        if not disk.wait(10.0):
            raise OSError("test disk never came back")
        real_append(day_dir, records)

    monkeypatch.setattr(runlog, "append_records", stuck_append)

    async def quick(ctx: JobContext) -> None:
        ctx.log("done")

    reports = Reports()
    runner = JobRunner({"h": JobHandler("h", quick)}, runlog, reports)
    try:
        for log_id in (1, 2):
            assert (await runner.run(trigger(log_id, log_id))).code == 200
            await reports.wait(log_id)
        assert runlog.behind()
        held = asyncio.create_task(runner.run(trigger(3, 3)))
        await asyncio.sleep(0.05)
        assert not held.done()
        closing = asyncio.create_task(runner.close(timeout=2))
        answer = await asyncio.wait_for(held, 5.0)
        assert answer.code != 200 and answer.msg == MSG_NOT_ACCEPTING
        disk.set()
        await asyncio.wait_for(closing, 10.0)
    finally:
        disk.set()
