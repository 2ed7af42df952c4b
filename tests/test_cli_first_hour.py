"""What a newcomer tripped over in the CLI's first hour (issue 25, item 21): options before the
command, `db upgrade` on a missing server database, prompts without a terminal, `--json`
everywhere, one `--log-level` spelling, the admin's address, missing jobs, address rules,
`db --help`, fixed-rate run types, appnames in `jobs list`, and one line where two were."""

from __future__ import annotations

import json
import logging
import os
import secrets
import socket
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import asyncpg
import pytest
from sqlalchemy.engine import make_url

from jobring.admin.loop.adapters import _recorded_type
from jobring.admin.loop.ports import PlannedFire
from jobring.admin.store import Store, upgrade_database
from jobring.admin.store.records import JobInfo
from jobring.cli import admin as admin_cmd
from jobring.cli import build_parser, main
from jobring.cli.common import UsageError
from jobring.cli.examples import EXAMPLES, walk
from jobring.core.enums import TriggerType
from jobring.executor.executor import Executor
from tests.client.adminkit import BASE_URL, AdminEnv, admin_env
from tests.client.clikit import Cli, cli_for
from tests.dbs import DB_PREFIX, SERVER_URLS, backend_of, drop_test_database, run_in_fresh_loop


@pytest.fixture
async def env(sqlite_store: Store) -> AsyncIterator[AdminEnv]:
    async for built in admin_env(sqlite_store):
        yield built


