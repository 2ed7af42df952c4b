"""`jobring runs ...` and `jobring groups ...` against the real management app in-process."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import pytest

from jobring.admin.store import Store
from jobring.protocol.models import ReturnT
from tests.client.adminkit import AdminEnv, admin_env
from tests.client.clikit import Cli, cli_for


@pytest.fixture
async def env(sqlite_store: Store) -> AsyncIterator[AdminEnv]:
    async for built in admin_env(sqlite_store):
        yield built


@pytest.fixture
def cli(env: AdminEnv, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> Cli:
    return cli_for(env, capsys, monkeypatch)


async def _run_of_new_job(env: AdminEnv, group: int | None = None) -> tuple[int, int]:
    job = await env.job(group or await env.group())
    async with env.client() as admin:
        result = await admin.jobs.trigger(job["id"])
    return job["id"], result["run_ids"][0]


def _log_chunks(*chunks: tuple[list[str], bool]) -> Any:
    """An executor /log answer giving, call after call, the next (new lines, is_end) chunk."""
    remaining = list(chunks)

    async def answer(body: dict[str, Any]) -> ReturnT:
        lines, end = remaining.pop(0)
        start = int(body["fromLineNum"])
        content = {"fromLineNum": start, "toLineNum": start + len(lines) - 1,
                   "logContent": "".join(f"{line}\n" for line in lines), "isEnd": end}
        return ReturnT(code=200, content=content)

    return answer


async def test_runs_list_table_filters_and_json(env: AdminEnv, cli: Cli) -> None:
    group = await env.group()
    job_a, run_a = await _run_of_new_job(env, group)
    job_b, run_b = await _run_of_new_job(env, group)

    table = await cli("runs", "list")
    assert table.code == 0, table.err
    header, *rows = table.out.splitlines()
    assert header.split()[:3] == ["ID", "JOB", "TRIGGERED"]
    assert [row.split()[0] for row in rows] == [str(run_b), str(run_a)]  # newest first
    assert all("running" in row and "MANUAL" in row for row in rows)

    only_a = json.loads((await cli("runs", "list", "--job", str(job_a), "--json")).out)
    assert [item["id"] for item in only_a["items"]] == [run_a] and only_a["total"] == 1
    assert json.loads((await cli("runs", "list", "--status", "success", "--json")).out)["total"] == 0
    limited = await cli("runs", "list", "--limit", "1")
    assert limited.out.splitlines()[-1] == "(1 of 2 runs shown; use --limit for more)"


async def test_runs_log_prints_from_a_line(env: AdminEnv, cli: Cli) -> None:
    _, run_id = await _run_of_new_job(env)
    env.executors.answer(env.executors.address(0), "log", _log_chunks((["two", "three"], True)))
    result = await cli("runs", "log", str(run_id), "--from-line", "2")
    assert (result.code, result.out) == (0, "two\nthree\n")
    (asked,) = [c.body for c in env.executors.calls if c.path == "log"]
    assert asked["fromLineNum"] == 2 and asked["logId"] == run_id


async def test_runs_log_prints_xxl_jobs_br_markers_as_line_breaks(env: AdminEnv, cli: Cli) -> None:
    _, run_id = await _run_of_new_job(env)
    chunk = (["<br>----------- jobring job execute start -----------<br>----------- Param:x", "work"], True)
    env.executors.answer(env.executors.address(0), "log", _log_chunks(chunk))
    result = await cli("runs", "log", str(run_id))
    assert result.out == "\n----------- jobring job execute start -----------\n----------- Param:x\nwork\n"


async def test_runs_log_follow_polls_until_the_log_ends(env: AdminEnv, cli: Cli) -> None:
    _, run_id = await _run_of_new_job(env)
    env.executors.answer(env.executors.address(0), "log", _log_chunks(
        (["start"], False), ([], False), (["middle", "done"], False), ([], True)))
    result = await cli("runs", "log", str(run_id), "--follow", "--interval", "0")
    assert (result.code, result.out) == (0, "start\nmiddle\ndone\n")
    asked = [c.body["fromLineNum"] for c in env.executors.calls if c.path == "log"]
    assert asked == [1, 2, 2, 4]


async def test_runs_log_of_an_unknown_run_and_executor_failure(env: AdminEnv, cli: Cli) -> None:
    unknown = await cli("runs", "log", "777")
    assert unknown.code == 2 and "777" in unknown.err and unknown.err.startswith("jobring: error: ")
    _, run_id = await _run_of_new_job(env)
    env.executors.down.add(env.executors.hosts[0])
    unreachable_executor = await cli("runs", "log", str(run_id))
    # The admin answers 502: a server-side failure, exit 1 with the admin's explanation.
    assert unreachable_executor.code == 1 and env.executors.hosts[0] in unreachable_executor.err


@pytest.mark.parametrize(
    "argv",
    [["runs", "list", "--status", "weird"], ["runs", "list", "--limit", "0"], ["runs", "log"],
     ["runs", "log", "1", "--from-line", "0"], ["runs", "log", "1", "--interval", "-1"], ["runs"]],
)
async def test_runs_bad_command_lines_exit_2(cli: Cli, argv: list[str]) -> None:
    result = await cli(*argv)
    assert result.code == 2


async def test_groups_add_list_and_show(env: AdminEnv, cli: Cli) -> None:
    added = await cli("groups", "add", "billing", "Billing", "--address", "http://10.9.9.9:9999/")
    assert added.code == 0, added.err
    assert added.out.startswith("created group ") and "manual addresses" in added.out
    group_id = int(added.out.split()[2])
    auto = await cli("groups", "add", "reports", "Reports", "--json")
    assert json.loads(auto.out)["address_type"] == 0

    listed = await cli("groups", "list")
    header, *rows = listed.out.splitlines()
    assert header.split()[:3] == ["ID", "APPNAME", "TITLE"] and len(rows) == 2
    shown = await cli("groups", "show", str(group_id))
    assert shown.code == 0 and "address http://10.9.9.9:9999/" in shown.out
    assert "online executors: 0" in shown.out

    off = await cli("groups", "disable", str(group_id), "http://10.9.9.9:9999/")
    assert off.code == 0 and "disabled in group" in off.out and "routable: -" in off.out
    assert "disabled http://10.9.9.9:9999/" in (await cli("groups", "show", str(group_id))).out
    on = await cli("groups", "enable", str(group_id), "http://10.9.9.9:9999/", "--json")
    assert on.code == 0 and json.loads(on.out)["disabled_addresses"] == []
    unknown = await cli("groups", "disable", str(group_id), "http://10.1.1.1:1/")
    assert unknown.code == 2 and "address" in unknown.err

    too_long = await cli("groups", "add", "x", "t" * 65)
    assert too_long.code == 2 and "title" in too_long.err
    assert (await env.store.groups.list()).total == 2


async def test_groups_show_names_the_handlers_each_online_executor_declared(env: AdminEnv, cli: Cli) -> None:
    group_id = json.loads((await cli("groups", "add", "reports", "Reports", "--json")).out)["id"]
    now = env.services.now_naive_utc()
    await env.store.registry.beat("EXECUTOR", "reports", "http://10.0.0.1:9999/", now, handlers=["b", "a"])
    await env.store.registry.beat("EXECUTOR", "reports", "http://10.0.0.2:9999/", now)
    shown = await cli("groups", "show", str(group_id))
    assert shown.code == 0, shown.err
    lines = shown.out.splitlines()
    assert "HANDLERS" in next(line for line in lines if line.startswith("ADDRESS"))
    assert next(line for line in lines if "10.0.0.1" in line).endswith("a, b")
    assert next(line for line in lines if "10.0.0.2" in line).endswith("(not declared: any)")


async def test_groups_show_names_each_online_executors_dispatch_mode(env: AdminEnv, cli: Cli) -> None:
    group_id = json.loads((await cli("groups", "add", "mixed", "Mixed", "--json")).out)["id"]
    now = env.services.now_naive_utc()
    await env.store.registry.beat("EXECUTOR", "mixed", "http://10.0.0.1:9999/", now)
    await env.store.registry.beat("EXECUTOR", "mixed", "pull://worker-7/", now)
    shown = await cli("groups", "show", str(group_id))
    assert shown.code == 0, shown.err
    lines = shown.out.splitlines()
    assert "DISPATCH" in next(line for line in lines if line.startswith("ADDRESS"))
    assert next(line for line in lines if "10.0.0.1" in line).split()[1] == "push"
    assert next(line for line in lines if "worker-7" in line).split()[1] == "pull"
    as_json = json.loads((await cli("groups", "show", str(group_id), "--json")).out)
    assert {o["address"]: o["dispatch"] for o in as_json["online"]} == {
        "http://10.0.0.1:9999/": "push", "pull://worker-7/": "pull"}


async def test_groups_token_prints_only_the_token(env: AdminEnv, cli: Cli) -> None:
    added = await cli("groups", "add", "my-app", "Mine", "--json")
    group_id = json.loads(added.out)["id"]
    by_name = await cli("groups", "token", "my-app")
    by_id = await cli("groups", "token", str(group_id))
    assert by_name.code == by_id.code == 0 and by_name.out == by_id.out
    token = by_name.out.strip()
    assert by_name.out == token + "\n" and len(token) >= 40
    rotated = await cli("groups", "token", "my-app", "--rotate")
    assert rotated.code == 0 and rotated.out.strip() not in ("", token)
    group = await env.store.groups.get(group_id)
    assert group is not None and group.access_token == rotated.out.strip()
    missing = await cli("groups", "token", "no-such-app")
    assert missing.code == 2 and "no executor group" in missing.err


async def test_runs_show_and_kill(env: AdminEnv, cli: Cli) -> None:
    job_id, run_id = await _run_of_new_job(env)
    shown = await cli("runs", "show", str(run_id))
    assert shown.code == 0, shown.err
    assert shown.out.startswith(f"run {run_id} of job {job_id}: running\n")
    assert f"address: {env.executors.address(0)}" in shown.out and "trigger message:" in shown.out

    async def refuse(body: dict[str, Any]) -> ReturnT:
        return ReturnT.fail("job thread is not running")

    env.executors.answer(env.executors.address(0), "kill", refuse)
    not_killed = await cli("runs", "kill", str(run_id))
    assert (not_killed.code, not_killed.out) == (1, f"run {run_id} not killed: job thread is not running\n")

    del env.executors.answers[(env.executors.address(0), "kill")]
    killed = await cli("runs", "kill", str(run_id))
    assert killed.code == 0 and killed.out.startswith(f"run {run_id} killed: ")
    assert [c.body for c in env.executors.calls if c.path == "kill"] == [{"jobId": job_id}] * 2
    again = await cli("runs", "kill", str(run_id))
    assert (again.code, again.err) == (2, f"jobring: error: run {run_id} is not running\n")


async def test_group_without_command_prints_its_help_and_exits_2(cli: Cli) -> None:
    result = await cli("jobs")
    assert result.code == 2 and "trigger" in result.err and "COMMAND" in result.err


async def test_tokens_create_by_login_then_list_and_revoke(
    env: AdminEnv, cli: Cli, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tests.client.adminkit import ADMIN_PASSWORD

    # A token in the environment must not be used when logging in: the session decides who acts.
    monkeypatch.setenv("JOBRING_TOKEN", "jr_" + "not-a-real-token" * 3)
    monkeypatch.setenv("JOBRING_PASSWORD", ADMIN_PASSWORD)
    created = await cli("tokens", "create", "laptop", "--user", "admin")
    assert created.code == 0, created.err
    token = created.out.strip()
    assert token.startswith("jr_") and "shown only this once" in created.err

    listed = await cli("tokens", "list", "--json", "--token", token)
    laptop = next(t for t in json.loads(listed.out) if t["name"] == "laptop")
    assert laptop["revoked"] is False
    revoked = await cli("tokens", "revoke", str(laptop["id"]), "--token", token)
    assert (revoked.code, revoked.out) == (0, f"token {laptop['id']} revoked\n")
    after = await cli("jobs", "list", "--token", token)
    assert after.code == 2 and "revoked" in after.err

    monkeypatch.setenv("JOBRING_PASSWORD", "wrong-password")
    wrong = await cli("tokens", "create", "x", "--user", "admin")
    assert wrong.code == 2 and wrong.err.startswith("jobring: error: ") and "--token" not in wrong.err


async def test_tokens_create_with_expiry_and_list_shows_it(
    env: AdminEnv, cli: Cli, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tests.client.adminkit import ADMIN_PASSWORD

    monkeypatch.setenv("JOBRING_PASSWORD", ADMIN_PASSWORD)
    created = await cli("tokens", "create", "ci", "--user", "admin", "--expires-in", "7", "--json")
    assert created.code == 0, created.err
    token = json.loads(created.out)
    assert token["expires_at"] is not None
    listed = await cli("tokens", "list", "--token", token["token"])
    assert listed.code == 0 and "EXPIRES (UTC)" in listed.out
    row = next(line for line in listed.out.splitlines() if line.split()[1] == "ci")
    assert "never" not in row and token["expires_at"][:10] in row
    too_long = await cli("tokens", "create", "x", "--user", "admin", "--expires-in", "99999")
    assert too_long.code == 2 and "expires_in_days" in too_long.err
    # Made with that token: no later than it, and said so when asked for more.
    outliving = await cli("tokens", "create", "child", "--token", token["token"])
    assert outliving.code == 2 and "cannot outlive" in outliving.err
    child = await cli("tokens", "create", "child", "--token", token["token"], "--expires-at",
                      token["expires_at"], "--json")
    assert child.code == 0, child.err
    assert json.loads(child.out)["parent_token_id"] == token["id"]


async def test_a_retried_run_shows_its_attempts(env: AdminEnv, cli: Cli) -> None:
    from datetime import UTC, datetime

    from jobring.admin.store.records import HandleResult, NewLog

    job_id, first = await _run_of_new_job(env)
    now = datetime(2026, 3, 1, tzinfo=UTC)
    await env.store.logs.record_results([HandleResult(first, 500, "boom", now)])
    (retry,) = await env.store.logs.insert_fires([NewLog(
        job_group=(await env.store.jobs.get(job_id)).job_group,  # type: ignore[union-attr]
        job_id=job_id, trigger_time=now, trigger_code=200, trigger_type="RETRY", attempt=2, retry_of=first)])
    assert retry is not None
    async with env.client() as admin:
        chain = await admin.runs.attempts(retry)
    assert [(r["id"], r["attempt"], r["retry_of"]) for r in chain] == [(first, 1, None), (retry, 2, first)]
    shown = await cli("runs", "show", str(first))
    assert shown.code == 0, shown.err
    assert f"attempts:\n  1. run {first}: failed  <- this run\n  2. run {retry}: running\n" in shown.out
    listed = await cli("runs", "list", "--job", str(job_id))
    assert "RETRY OF" in listed.out.splitlines()[0]
    assert any(line.split()[0] == str(retry) and f" {first} " in line for line in listed.out.splitlines()[1:])
