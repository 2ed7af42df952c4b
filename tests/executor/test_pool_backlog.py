"""Backpressure: while too many runs wait for a free sync-pool thread, /run waits (it is not refused)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from pathlib import Path

from jobring.executor.context import JobHandler
from jobring.executor.runlog import RunLog
from jobring.executor.worker import JobRunner
from tests.executor.enginekit import Reports, trigger


def _gated(started: list[int], gate: threading.Event) -> JobHandler:
    lock = threading.Lock()

    def blocked() -> None:
        with lock:
            started.append(1)
        if not gate.wait(10.0):
            raise RuntimeError("test gate never opened")

    return JobHandler("h", blocked)


async def _until(predicate: Callable[[], bool], within: float = 5.0) -> None:
    async with asyncio.timeout(within):
        while not predicate():  # noqa: ASYNC110 - changed by pool threads
            await asyncio.sleep(0.002)


async def test_runs_wait_while_too_many_wait_for_a_thread_then_go_on(tmp_path: Path) -> None:
    started: list[int] = []
    gate = threading.Event()
    reports = Reports()
    runner = JobRunner({"h": _gated(started, gate)}, RunLog(tmp_path / "logs"), reports,
                       sync_threads=2, max_waiting_runs=2)
    try:
        for job_id in range(1, 6):  # five jobs: two run, three wait for a thread (more than 2)
            assert (await asyncio.wait_for(runner.run(trigger(job_id, job_id)), 1.0)).code == 200
        await _until(lambda: len(started) == 2 and runner.waiting_for_thread() == 3)
        held = asyncio.create_task(runner.run(trigger(6, 6)))
        await asyncio.sleep(0.05)
        assert not held.done()  # held back until no more than 1 run waits for a thread
        gate.set()
        assert (await asyncio.wait_for(held, 5.0)).code == 200
        await reports.wait_count(6)
        assert sorted(r.log_id for r in reports.items) == [1, 2, 3, 4, 5, 6]
        assert all(r.handle_code == 200 for r in reports.items)
    finally:
        gate.set()
        await runner.close(timeout=2)


async def test_runs_queued_behind_a_serial_jobs_running_run_do_not_hold_back_run(tmp_path: Path) -> None:
    started: list[int] = []
    gate = threading.Event()
    reports = Reports()
    runner = JobRunner({"h": _gated(started, gate)}, RunLog(tmp_path / "logs"), reports,
                       sync_threads=2, max_waiting_runs=2)
    try:
        for log_id in range(1, 11):  # one SERIAL job: one run on a thread, nine queued behind it
            param = trigger(1, log_id, executor_block_strategy="SERIAL_EXECUTION")
            assert (await asyncio.wait_for(runner.run(param), 1.0)).code == 200
        await _until(lambda: len(started) == 1)
        assert runner.queued_count() == 9 and runner.waiting_for_thread() == 0
        # Other jobs: one takes the second thread, two more wait for one (not more than 2).
        for job_id in (2, 3, 4):
            assert (await asyncio.wait_for(runner.run(trigger(job_id, 100 + job_id)), 1.0)).code == 200
        await _until(lambda: len(started) == 2 and runner.waiting_for_thread() == 2)
        gate.set()
        await reports.wait_count(13)
        assert all(r.handle_code == 200 for r in reports.items)
    finally:
        gate.set()
        await runner.close(timeout=2)
