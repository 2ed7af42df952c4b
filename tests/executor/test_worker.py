"""JobRunner: results, block strategies, timeout/kill of async and thread handlers, lifecycle."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from jobring.executor.context import JobCancelled, JobContext, JobHandler, current_context
from jobring.executor.runlog import RunLog
from jobring.executor.worker import JobRunner
from tests.executor.enginekit import LOG_TIME, Reports, trigger

RunnerFactory = Callable[..., JobRunner]
KILLED = "scheduling center kill job. [job running, killed]"


@pytest.fixture
def reports() -> Reports:
    return Reports()


@pytest.fixture
def runlog(tmp_path: Path) -> RunLog:
    return RunLog(tmp_path / "logs")


@pytest.fixture
async def make_runner(runlog: RunLog, reports: Reports) -> AsyncIterator[RunnerFactory]:
    made: list[JobRunner] = []

    def factory(*handlers: JobHandler, **kwargs: Any) -> JobRunner:
        runner = JobRunner({h.name: h for h in handlers}, runlog, reports, **kwargs)
        made.append(runner)
        return runner

    yield factory
    for runner in made:
        await runner.close(timeout=2)


class Gate:
    """An async handler that waits for the test to open it, and says when it started."""

    def __init__(self) -> None:
        self.started = asyncio.Event()
        self.release = asyncio.Event()
        self.cancelled = asyncio.Event()
        self.seen: list[str] = []

    async def __call__(self, ctx: JobContext) -> None:
        self.seen.append(ctx.params)
        self.started.set()
        try:
            await self.release.wait()
        except asyncio.CancelledError:
            self.cancelled.set()
            raise


def gate_handler(gate: Gate, name: str = "h") -> JobHandler:
    async def func(ctx: JobContext) -> None:
        await gate(ctx)

    return JobHandler(name, func)


async def test_async_success_reports_200_without_message(make_runner: RunnerFactory, reports: Reports,
                                                          runlog: RunLog) -> None:
    async def hello(ctx: JobContext) -> None:
        ctx.log("hello %s", ctx.params)
        assert current_context() is ctx

    runner = make_runner(JobHandler("h", hello))
    answer = await runner.run(trigger(1, 1001, executor_params="p=1"))
    assert answer.to_dict() == {"code": 200}
    result = await reports.wait(1001)
    assert (result.log_id, result.log_date_tim) == (1001, LOG_TIME)
    assert (result.handle_code, result.handle_msg) == (200, None)
    content = runlog.read(LOG_TIME, 1001, 1).log_content
    assert "Param:p=1" in content
    assert "[tests.executor.test_worker#hello]" in content and "hello p=1" in content
    assert "Result: handleCode=200, handleMsg = null" in content


async def test_handler_without_parameter_and_sync_handler(make_runner: RunnerFactory,
                                                           reports: Reports) -> None:
    calls: list[str] = []

    def bare() -> None:
        calls.append(threading.current_thread().name)

    runner = make_runner(JobHandler("bare", bare))
    await runner.run(trigger(1, 1, "bare"))
    assert (await reports.wait(1)).handle_code == 200
    assert calls and calls[0].startswith("jobring-job")


async def test_fail_and_exception(make_runner: RunnerFactory, reports: Reports, runlog: RunLog) -> None:
    def failing(ctx: JobContext) -> None:
        ctx.fail("failed on purpose")

    async def raising(ctx: JobContext) -> None:
        raise RuntimeError("boom " + "x" * 5000)

    # The cap leaves room for the frames whatever the checkout's path length; the message is cut.
    runner = make_runner(JobHandler("fail", failing), JobHandler("raise", raising), max_handle_msg=2000)
    await runner.run(trigger(1, 1, "fail"))
    await runner.run(trigger(2, 2, "raise"))
    failed = await reports.wait(1)
    assert (failed.handle_code, failed.handle_msg) == (500, "failed on purpose")
    raised = await reports.wait(2)
    assert raised.handle_code == 500 and raised.handle_msg is not None
    # The message is the exception's line (cut at the cap); the traceback is in the run log.
    assert raised.handle_msg.startswith("RuntimeError: boom xxx")
    assert len(raised.handle_msg) == 2003 and raised.handle_msg.endswith("...")
    content = runlog.read(LOG_TIME, 2, 1).log_content
    assert "Traceback (most recent call last)" in content and "in raising" in content


async def test_unknown_handler_bad_glue_and_bad_log_id(make_runner: RunnerFactory) -> None:
    runner = make_runner()
    assert (await runner.run(trigger(2, 1002, "noSuchHandler"))).to_dict() == {
        "code": 500,
        "msg": "job handler [noSuchHandler] not found.",
    }
    bad = await runner.run(trigger(3, 1003, "", glue_type="GLUE_COBOL"))
    assert bad.to_dict() == {"code": 500, "msg": "glueType[GLUE_COBOL] is not valid."}
    refused = await runner.run(trigger(3, -5, "x"))
    assert refused.code == 500 and "logId" in (refused.msg or "")


async def test_serial_execution_runs_in_order(make_runner: RunnerFactory, reports: Reports) -> None:
    gate = Gate()
    runner = make_runner(gate_handler(gate))
    assert runner.is_idle(6)
    for log_id in (1, 2, 3):
        assert (await runner.run(trigger(6, log_id, executor_params=str(log_id)))).ok
    await asyncio.wait_for(gate.started.wait(), 5)
    assert not runner.is_idle(6) and runner.running_count() == 1
    gate.release.set()
    for log_id in (1, 2, 3):
        assert (await reports.wait(log_id)).handle_code == 200
    assert gate.seen == ["1", "2", "3"]


async def test_repeated_log_id_in_queue_is_refused(make_runner: RunnerFactory) -> None:
    gate = Gate()
    runner = make_runner(gate_handler(gate))
    await runner.run(trigger(6, 1))
    await runner.run(trigger(6, 2))
    again = await runner.run(trigger(6, 2))
    assert again.to_dict() == {"code": 500, "msg": "repeate trigger job, logId:2"}
    gate.release.set()


async def test_a_full_serial_queue_refuses_runs_until_it_drains(make_runner: RunnerFactory,
                                                                reports: Reports) -> None:
    gate = Gate()
    runner = make_runner(gate_handler(gate), max_queued_per_job=2)
    assert (await runner.run(trigger(6, 1))).ok
    await asyncio.wait_for(gate.started.wait(), 5)
    for log_id in (2, 3):  # one running, two waiting: the cap
        assert (await runner.run(trigger(6, log_id))).ok
    full = await runner.run(trigger(6, 4))
    assert full.to_dict() == {"code": 500, "msg": "job queue full: 2 runs of this job wait behind its "
                              "running run (max_queued_per_job=2); run not accepted."}
    assert runner.refused == {"queue_full": 1}
    assert (await runner.run(trigger(7, 5))).ok  # another job's queue is its own
    # The refused run was not received: the admin may send it again once there is room.
    assert runner.received_of([(4, LOG_TIME)]) == []
    gate.release.set()
    for log_id in (1, 2, 3):
        assert (await reports.wait(log_id)).handle_code == 200
    assert (await runner.run(trigger(6, 4))).ok
    assert (await reports.wait(4)).handle_code == 200


async def test_the_queue_cap_leaves_other_strategies_and_can_be_off(make_runner: RunnerFactory,
                                                                   reports: Reports) -> None:
    gate = Gate()
    runner = make_runner(gate_handler(gate), max_queued_per_job=1)
    assert (await runner.run(trigger(6, 1))).ok
    await asyncio.wait_for(gate.started.wait(), 5)
    assert (await runner.run(trigger(6, 2))).ok
    # COVER_EARLY replaces the worker whatever waits; DISCARD_LATER keeps its own message.
    discard = await runner.run(trigger(6, 3, executor_block_strategy="DISCARD_LATER"))
    assert discard.msg == "block strategy effect：Discard Later"
    unbounded = make_runner(gate_handler(gate, "u"), max_queued_per_job=0)
    for log_id in range(10, 30):
        assert (await unbounded.run(trigger(8, log_id, "u"))).ok
    assert unbounded.queue_depths()[8] >= 19
    with pytest.raises(ValueError, match="max_queued_per_job"):
        make_runner(gate_handler(gate), max_queued_per_job=-1)
    gate.release.set()


async def test_discard_later_refuses_while_busy(make_runner: RunnerFactory, reports: Reports) -> None:
    gate = Gate()
    runner = make_runner(gate_handler(gate))
    await runner.run(trigger(6, 1))
    await asyncio.wait_for(gate.started.wait(), 5)
    answer = await runner.run(trigger(6, 2, executor_block_strategy="DISCARD_LATER"))
    assert answer.to_dict() == {"code": 500, "msg": "block strategy effect：Discard Later"}
    gate.release.set()
    await reports.wait(1)
    await asyncio.sleep(0)  # let the worker leave the finished run
    assert (await runner.run(trigger(6, 3, executor_block_strategy="DISCARD_LATER"))).ok
    assert (await reports.wait(3)).handle_code == 200
    assert reports.of(2) == []


async def test_cover_early_kills_running_and_queued(make_runner: RunnerFactory, reports: Reports) -> None:
    gate = Gate()
    destroyed = asyncio.Event()
    inits: list[int] = []

    async def func(ctx: JobContext) -> None:
        if ctx.log_id == 1009:
            return
        await gate(ctx)

    handler = JobHandler("h", func, init=lambda: inits.append(1), destroy=destroyed.set)
    runner = make_runner(handler)
    await runner.run(trigger(6, 1006))
    await runner.run(trigger(6, 1007))
    await asyncio.wait_for(gate.started.wait(), 5)
    answer = await runner.run(trigger(6, 1009, executor_block_strategy="COVER_EARLY"))
    assert answer.to_dict() == {"code": 200}
    # Reported at once, in the reference's words and order.
    assert [(p.log_id, p.handle_code, p.handle_msg) for p in reports.items[:2]] == [
        (1006, 500, "block strategy effect：Cover Early [job running, killed]"),
        (1007, 500, "block strategy effect：Cover Early [job not executed, in the job queue, killed.]"),
    ]
    assert (await reports.wait(1009)).handle_code == 200
    await asyncio.wait_for(gate.cancelled.wait(), 5)
    await asyncio.wait_for(destroyed.wait(), 5)
    assert len(inits) == 2  # the new worker ran init again
    assert len(reports.items) == 3


async def test_kill_running_and_nothing_running(make_runner: RunnerFactory, reports: Reports,
                                               runlog: RunLog) -> None:
    gate = Gate()
    runner = make_runner(gate_handler(gate))
    assert (await runner.kill(12345)).to_dict() == {"code": 200, "msg": "job thread already killed."}
    await runner.run(trigger(8, 1011))
    await asyncio.wait_for(gate.started.wait(), 5)
    assert (await runner.kill(8)).to_dict() == {"code": 200}
    result = await reports.wait(1011)
    assert (result.handle_code, result.handle_msg) == (500, KILLED)
    await asyncio.wait_for(gate.cancelled.wait(), 5)
    assert runner.is_idle(8)
    assert "stopReason:scheduling center kill job." in runlog.read(LOG_TIME, 1011, 1).log_content


async def test_async_timeout_reports_502_and_cancels(make_runner: RunnerFactory, reports: Reports) -> None:
    gate = Gate()
    runner = make_runner(gate_handler(gate))
    await runner.run(trigger(7, 1010, executor_timeout=1))
    result = await reports.wait(1010)
    assert (result.handle_code, result.handle_msg) == (502, "job execute timeout ")
    await asyncio.wait_for(gate.cancelled.wait(), 5)


async def test_sync_timeout_reports_at_once_and_marks_cancelled(make_runner: RunnerFactory,
                                                                 reports: Reports) -> None:
    started = threading.Event()
    release = threading.Event()
    ended = threading.Event()
    outcome: list[str] = []

    def slow(ctx: JobContext) -> None:
        started.set()
        release.wait(10)
        outcome.append(f"cancelled={ctx.cancelled}")
        try:
            ctx.log("still here")
        except JobCancelled:
            outcome.append("JobCancelled")
        finally:
            ended.set()

    runner = make_runner(JobHandler("slow", slow))
    await runner.run(trigger(7, 1, "slow", executor_timeout=1))
    result = await reports.wait(1)
    assert (result.handle_code, result.handle_msg) == (502, "job execute timeout ")
    assert started.is_set() and not release.is_set()  # reported while the thread still runs
    release.set()
    assert await asyncio.to_thread(ended.wait, 5)
    assert outcome == ["cancelled=True", "JobCancelled"]
    assert len(reports.of(1)) == 1


async def test_sync_kill_reports_at_once(make_runner: RunnerFactory, reports: Reports) -> None:
    started = threading.Event()
    release = threading.Event()

    def slow(ctx: JobContext) -> None:
        started.set()
        release.wait(10)

    runner = make_runner(JobHandler("slow", slow))
    await runner.run(trigger(8, 1, "slow"))
    await asyncio.to_thread(started.wait, 5)
    await runner.kill(8)
    result = await reports.wait(1)
    assert (result.handle_code, result.handle_msg) == (500, KILLED)
    release.set()


async def test_logging_module_records_reach_the_run_log(make_runner: RunnerFactory, reports: Reports,
                                                        runlog: RunLog) -> None:
    import logging

    from jobring.executor.context import RunLogHandler

    handler = RunLogHandler()
    logger = logging.getLogger("tests.engine.user")
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        def sync_job() -> None:
            logger.info("from the thread %d", 1)

        async def async_job() -> None:
            logger.info("from the loop")

        logger.info("outside any run")
        runner = make_runner(JobHandler("s", sync_job), JobHandler("a", async_job))
        await runner.run(trigger(1, 1, "s"))
        await runner.run(trigger(2, 2, "a"))
        await reports.wait(1)
        await reports.wait(2)
    finally:
        logger.removeHandler(handler)
    first = runlog.read(LOG_TIME, 1, 1).log_content
    second = runlog.read(LOG_TIME, 2, 1).log_content
    assert "[tests.engine.user#sync_job]" in first and "from the thread 1" in first
    assert "from the loop" in second and "from the thread" not in second
    assert "outside any run" not in first + second


async def test_handler_change_replaces_worker(make_runner: RunnerFactory, reports: Reports) -> None:
    gate = Gate()
    destroyed = asyncio.Event()

    async def first(ctx: JobContext) -> None:
        await gate(ctx)

    async def second() -> None:
        return None

    runner = make_runner(JobHandler("one", first, destroy=destroyed.set), JobHandler("two", second))
    await runner.run(trigger(5, 1, "one"))
    await runner.run(trigger(5, 2, "one"))
    await asyncio.wait_for(gate.started.wait(), 5)
    assert (await runner.run(trigger(5, 3, "two"))).ok
    reason = "change jobhandler or glue type, and terminate the old job thread."
    assert (await reports.wait(1)).handle_msg == reason + " [job running, killed]"
    assert (await reports.wait(2)).handle_msg == reason + " [job not executed, in the job queue, killed.]"
    assert (await reports.wait(3)).handle_code == 200
    await asyncio.wait_for(destroyed.wait(), 5)


async def test_idle_worker_retires_and_runs_destroy(make_runner: RunnerFactory, reports: Reports) -> None:
    destroyed = asyncio.Event()
    inits: list[str] = []

    async def init() -> None:
        inits.append("init")

    runner = make_runner(JobHandler("h", lambda: None, init=init, destroy=destroyed.set), idle_timeout_s=0.05)
    await runner.run(trigger(1, 1))
    await runner.run(trigger(1, 2))
    await reports.wait(2)
    await asyncio.wait_for(destroyed.wait(), 5)
    assert inits == ["init"]  # once for both runs
    assert runner.is_idle(1)
    assert (await runner.kill(1)).msg == "job thread already killed."  # the worker is gone


async def test_retire_idle_with_a_controlled_clock(make_runner: RunnerFactory, reports: Reports) -> None:
    now = [1000.0]
    destroyed = asyncio.Event()
    runner = make_runner(JobHandler("h", lambda: None, destroy=destroyed.set), idle_timeout_s=90,
                         clock=lambda: now[0])
    await runner.run(trigger(1, 1))
    await reports.wait(1)
    await asyncio.sleep(0)
    assert runner.retire_idle() == 0
    now[0] += 90
    assert runner.retire_idle() == 1
    await asyncio.wait_for(destroyed.wait(), 5)


async def test_close_finishes_running_and_fails_queued(runlog: RunLog, reports: Reports) -> None:
    gate = Gate()
    destroyed = asyncio.Event()

    async def func(ctx: JobContext) -> None:
        await gate(ctx)

    runner = JobRunner({"h": JobHandler("h", func, destroy=destroyed.set)}, runlog, reports)
    await runner.run(trigger(1, 1))
    await runner.run(trigger(1, 2))
    await asyncio.wait_for(gate.started.wait(), 5)
    closing = asyncio.create_task(runner.close(timeout=5))
    queued = await reports.wait(2)
    assert queued.handle_msg == "executor stopping [job not executed, in the job queue, killed.]"
    gate.release.set()
    await asyncio.wait_for(closing, 10)
    assert (await reports.wait(1)).handle_code == 200
    assert destroyed.is_set()
    assert (await runner.run(trigger(1, 3))).code == 500


async def test_close_kills_runs_that_do_not_finish(runlog: RunLog, reports: Reports) -> None:
    gate = Gate()
    runner = JobRunner({"h": gate_handler(gate)}, runlog, reports)
    await runner.run(trigger(1, 1))
    await asyncio.wait_for(gate.started.wait(), 5)
    await asyncio.wait_for(runner.close(timeout=0.05), 10)
    assert (await reports.wait(1)).handle_msg == "executor stopping [job running, killed]"
    assert gate.cancelled.is_set()


async def test_many_runs_each_reported_exactly_once(make_runner: RunnerFactory, reports: Reports) -> None:
    async def quick() -> None:
        return None

    runner = make_runner(JobHandler("q", quick))
    for i in range(1, 301):
        assert (await runner.run(trigger(i % 7, i, "q"))).ok
    await reports.wait_count(300)
    assert sorted(p.log_id for p in reports.items) == list(range(1, 301))
    assert all(p.handle_code == 200 for p in reports.items)


async def test_cover_early_on_an_idle_worker_keeps_it(make_runner: RunnerFactory, reports: Reports) -> None:
    inits: list[int] = []
    runner = make_runner(JobHandler("h", lambda: None, init=lambda: inits.append(1)))
    await runner.run(trigger(1, 1))
    await reports.wait(1)
    await runner.run(trigger(1, 2, executor_block_strategy="COVER_EARLY"))
    await reports.wait(2)
    assert inits == [1] and [p.handle_code for p in reports.items] == [200, 200]


async def test_failing_init_is_logged_and_runs_still_execute(make_runner: RunnerFactory, reports: Reports,
                                                             caplog: pytest.LogCaptureFixture) -> None:
    def bad_init() -> None:
        raise OSError("no connection")

    runner = make_runner(JobHandler("h", lambda: None, init=bad_init))
    await runner.run(trigger(1, 1))
    assert (await reports.wait(1)).handle_code == 200
    assert "init hook failed" in caplog.text and "no connection" in caplog.text


async def test_kill_of_an_idle_worker_retires_it(make_runner: RunnerFactory, reports: Reports) -> None:
    destroyed = asyncio.Event()
    runner = make_runner(JobHandler("h", lambda: None, destroy=destroyed.set))
    await runner.run(trigger(1, 1))
    await reports.wait(1)
    assert (await runner.kill(1)).to_dict() == {"code": 200}
    await asyncio.wait_for(destroyed.wait(), 5)
    assert (await runner.kill(1)).msg == "job thread already killed."
    assert len(reports.items) == 1


async def test_a_run_sent_again_is_not_run_twice_even_after_a_restart(
    make_runner: RunnerFactory, reports: Reports, tmp_path: Path
) -> None:
    """/run is idempotent by run (logId + trigger second) over a window of recent runs that
    survives a restart of the executor (kept in its log folder); /received answers which
    runs were accepted."""
    from jobring.executor.received import MSG_ALREADY_RECEIVED, ReceivedRuns

    gate = Gate()
    gate.release.set()
    runner = make_runner(gate_handler(gate), received=ReceivedRuns(tmp_path, window=3))
    assert (await runner.run(trigger(6, 1))).ok
    assert (await reports.wait(1)).handle_code == 200
    again = await runner.run(trigger(6, 1))
    assert again.to_dict() == {"code": 200, "msg": MSG_ALREADY_RECEIVED}
    assert gate.seen == [""]  # ran once
    other_second = trigger(6, 1)
    other_second = replace(other_second, log_date_time=other_second.log_date_time + 1_000)
    assert runner.received_of([(1, LOG_TIME), (1, LOG_TIME + 1_000), (2, LOG_TIME)]) == [1]
    assert (await runner.run(other_second)).to_dict() == {"code": 200}  # another admin's run 1
    await reports.wait_count(2)  # on disk once its handler started: wait until it ran
    # A new runner on the same folder (the executor restarted) still knows them.
    after = ReceivedRuns(tmp_path, window=3)
    assert (1, LOG_TIME // 1000) in after and (1, LOG_TIME // 1000 + 1) in after
    for log_id in range(10, 20):
        after.add((log_id, 0))
    assert len(after) == 3 and (19, 0) in after and (1, LOG_TIME // 1000) not in after  # bounded
    after.close()
    compacted = ReceivedRuns(tmp_path, window=3)
    assert sorted(r for r, _ in compacted._order) == [17, 18, 19]  # noqa: SLF001
    compacted.close()