@pytest.fixture
def cli(env: AdminEnv, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> Cli:
    return cli_for(env, capsys, monkeypatch)


async def test_connection_options_and_json_also_before_the_command(
    env: AdminEnv, cli: Cli, monkeypatch: pytest.MonkeyPatch
) -> None:
    job = await env.job(await env.group())
    monkeypatch.delenv("JOBRING_URL")
    monkeypatch.delenv("JOBRING_TOKEN")
    before = await cli("--url", BASE_URL, "--token", env.token, "--json", "jobs", "show", str(job["id"]))
    assert before.code == 0, before.err
    assert json.loads(before.out)["id"] == job["id"]
    after = await cli("jobs", "show", str(job["id"]), "--url", BASE_URL, "--token", env.token, "--json")
    assert json.loads(after.out) == json.loads(before.out)
    # Given twice, the one after the command wins (here: a bad URL before it is not used).
    both = await cli("--url", "ftp://nowhere", "jobs", "list", "--url", BASE_URL, "--token", env.token)
    assert both.code == 0, both.err
    refused = await cli("--url", BASE_URL, "cron", "next", "0 0 * * * ?")
    assert refused.code == 2 and "--url does not apply to this command" in refused.err


def test_every_listing_and_show_command_has_json() -> None:
    kinds = ("list", "show", "current", "next", "token", "delayed", "upgrade", "settings", "dashboard")
    lacking = [path for path, parser in walk(build_parser())
               if path.split(" ")[-1] in kinds
               and not any("--json" in action.option_strings for action in parser._actions)]
    assert lacking == []


def test_one_log_level_spelling_for_admin_and_executor() -> None:
    parser = build_parser()
    for argv in (["admin", "--log-level"], ["run", "--log-level"], ["executor", "m:e", "--log-level"]):
        for given in ("debug", "INFO", "Warning"):
            assert parser.parse_args([*argv, given]).log_level == given.upper()
    with pytest.raises(SystemExit):
        parser.parse_args(["admin", "--log-level", "loud"])


def test_db_help_names_the_real_commands(capsys: pytest.CaptureFixture[str]) -> None:
    commands = {path.split()[1] for path, _ in walk(build_parser()) if path.startswith("db ")}
    assert commands == {"upgrade", "current", "adopt"}
    assert main(["db"]) == 2  # its own help, not the top-level one
    own = capsys.readouterr().err
    assert all(f"\n    {name} " in own for name in commands), own
    with pytest.raises(SystemExit):
        main(["--help"])
    top = " ".join(capsys.readouterr().out.split())
    listed = top[top.index(" db the database schema: "):top.index(" executor ")]
    assert all(f"{name} (" in listed for name in commands), listed  # each command, by its name


def test_settings_token_example_cannot_export_an_empty_token() -> None:
    example = EXAMPLES["settings token"]
    assert "export JOBRING_EXECUTOR_ACCESS_TOKEN=$(" not in example and "&&" in example


# -- passwords without a terminal --------------------------------------------------------------


async def test_password_prompts_without_a_terminal_name_the_variable(
    cli: Cli, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("jobring.cli.common.has_terminal", lambda: False)
    for name in ("JOBRING_PASSWORD", "JOBRING_NEW_PASSWORD", "JOBRING_USER_PASSWORD"):
        monkeypatch.delenv(name, raising=False)
    cases = [
        (("tokens", "create", "laptop", "--user", "admin"), "JOBRING_PASSWORD"),
        (("password", "--user", "admin"), "JOBRING_PASSWORD"),
        (("users", "add", "alice"), "JOBRING_USER_PASSWORD"),
    ]
    for argv, variable in cases:
        result = await cli(*argv)
        assert result.code == 2, (argv, result)
        assert f"set {variable}" in result.err and "Traceback" not in result.err
    monkeypatch.setenv("JOBRING_PASSWORD", "whatever-it-is-1")
    asked_new = await cli("password", "--user", "admin")
    assert asked_new.code == 2 and "set JOBRING_NEW_PASSWORD" in asked_new.err


def test_a_process_without_a_terminal_gets_the_message_not_a_traceback(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("JOBRING_")}
    # A new session has no controlling terminal, and stdin is empty: as under cron or CI.
    done = subprocess.run([sys.executable, "-m", "jobring.cli", "password", "--url", "http://127.0.0.1:9"],
                          stdin=subprocess.DEVNULL, capture_output=True, text=True, env=env, timeout=60,
                          start_new_session=True, cwd=tmp_path, check=False)
    assert done.returncode == 2, done.stderr
    assert "set JOBRING_PASSWORD" in done.stderr and "Traceback" not in done.stderr


# -- against the admin --------------------------------------------------------------------------


async def test_runs_list_of_a_missing_job_is_an_error(env: AdminEnv, cli: Cli) -> None:
    job = await env.job(await env.group())
    empty = await cli("runs", "list", "--job", str(job["id"]))
    assert empty.code == 0 and empty.out.split()[:2] == ["ID", "JOB"]
    missing = await cli("runs", "list", "--job", "12345")
    assert missing.code == 2 and "12345" in missing.err and missing.out == ""


async def test_groups_enable_refuses_what_disable_refuses(env: AdminEnv, cli: Cli) -> None:
    await env.group("billing", "Billing")
    stranger = "http://10.9.9.9:9999/"
    for command in ("disable", "enable"):
        refused = await cli("groups", command, "billing", stranger)
        assert refused.code == 2 and "is not an address of executor group" in refused.err, command
    own = env.executors.address(0)
    assert (await cli("groups", "disable", "billing", own)).code == 0
    assert (await cli("groups", "enable", "billing", own)).code == 0


async def test_jobs_list_names_the_group_by_appname(env: AdminEnv, cli: Cli) -> None:
    await env.job(await env.group("billing", "Billing"))
    listed = await cli("jobs", "list")
    assert listed.out.splitlines()[1].split()[1] == "billing"


def _job(schedule_type: str) -> Any:
    return JobInfo(id=1, job_group=1, job_desc="d", schedule_type=schedule_type, schedule_conf="30")  # type: ignore[call-arg]


def test_fixed_rate_fires_are_recorded_as_such() -> None:
    assert _recorded_type(PlannedFire(_job("FIX_RATE"), TriggerType.CRON, 1)) is TriggerType.FIX_RATE
    assert _recorded_type(PlannedFire(_job("CRON"), TriggerType.CRON, 1)) is TriggerType.CRON
    assert _recorded_type(PlannedFire(_job("FIX_RATE"), TriggerType.MISFIRE, 1)) is TriggerType.MISFIRE


# -- starting ----------------------------------------------------------------------------------


def test_demo_port_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("JOBRING_DEMO_PORT", raising=False)
    assert admin_cmd.demo_port(None) == admin_cmd.DEMO_PORT
    monkeypatch.setenv("JOBRING_DEMO_PORT", "9997")
    assert admin_cmd.demo_port(None) == 9997
    assert admin_cmd.demo_port(9000) == 9000  # the option wins
    monkeypatch.setenv("JOBRING_DEMO_PORT", "99999")
    with pytest.raises(UsageError, match="JOBRING_DEMO_PORT: must be a port 1-65535"):
        admin_cmd.demo_port(None)
    # `make run` starts `jobring run`, which reads it (make passes JOBRING_DEMO_PORT=... on).
    assert "$(BIN)/jobring run" in (Path(__file__).resolve().parents[1] / "Makefile").read_text()


def test_jobring_admin_logs_where_it_listens_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    served: list[Any] = []
    monkeypatch.setattr("jobring.logsetup.setup_logging", lambda *args: None)  # keep caplog's handler
    monkeypatch.setattr("jobring.logsetup.set_log_node", lambda node: None)  # a process-wide default

    def serve(settings: Any, *, sock: socket.socket, **kw: Any) -> int:
        served.append(settings)
        sock.close()
        return 0

    monkeypatch.setattr("jobring.admin.runtime.node.serve", serve)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    caplog.set_level(logging.INFO)
    code = main(["admin", "--port", str(port), "--database-url", f"sqlite:///{tmp_path / 'j.db'}",
                 "--insecure"])
    assert code == 0 and len(served) == 1
    lines = [r.getMessage() for r in caplog.records if "admin at http://" in r.getMessage()]
    assert lines == [lines[0]] and f"admin at http://127.0.0.1:{port}/" in lines[0]


async def test_schema_upgrade_is_one_line_and_alembic_is_quiet(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from jobring.logsetup import setup_logging

    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    try:
        setup_logging("plain", "INFO")
        assert logging.getLogger("alembic").getEffectiveLevel() == logging.WARNING
    finally:  # give pytest its handlers back
        root.handlers[:] = handlers
        root.setLevel(level)
        logging.getLogger("alembic").setLevel(logging.NOTSET)
    caplog.set_level(logging.INFO, logger="jobring.admin.store")
    url = f"sqlite+aiosqlite:///{tmp_path / 'j.db'}"
    await upgrade_database(url)
    await upgrade_database(url)  # nothing to do: nothing said
    said = [r.getMessage() for r in caplog.records if r.name == "jobring.admin.store"]
    assert len(said) == 1 and said[0].startswith("database schema upgraded from none to ")


async def test_the_executor_says_listening_on_once(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="jobring.executor")
    for announce in (True, False):
        executor = Executor(app_name="quiet", host="127.0.0.1", port=0, allow_open=True,
                            log_path=str(tmp_path / str(announce)), environ={})
        await executor.serve(ready=lambda address, e=executor: e.stop(), announce=announce)  # type: ignore[misc]
    lines = [r.getMessage() for r in caplog.records if "listening on" in r.getMessage()]
    assert len(lines) == 1  # the announced start only; `jobring executor` prints its own line


# -- jobring db upgrade on a server without the database -----------------------------------------


def test_db_upgrade_creates_a_missing_database(fresh_db_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    backend = backend_of(fresh_db_url)
    if backend == "sqlite":
        pytest.skip("a SQLite file is created by its first connection")
    drop_test_database(fresh_db_url)  # the name is free now: what a newcomer's URL names
    plain = make_url(fresh_db_url).set(drivername="postgresql" if backend == "postgresql" else "mysql")
    url = plain.render_as_string(hide_password=False)
    assert main(["db", "upgrade", "--database-url", url]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0].endswith(": created the database") and "upgraded schema from none" in out
    assert main(["db", "upgrade", "--database-url", url, "--json"]) == 0
    again = json.loads(capsys.readouterr().out)
    assert (again["created"], again["changed"]) == (False, False)


def test_db_upgrade_says_how_when_the_user_may_not_create_it(capsys: pytest.CaptureFixture[str]) -> None:
    role, name = DB_PREFIX + "role_" + secrets.token_hex(3), DB_PREFIX + secrets.token_hex(6)
    server = make_url(SERVER_URLS["postgresql"])

    async def as_superuser(statement: str) -> None:
        conn = await asyncpg.connect(host=server.host, port=server.port or 5432, user=server.username,
                                     password=server.password, database=server.database, timeout=5)
        try:
            await conn.execute(statement)
        finally:
            await conn.close()

    try:
        run_in_fresh_loop(lambda: as_superuser(f'CREATE ROLE "{role}" LOGIN NOCREATEDB'))
    except (OSError, asyncpg.PostgresError) as exc:
        if os.environ.get("CI", "").lower() == "true":
            raise
        pytest.skip(f"PostgreSQL unavailable: {exc}")
    try:
        url = server.set(username=role, password=None, database=name).render_as_string(hide_password=False)
        assert main(["db", "upgrade", "--database-url", url]) == 1
        err = capsys.readouterr().err
        assert f"database {name!r} does not exist and user {role!r} cannot create it" in err
        assert f"createdb -h {server.host} -p {server.port or 5432} -O {role} {name}" in err
        assert "Traceback" not in err
    finally:
        run_in_fresh_loop(lambda: as_superuser(f'DROP ROLE IF EXISTS "{role}"'))

