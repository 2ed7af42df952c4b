"""isolation="process": results, logs, and a process that is really gone after timeout/kill."""

from __future__ import annotations

import asyncio
import logging
import os
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path

import psutil
import pytest

from jobring.executor.context import JobContext, JobHandler
from jobring.executor.runlog import RunLog
from jobring.executor.worker import JobRunner
from tests.executor.enginekit import LOG_TIME, Reports, trigger


def isolated_ok(ctx: JobContext) -> None:
    ctx.log("child pid %d params %s shard %d/%d", os.getpid(), ctx.params, ctx.shard_index, ctx.shard_total)
    logging.getLogger("isolated.user").warning("via logging")
    print("printed line")


def isolated_fail(ctx: JobContext) -> None:
    ctx.fail("nope from child")


def isolated_raise() -> None:
    raise ValueError("child exploded")


def isolated_sleep(ctx: JobContext) -> None:
    ctx.log("pid %d", os.getpid())
    time.sleep(30)


HANDLERS = [
    JobHandler("ok", isolated_ok, isolation="process"),
    JobHandler("fail", isolated_fail, isolation="process"),
    JobHandler("raise", isolated_raise, isolation="process"),
    JobHandler("sleep", isolated_sleep, isolation="process"),
]


@pytest.fixture
def reports() -> Reports:
    return Reports()


@pytest.fixture
def runlog(tmp_path: Path) -> RunLog:
    return RunLog(tmp_path / "logs")


@pytest.fixture
async def runner(runlog: RunLog, reports: Reports) -> AsyncIterator[JobRunner]:
    runner = JobRunner({h.name: h for h in HANDLERS}, runlog, reports, kill_grace_s=1.0)
    yield runner
    await runner.close(timeout=2)


def test_process_isolation_needs_a_top_level_sync_function() -> None:
    async def coro() -> None:
        return None

    with pytest.raises(ValueError, match="sync function"):
        JobHandler("a", coro, isolation="process")
    with pytest.raises(ValueError, match="top-level"):
        JobHandler("b", lambda: None, isolation="process")


async def test_results_and_logs_from_the_child(runner: JobRunner, reports: Reports, runlog: RunLog) -> None:
    await runner.run(trigger(1, 1, "ok", executor_params="p", broadcast_index=1, broadcast_total=2))
    await runner.run(trigger(2, 2, "fail"))
    await runner.run(trigger(3, 3, "raise"))
    ok = await reports.wait(1, within=30)
    assert (ok.handle_code, ok.handle_msg) == (200, None)
    content = runlog.read(LOG_TIME, 1, 1).log_content
    assert "[tests.executor.test_isolation#isolated_ok]" in content and "params p shard 1/2" in content
    assert f"child pid {os.getpid()} " not in content
    assert "via logging" in content and "\nprinted line\n" in content
    failed = await reports.wait(2, within=30)
    assert (failed.handle_code, failed.handle_msg) == (500, "nope from child")
    raised = await reports.wait(3, within=30)
    assert (raised.handle_code, raised.handle_msg) == (500, "ValueError: child exploded")
    assert "Traceback (most recent call last)" in runlog.read(LOG_TIME, 3, 1).log_content


async def _child_pid(runlog: RunLog, log_id: int) -> int:
    async with asyncio.timeout(30):
        while True:
            for line in runlog.read(LOG_TIME, log_id, 1).log_content.splitlines():
                if " pid " in line:
                    return int(line.rsplit(" ", 1)[1])
            await asyncio.sleep(0.02)  # noqa: ASYNC110 - the child's output is only in the file


async def _gone(pid: int) -> bool:
    def wait() -> bool:
        try:
            psutil.Process(pid).wait(10)
        except psutil.NoSuchProcess:
            return True
        except psutil.TimeoutExpired:
            return False
        return True

    return await asyncio.to_thread(wait)


async def test_timeout_terminates_the_process(runner: JobRunner, reports: Reports, runlog: RunLog) -> None:
    await runner.run(trigger(4, 4, "sleep", executor_timeout=3))
    pid = await _child_pid(runlog, 4)
    assert psutil.pid_exists(pid)
    result = await reports.wait(4, within=30)
    assert (result.handle_code, result.handle_msg) == (502, "job execute timeout ")
    assert await _gone(pid)


async def test_kill_terminates_the_process(runner: JobRunner, reports: Reports, runlog: RunLog) -> None:
    await runner.run(trigger(5, 5, "sleep"))
    pid = await _child_pid(runlog, 5)
    assert (await runner.kill(5)).ok
    result = await reports.wait(5)
    assert result.handle_msg == "scheduling center kill job. [job running, killed]"
    assert await _gone(pid)


MAIN_SCRIPT = '''
import asyncio, sys
from jobring.executor.context import JobHandler
from jobring.executor.runlog import RunLog
from jobring.executor.worker import JobRunner
from jobring.protocol.models import TriggerParam

def job(ctx):
    ctx.log("ran in the child of a __main__ script")

async def main(log_path):
    got = []
    runlog = RunLog(log_path)
    runner = JobRunner({"j": JobHandler("j", job, isolation="process")}, runlog, got.append)
    await runner.run(TriggerParam(job_id=1, executor_handler="j", log_id=1, log_date_time=1795350973184))
    while not got:
        await asyncio.sleep(0.05)
    await runner.close()
    print(got[0].handle_code, got[0].handle_msg)
    print(runlog.read(1795350973184, 1, 1).log_content)

if __name__ == "__main__":
    asyncio.run(main(sys.argv[1]))
'''


async def test_a_function_of_a_main_script_runs_isolated(tmp_path: Path) -> None:
    script = tmp_path / "jobs_main.py"
    script.write_text(MAIN_SCRIPT)
    proc = await asyncio.create_subprocess_exec(
        sys.executable, str(script), str(tmp_path / "logs"),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)},
    )
    try:
        out, _ = await asyncio.wait_for(proc.communicate(), 40)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    text = out.decode()
    assert proc.returncode == 0, text
    assert text.startswith("200 None"), text
    assert "ran in the child of a __main__ script" in text
