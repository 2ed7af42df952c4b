"""The CLI commands added for the first hour, against the real management app in-process:
jobs edit/copy/delete and every job field, groups by appname, users, settings, dashboard,
runs clear and log --json."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

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
    monkeypatch.setenv("JOBRING_USER_PASSWORD", "A-user-password-77")
    return cli_for(env, capsys, monkeypatch)


async def test_jobs_add_by_appname_with_every_field_then_show(env: AdminEnv, cli: Cli) -> None:
    group = await env.group("billing", "Billing and invoicing")
    child = await env.job(group)
    added = await cli(
        "jobs", "add", "--group", "billing", "--desc", "invoices", "--handler", "invoice",
        "--cron", "0 0 3 * * ?", "--timezone", "Europe/Berlin", "--param", "all", "--route", "ROUND",
        "--block", "DISCARD_LATER", "--misfire", "FIRE_ONCE_NOW", "--timeout", "600", "--retries", "2",
        "--alarm-email", "ops@example.com", "--child", str(child["id"]), "--author", "ana", "--json",
    )
    assert added.code == 0, added.err
    job = json.loads(added.out)
    assert job["job_group"] == group and job["schedule_timezone"] == "Europe/Berlin"
    assert (job["executor_block_strategy"], job["misfire_strategy"]) == ("DISCARD_LATER", "FIRE_ONCE_NOW")
    assert (job["executor_timeout"], job["executor_fail_retry_count"]) == (600, 2)
    assert (job["alarm_email"], job["child_job_ids"]) == ("ops@example.com", [child["id"]])
    assert job["author"] == "ana"

    shown = await cli("jobs", "show", str(job["id"]))
    assert shown.code == 0
    status_line = next(line for line in shown.out.splitlines() if line.startswith("trigger_status"))
    assert status_line.split()[1] == "stopped"

    unknown = await cli("jobs", "add", "--group", "nope", "--desc", "d", "--handler", "h", "--none")
    assert unknown.code == 2 and "no executor group has the appname 'nope'" in unknown.err


async def test_jobs_add_start_with_a_never_firing_schedule_creates_nothing(env: AdminEnv, cli: Cli) -> None:
    group = await env.group()
    refused = await cli("jobs", "add", "--group", str(group), "--desc", "past", "--handler", "h",
                        "--cron", "0 0 0 1 1 ? 2020", "--start")
    assert refused.code == 2 and "never fires" in refused.err
    assert (await env.store.jobs.list()).total == 0


async def test_fix_rate_with_a_time_zone_is_refused(env: AdminEnv, cli: Cli) -> None:
    group = await env.group()
    refused = await cli("jobs", "add", "--group", str(group), "--desc", "d", "--handler", "h",
                        "--fix-rate", "30", "--timezone", "Europe/Berlin")
    assert refused.code == 2 and "--timezone applies to --cron only" in refused.err
    assert (await env.store.jobs.list()).total == 0


async def test_jobs_edit_copy_delete(env: AdminEnv, cli: Cli) -> None:
    group = await env.group()
    other = await env.group("other-app", "Other")
    job = await env.job(group)
    edited = await cli("jobs", "edit", str(job["id"]), "--desc", "renamed", "--fix-rate", "45",
                       "--group", "other-app", "--timeout", "0", "--json")
    assert edited.code == 0, edited.err
    body = json.loads(edited.out)
    assert (body["job_desc"], body["schedule_type"], body["schedule_conf"], body["job_group"]) == (
        "renamed", "FIX_RATE", "45", other)
    nothing = await cli("jobs", "edit", str(job["id"]))
    assert nothing.code == 2 and "nothing to change" in nothing.err

    copied = await cli("jobs", "copy", str(job["id"]))
    assert copied.code == 0 and copied.out.startswith(f"copied job {job['id']} to job ")
    copy_id = int(copied.out.split()[5])
    deleted = await cli("jobs", "delete", str(copy_id))
    assert (deleted.code, deleted.out) == (0, f"job {copy_id} deleted, with its runs\n")
    assert await env.store.jobs.get(copy_id) is None
    gone = await cli("jobs", "delete", str(copy_id))
    assert gone.code == 2


async def test_groups_by_appname_show_edit_delete(env: AdminEnv, cli: Cli) -> None:
    group = await env.group("billing", "Billing")
    shown = await cli("groups", "show", "billing")
    assert shown.code == 0 and shown.out.startswith(f"group {group}: billing (Billing)")
    edited = await cli("groups", "edit", "billing", "--title", "Billing and invoicing", "--auto", "--json")
    assert edited.code == 0, edited.err
    assert (json.loads(edited.out)["title"], json.loads(edited.out)["address_type"]) == (
        "Billing and invoicing", 0)
    await env.job(group)
    in_use = await cli("groups", "delete", "billing")
    assert in_use.code == 2
    spare = await env.group("spare", "Spare")
    deleted = await cli("groups", "delete", str(spare))
    assert (deleted.code, deleted.out) == (0, f"group {spare} deleted\n")


async def test_users_add_list_edit_reset_delete(env: AdminEnv, cli: Cli) -> None:
    await env.group("billing", "Billing")
    added = await cli("users", "add", "alice", "--role", "viewer", "--group", "billing", "--json")
    assert added.code == 0, added.err
    user = json.loads(added.out)
    assert (user["role"], len(user["group_ids"]), user["must_change_password"]) == ("viewer", 1, True)
    listed = await cli("users", "list")
    assert listed.code == 0 and "alice" in listed.out and listed.out.split()[0] == "ID"
    edited = await cli("users", "edit", "alice", "--role", "operator", "--glue")
    assert edited.code == 0 and "(alice, operator)" in edited.out
    reset = await cli("users", "reset-password", "alice")
    assert reset.code == 0 and "must change it" in reset.out
    deleted = await cli("users", "delete", "alice")
    assert deleted.code == 0
    missing = await cli("users", "delete", "alice")
    assert missing.code == 2 and "no user is named 'alice'" in missing.err


async def test_settings_show_and_token(env: AdminEnv, cli: Cli) -> None:
    shown = await cli("settings")
    rows = dict(line.split(maxsplit=1) for line in shown.out.splitlines()[1:])
    assert shown.code == 0 and (rows["database_backend"], rows["glue_enabled"]) == ("sqlite", "False")
    as_json = json.loads((await cli("settings", "show", "--json")).out)
    assert as_json["global_access_token"] is (env.services.secrets.access_token is not None) is False
    # Without the global token (the default) executors use their group's token.
    token = await cli("settings", "token")
    assert token.code == 1 and "jobring groups token APPNAME" in token.err
    assert json.loads((await cli("settings", "token", "--json")).out) == {"access_token": None}


async def test_dashboard_counts_and_chart(env: AdminEnv, cli: Cli) -> None:
    job = await env.job(await env.group())
    async with env.client() as admin:
        await admin.jobs.trigger(job["id"])
    board = await cli("dashboard", "--days", "3")
    assert board.code == 0, board.err
    lines = board.out.splitlines()
    assert lines[0].startswith("jobs: 1") and lines[1].startswith("runs today: 1")
    chart = lines[-3:]
    assert len(chart) == 3 and chart[-1].split()[1] == "1" and chart[-1].endswith(".")
    assert json.loads((await cli("dashboard", "--json")).out)["job_count"] == 1


async def test_runs_clear_and_list_by_group_appname(env: AdminEnv, cli: Cli) -> None:
    group = await env.group("billing", "Billing")
    job = await env.job(group)
    async with env.client() as admin:
        await admin.jobs.trigger(job["id"])
    listed = await cli("runs", "list", "--group", "billing", "--json")
    assert json.loads(listed.out)["total"] == 1
    unconfirmed = await cli("runs", "clear", "--rule", "all")
    assert unconfirmed.code == 2 and "--yes" in unconfirmed.err
    cleared = await cli("runs", "clear", "--rule", "all", "--group", "billing")
    assert (cleared.code, cleared.out) == (0, "1 runs deleted\n")


async def test_runs_log_json(env: AdminEnv, cli: Cli) -> None:
    job = await env.job(await env.group())
    async with env.client() as admin:
        run_id = (await admin.jobs.trigger(job["id"]))["run_ids"][0]

    async def answer(body: dict[str, object]) -> ReturnT:
        return ReturnT(code=200, content={"fromLineNum": 1, "toLineNum": 1, "logContent": "hi\n",
                                          "isEnd": True})

    env.executors.answer(env.executors.address(0), "log", answer)
    result = await cli("runs", "log", str(run_id), "--json")
    assert result.code == 0, result.err
    assert json.loads(result.out)["log_content"] == "hi\n"
