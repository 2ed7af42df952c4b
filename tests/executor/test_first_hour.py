"""What a newcomer sees from an executor: where it listens, what it registered as, a refused
token said once, a loopback bind advertising loopback, a taken port as one line (exit 2)."""

from __future__ import annotations

import asyncio
import logging
import socket
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx
import pytest

from jobring import Executor
from jobring.cli import main
from jobring.executor.executor import ExecutorError
from jobring.executor.registry import Registrar

from .fake_admin import FakeAdmin

TOKEN_WRONG = b'{"code":500,"msg":"The access token is wrong."}'


@pytest.fixture
async def admin() -> AsyncIterator[FakeAdmin]:
    fake = FakeAdmin()
    await fake.start()
    try:
        yield fake
    finally:
        await fake.stop()


@pytest.fixture
def taken_port() -> Iterator[int]:
    blocker = socket.socket()
    blocker.bind(("127.0.0.1", 0))
    blocker.listen()
    try:
        yield blocker.getsockname()[1]
    finally:
        blocker.close()


def registry_lines(caplog: pytest.LogCaptureFixture) -> list[tuple[int, str]]:
    return [(r.levelno, r.getMessage()) for r in caplog.records if r.name == "jobring.executor.registry"]


async def test_refused_token_is_said_once_then_retried_quietly_until_accepted(
    admin: FakeAdmin, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="jobring.executor.registry")
    admin.answer = TOKEN_WRONG
    async with httpx.AsyncClient() as client:
        registrar = Registrar(client, [admin.base_url], "wrong", "my-app", "http://127.0.0.1:9998/",
                              interval_s=0.05)
        registrar.start()
        await admin.wait_for(lambda a: len(a.requests) >= 3)
        assert not registrar.registered.is_set()
        admin.answer = b'{"code":200}'
        await asyncio.wait_for(registrar.registered.wait(), 5)
        await registrar.stop()
    lines = registry_lines(caplog)
    errors = [text for level, text in lines if level == logging.ERROR]
    assert len(errors) == 1 and "refused the access token" in errors[0]
    assert "JOBRING_EXECUTOR_ACCESS_TOKEN" in errors[0]
    assert "`jobring groups token my-app`" in errors[0]  # the group's token, the one a newcomer has
    assert not [text for level, text in lines if level == logging.WARNING]
    infos = [text for level, text in lines if level == logging.INFO]
    assert infos == [f"registered as http://127.0.0.1:9998/ with {admin.base_url} (app my-app)"]


async def test_registered_is_logged_only_once_the_admin_accepts(
    admin: FakeAdmin, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="jobring.executor.registry")
    admin.http_status = 503
    async with httpx.AsyncClient() as client:
        registrar = Registrar(client, [admin.base_url], "t", "my-app", "http://127.0.0.1:1/", interval_s=3600)
        registrar.start()
        await admin.wait_for(lambda a: len(a.requests) == 1)
        admin.http_status = 200
        await asyncio.wait_for(registrar.registered.wait(), 5)
        await registrar.stop()
    lines = registry_lines(caplog)
    assert [level for level, _ in lines] == [logging.WARNING, logging.INFO]
    assert "registered as http://127.0.0.1:1/" in lines[-1][1]


async def test_an_executor_bound_to_loopback_registers_a_loopback_address(
    admin: FakeAdmin, tmp_path: Path
) -> None:
    ex = Executor(app_name="my-app", admin_addresses=[admin.base_url], access_token="tok", host="127.0.0.1",
                  port=0, log_path=str(tmp_path), environ={})
    await asyncio.to_thread(ex.start_in_thread)
    try:
        await admin.wait_for(lambda a: len(a.requests) >= 1)
        assert admin.requests[0].json()["registryValue"] == f"http://127.0.0.1:{ex.bound_port}/"
    finally:
        await asyncio.to_thread(ex.stop)


async def test_a_taken_port_raises_a_clear_error_from_start_in_thread(
    admin: FakeAdmin, tmp_path: Path, taken_port: int
) -> None:
    ex = Executor(app_name="my-app", admin_addresses=[admin.base_url], access_token="tok", host="127.0.0.1",
                  port=taken_port, log_path=str(tmp_path), environ={})
    with pytest.raises(ExecutorError, match=f"port {taken_port} is in use.*JOBRING_EXECUTOR_PORT"):
        await asyncio.to_thread(ex.start_in_thread)


