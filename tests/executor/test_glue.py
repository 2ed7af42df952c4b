"""GLUE scripts through the JobRunner: on/off, Groovy, shell success/exit 3/timeout/kill, python."""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import AsyncIterator
from pathlib import Path

import psutil
import pytest

from jobring.executor import glue
from jobring.executor.runlog import RunLog
from jobring.executor.worker import JobRunner
from jobring.protocol.models import TriggerParam
from tests.executor.enginekit import LOG_TIME, Reports, trigger

KILLED = "scheduling center kill job. [job running, killed]"
pytestmark = pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")


@pytest.fixture
def reports() -> Reports:
    return Reports()


@pytest.fixture
def runlog(tmp_path: Path) -> RunLog:
    return RunLog(tmp_path / "logs")


@pytest.fixture
async def runner(runlog: RunLog, reports: Reports) -> AsyncIterator[JobRunner]:
    runner = JobRunner({}, runlog, reports, glue_enabled=True, kill_grace_s=1.0)
    yield runner
    await runner.close(timeout=2)


def shell(job_id: int, log_id: int, source: str, **fields: object) -> TriggerParam:
    return trigger(job_id, log_id, "", glue_type="GLUE_SHELL", glue_source=source,
                   glue_updatetime=LOG_TIME, **fields)


async def test_glue_is_off_by_default(runlog: RunLog, reports: Reports) -> None:
    runner = JobRunner({}, runlog, reports)
    try:
        for kind in ("GLUE_SHELL", "GLUE_PYTHON", "GLUE_NODEJS", "GLUE_PHP", "GLUE_POWERSHELL"):
            answer = await runner.run(trigger(9, 1, "", glue_type=kind, glue_source="echo hi"))
            assert answer.code == 500
            assert answer.msg == f"glueType[{kind}] refused: GLUE is disabled on this executor " \
                                 "(start it with GLUE enabled to run scripts sent by the admin)."
    finally:
        await runner.close()
    assert reports.items == []
    assert not runlog.glue_dir.exists()


async def test_groovy_and_unknown_types(runner: JobRunner) -> None:
    groovy = await runner.run(trigger(9, 1, "", glue_type="GLUE_GROOVY", glue_source="class X {}"))
    assert groovy.code == 500 and "Java" in (groovy.msg or "") and "GLUE_GROOVY" in (groovy.msg or "")
    cobol = await runner.run(trigger(9, 2, "", glue_type="GLUE_COBOL"))
    assert cobol.to_dict() == {"code": 500, "msg": "glueType[GLUE_COBOL] is not valid."}


async def test_missing_interpreter_is_a_clear_failure(runner: JobRunner,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")
    answer = await runner.run(trigger(9, 1, "", glue_type="GLUE_NODEJS", glue_source="console.log(1)"))
    assert answer.code == 500 and "interpreter node or nodejs not found" in (answer.msg or "")


async def test_shell_success_gets_params_and_shard_args(runner: JobRunner, reports: Reports,
                                                        runlog: RunLog) -> None:
    source = '#!/bin/bash\necho "shell args: $1 $2 $3"\necho to-stderr >&2\nexit 0\n'
    assert (await runner.run(shell(9, 1012, source, executor_params="hello"))).ok
    result = await reports.wait(1012)
    assert (result.handle_code, result.handle_msg) == (200, None)
    content = runlog.read(LOG_TIME, 1012, 1).log_content
    assert "\nshell args: hello 0 1\n" in content and "\nto-stderr\n" in content
    script = runlog.glue_dir / f"9_{LOG_TIME}.sh"
    assert f"script file:{script}" in content and script.read_text() == source


async def test_shell_exit_3_fails(runner: JobRunner, reports: Reports) -> None:
    await runner.run(shell(10, 1013, "#!/bin/bash\necho bad\nexit 3\n"))
    result = await reports.wait(1013)
    assert (result.handle_code, result.handle_msg) == (500, "script exit value(3) is failed")


async def test_python_glue(runner: JobRunner, reports: Reports, runlog: RunLog) -> None:
    source = "import sys\nprint('py args', sys.argv[1:])\n"
    param = trigger(11, 1014, "", glue_type="GLUE_PYTHON", glue_source=source, executor_params="x",
                    broadcast_index=2, broadcast_total=3)
    assert (await runner.run(param)).ok
    assert (await reports.wait(1014)).handle_code == 200
    assert "py args ['x', '2', '3']" in runlog.read(LOG_TIME, 1014, 1).log_content


async def _started_pid(runlog: RunLog, log_id: int, reports: Reports) -> int:
    """The pid a script printed first ("pid N"), read back from the run log."""
    async with asyncio.timeout(10):
        while True:
            for line in runlog.read(LOG_TIME, log_id, 1).log_content.splitlines():
                if line.startswith("pid "):
                    return int(line.split()[1])
            assert not reports.of(log_id), reports.of(log_id)
            await asyncio.sleep(0.02)  # noqa: ASYNC110 - the script's output is only in the file


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


async def test_shell_timeout_terminates_the_script(runner: JobRunner, reports: Reports,
                                                   runlog: RunLog) -> None:
    source = "#!/bin/bash\necho pid $$\nsleep 30 &\nchild=$!\necho pid-child $child\nwait\n"
    await runner.run(shell(12, 1, source, executor_timeout=1))
    pid = await _started_pid(runlog, 1, reports)
    result = await reports.wait(1)
    assert (result.handle_code, result.handle_msg) == (502, "job execute timeout ")
    child = int(next(x for x in runlog.read(LOG_TIME, 1, 1).log_content.splitlines()
                     if x.startswith("pid-child")).split()[1])
    assert await _gone(pid) and await _gone(child)


async def test_shell_kill_terminates_the_script_even_if_it_ignores_sigterm(
    runner: JobRunner, reports: Reports, runlog: RunLog
) -> None:
    source = "#!/bin/bash\ntrap '' TERM\necho pid $$\nwhile true; do sleep 0.1; done\n"
    await runner.run(shell(13, 2, source))
    pid = await _started_pid(runlog, 2, reports)
    assert (await runner.kill(13)).ok
    result = await reports.wait(2)
    assert (result.handle_code, result.handle_msg) == (500, KILLED)
    assert await _gone(pid)


async def test_new_glue_version_replaces_the_worker(runner: JobRunner, reports: Reports,
                                                    runlog: RunLog) -> None:
    await runner.run(shell(14, 1, "#!/bin/bash\necho pid $$\nsleep 30\n"))
    pid = await _started_pid(runlog, 1, reports)
    newer = trigger(14, 2, "", glue_type="GLUE_SHELL", glue_source="echo v2\n", glue_updatetime=LOG_TIME + 1)
    assert (await runner.run(newer)).ok
    old = await reports.wait(1)
    reason = "change job source or glue type, and terminate the old job thread."
    assert old.handle_msg == reason + " [job running, killed]"
    assert (await reports.wait(2)).handle_code == 200
    assert await _gone(pid)
    assert sorted(p.name for p in runlog.glue_dir.iterdir()) == [f"14_{LOG_TIME + 1}.sh"]


def test_refusal_messages() -> None:
    assert glue.glue_refusal("GLUE_SHELL", enabled=True) is None
    assert glue.glue_refusal("BEAN", enabled=True) == "glueType[BEAN] is not valid."
    assert glue.glue_refusal("GLUE_PYTHON", enabled=False) is not None