def test_a_taken_port_is_one_line_and_exit_2_for_the_cli(
    taken_port: int, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # A module of its own: configuring the shared demo executor would leak into other tests.
    (tmp_path / "taken_port_jobs.py").write_text(
        "from jobring import Executor\nexecutor = Executor(app_name='taken', environ={})\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    code = main(["executor", "taken_port_jobs:executor", "--host", "127.0.0.1", "--port", str(taken_port),
                 "--token", "t", "--admin", "http://127.0.0.1:1/", "--log-path", str(tmp_path)])
    assert code == 2
    err = capsys.readouterr().err
    assert f"port {taken_port} is in use" in err and "--port" in err and "Traceback" not in err


def test_a_script_calling_run_on_a_taken_port_prints_one_line_and_exits_2(
    taken_port: int, tmp_path: Path
) -> None:
    script = tmp_path / "jobs.py"
    script.write_text(
        "from jobring import Executor\n"
        f"ex = Executor(app_name='a', access_token='t', host='127.0.0.1', port={taken_port}, "
        f"admin_addresses=['http://127.0.0.1:1/'], log_path={str(tmp_path)!r}, environ={{}})\n"
        "ex.run()\n"
    )
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and f"port {taken_port} is in use" in lines[0], done.stderr


# -- arguments and the environment (issue 25, item 20) ------------------------------------------

README = Path(__file__).resolve().parents[2] / "README.md"


def _readme_jobs_py() -> str:
    text = README.read_text()
    start = text.index("Save as `jobs.py`")
    block = text.index("```python\n", start) + len("```python\n")
    return text[block:text.index("```", block)]


def test_the_quick_start_jobs_py_takes_port_and_admin_from_the_environment(
    monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("JOBRING_EXECUTOR_PORT", "9123")
    monkeypatch.setenv("JOBRING_EXECUTOR_ADMIN_ADDRESSES", "http://10.0.0.1:8080/xxl-job-admin/")
    monkeypatch.setenv("JOBRING_EXECUTOR_ACCESS_TOKEN", "a-group-token-of-the-quick-start")
    scope: dict[str, object] = {"__name__": "readme_jobs"}  # not __main__: nothing starts
    exec(compile(_readme_jobs_py(), "README.md:jobs.py", "exec"), scope)  # noqa: S102 - the repo's README
    executor = scope["executor"]
    assert isinstance(executor, Executor)
    s = executor.settings
    assert (s.port, s.host) == (9123, "127.0.0.1")
    assert s.admin_addresses == ("http://10.0.0.1:8080/xxl-job-admin/",)
    assert s.access_token == "a-group-token-of-the-quick-start"


def test_an_argument_wins_over_the_environment_only_when_given() -> None:
    environ = {"JOBRING_EXECUTOR_PORT": "9123", "JOBRING_EXECUTOR_APP_NAME": "from-env"}
    assert Executor(environ=environ).settings.port == 9123
    assert Executor(port=None, environ=environ).settings.port == 9123  # None: not given
    given = Executor(app_name="from-code", port=9000, environ=environ)
    assert (given.settings.port, given.settings.app_name) == (9000, "from-code")
    given.configure(port=9001)  # a `jobring executor --port` flag wins over the code
    assert given.settings.port == 9001


async def test_a_taken_port_given_in_the_code_says_to_change_it_there(
    taken_port: int, tmp_path: Path
) -> None:
    common: dict[str, object] = {"app_name": "a", "access_token": "t", "host": "127.0.0.1",
                                 "log_path": str(tmp_path)}
    in_code = Executor(port=taken_port, environ={}, **common)  # type: ignore[arg-type]
    with pytest.raises(ExecutorError, match=rf"port={taken_port} is given to Executor\(\.\.\.\) in the code, "
                       "which wins over JOBRING_EXECUTOR_PORT"):
        await asyncio.to_thread(in_code.start_in_thread)
    from_env = Executor(environ={"JOBRING_EXECUTOR_PORT": str(taken_port)}, **common)  # type: ignore[arg-type]
    with pytest.raises(ExecutorError, match=f"port {taken_port} is in use .*: set JOBRING_EXECUTOR_PORT"):
        await asyncio.to_thread(from_env.start_in_thread)
