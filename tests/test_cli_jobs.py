"""`jobring jobs ...` against the real management app in-process."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

import httpx
import pytest

from jobring.admin.store import Store
from tests.client.adminkit import AdminEnv, admin_env
from tests.client.clikit import Cli, cli_for


@pytest.fixture
async def env(sqlite_store: Store) -> AsyncIterator[AdminEnv]:
    async for built in admin_env(sqlite_store):
        yield built


@pytest.fixture
def cli(env: AdminEnv, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> Cli:
    return cli_for(env, capsys, monkeypatch)


async def test_add_then_list_as_table_and_json(env: AdminEnv, cli: Cli) -> None:
    group = await env.group()
    added = await cli("jobs", "add", "--group", str(group), "--desc", "nightly report", "--handler", "report",
                      "--cron", "0 0 2 * * ?", "--param", "full", "--route", "ROUND",
                      "--timezone", "Europe/Paris")
    assert added.code == 0, added.err
    assert added.out.startswith("created job ") and "(stopped)" in added.out
    job_id = int(added.out.split()[2])
    stored = await env.store.jobs.get(job_id)
    assert stored is not None and stored.schedule_conf == "0 0 2 * * ?" and stored.executor_param == "full"
    assert stored.executor_route_strategy == "ROUND" and stored.schedule_timezone == "Europe/Paris"

    listed = await cli("jobs", "list")
    assert listed.code == 0
    header, row = listed.out.splitlines()
    assert header.split() == ["ID", "GROUP", "DESCRIPTION", "HANDLER", "SCHEDULE", "STATUS", "DECLARED",
                              "NEXT", "FIRE", "(UTC)"]
    assert row.split()[:2] == [str(job_id), "demo-app"] and "nightly report" in row  # the appname
    assert "cron 0 0 2 * * ? (Europe/Paris)" in row and "stopped" in row
    # Columns line up: every cell starts where its heading starts.
    assert row.index("nightly report") == header.index("DESCRIPTION")
    assert row.index("stopped") == header.index("STATUS")

    as_json = await cli("jobs", "list", "--json")
    body = json.loads(as_json.out)
    assert body["total"] == 1 and body["items"][0]["id"] == job_id


async def test_list_filters_by_group_status_and_search(env: AdminEnv, cli: Cli) -> None:
    first, second = await env.group(), await env.group("other-app", "Other")
    a = await env.job(first, job_desc="alpha export")
    b = await env.job(second, job_desc="beta export")
    c = await env.job(second, job_desc="gamma cleanup")
    async with env.client() as admin:
        await admin.jobs.start(b["id"])

    async def ids(*argv: str) -> list[int]:
        result = await cli("jobs", "list", "--json", *argv)
        assert result.code == 0, result.err
        return sorted(item["id"] for item in json.loads(result.out)["items"])

    assert await ids("--group", str(second)) == [b["id"], c["id"]]
    assert await ids("--status", "running") == [b["id"]]
    assert await ids("--status", "stopped") == [a["id"], c["id"]]
    assert await ids("--search", "export") == [a["id"], b["id"]]
    assert await ids("--search", "export", "--group", str(first)) == [a["id"]]


async def test_add_with_start_and_fix_rate_then_stop_and_start(env: AdminEnv, cli: Cli) -> None:
    group = await env.group()
    added = await cli("jobs", "add", "--group", str(group), "--desc", "poller", "--handler", "poll",
                      "--fix-rate", "30", "--start", "--json")
    assert added.code == 0, added.err
    job = json.loads(added.out)
    assert job["schedule_type"] == "FIX_RATE" and job["schedule_conf"] == "30" and job["trigger_status"] == 1

    stopped = await cli("jobs", "stop", str(job["id"]))
    assert (stopped.code, stopped.out) == (0, f"job {job['id']} stopped\n")
    assert (await env.store.jobs.get(job["id"])).trigger_status == 0  # type: ignore[union-attr]

    started = await cli("jobs", "start", str(job["id"]))
    assert started.code == 0 and started.out.startswith(f"job {job['id']} running, next fire ")
    assert (await env.store.jobs.get(job["id"])).trigger_status == 1  # type: ignore[union-attr]


async def test_add_with_none_schedule(env: AdminEnv, cli: Cli) -> None:
    group = await env.group()
    added = await cli("jobs", "add", "--group", str(group), "--desc", "by hand", "--handler", "h", "--none",
                      "--json")
    assert added.code == 0, added.err
    assert json.loads(added.out)["schedule_type"] == "NONE"


async def test_trigger_with_param_and_address(env: AdminEnv, cli: Cli) -> None:
    job = await env.job(await env.group())
    second = env.executors.address(1)
    result = await cli("jobs", "trigger", str(job["id"]), "--param", "once", "--address", second)
    assert result.code == 0, result.err
    (call,) = env.executors.runs()
    assert result.out.startswith(f"job {job['id']} triggered: run {call.body['logId']}")
    assert call.address == second and call.body["executorParams"] == "once"


async def test_trigger_that_reaches_no_executor_exits_1(env: AdminEnv, cli: Cli) -> None:
    job = await env.job(await env.group())
    env.executors.down.update(env.executors.hosts)
    result = await cli("jobs", "trigger", str(job["id"]))
    assert result.code == 1
    assert "trigger FAILED" in result.out
    logs = await env.store.logs.list(job_id=job["id"])
    assert logs.total == 1  # the failed run is recorded
    # `runs list` sums it up by the last line of the trigger report: what the executor said.
    last_line = [line for line in (logs.items[0].trigger_msg or "").splitlines() if line.strip()][-1]
    listed = await cli("runs", "list", "--job", str(job["id"]))
    (row,) = listed.out.splitlines()[1:]
    assert " failed " in row and last_line.strip()[:40] in row


async def test_server_refusal_prints_its_message_and_exits_2(env: AdminEnv, cli: Cli) -> None:
    group = await env.group()
    bad_cron = await cli("jobs", "add", "--group", str(group), "--desc", "x", "--handler", "h",
                         "--cron", "every tuesday")
    assert bad_cron.code == 2 and bad_cron.out == ""
    assert bad_cron.err.startswith("jobring: error: ") and "schedule_conf" in bad_cron.err
    missing = await cli("jobs", "start", "9999")
    assert missing.code == 2 and missing.err == "jobring: error: job 9999 not found\n"
    no_group = await cli("jobs", "add", "--group", "4242", "--desc", "x", "--handler", "h", "--none")
    assert no_group.code == 2 and "4242" in no_group.err
    assert (await env.store.jobs.list()).total == 0


@pytest.mark.parametrize(
    "argv",
    [
        ["jobs", "add", "--group", "1", "--desc", "x", "--handler", "h"],  # no schedule
        ["jobs", "add", "--group", "1", "--desc", "x", "--handler", "h", "--cron", "* * * * * ?", "--none"],
        ["jobs", "add", "--group", "0", "--desc", "x", "--handler", "h", "--none"],
        ["jobs", "add", "--group", "1", "--desc", "x", "--handler", "h", "--fix-rate", "-5"],
        ["jobs", "add", "--group", "1", "--desc", "x", "--handler", "h", "--none", "--route", "NEAREST"],
        ["jobs", "add", "--group", "1", "--desc", " ", "--handler", "h", "--none"],
        ["jobs", "add", "--group", "1", "--desc", "x", "--handler", "h", "--none", "--start"],
        ["jobs", "list", "--status", "paused"],
        ["jobs", "trigger", "abc"],
        ["jobs", "start"],
        ["jobs", "list", "--url", "127.0.0.1:8080"],
        ["jobs", "list", "--url", "ftp://admin.test"],
    ],
)
async def test_bad_command_lines_exit_2_without_touching_the_admin(
    env: AdminEnv, cli: Cli, argv: list[str]
) -> None:
    result = await cli(*argv)
    assert result.code == 2 and result.err
    assert (await env.store.jobs.list()).total == 0


async def test_missing_token_says_how_to_give_one(
    env: AdminEnv, cli: Cli, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("JOBRING_TOKEN")
    result = await cli("jobs", "list")
    assert result.code == 2 and "authentication required" in result.err and "JOBRING_TOKEN" in result.err
    # --token on the command line works as well as the environment variable.
    assert (await cli("jobs", "list", "--token", env.token)).code == 0


async def test_unreachable_admin_exits_1_with_a_clear_message(capsys: pytest.CaptureFixture[str]) -> None:
    import socket

    with socket.socket() as probe:  # a loopback port nobody listens on once closed
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    url = f"http://127.0.0.1:{port}"
    result = await Cli(capsys)("jobs", "list", "--url", url, "--token", "jr_unused")
    assert result.code == 1
    assert result.err.startswith(f"jobring: error: cannot reach the admin at {url}")


async def test_server_error_exits_1(capsys: pytest.CaptureFixture[str]) -> None:
    def broken(request: httpx.Request) -> httpx.Response:
        return httpx.Response(500, json={"error": "internal store error", "field": None})

    cli = Cli(capsys, lambda url: httpx.MockTransport(broken))
    result = await cli("jobs", "list", "--token", "jr_unused")
    assert (result.code, result.err) == (1, "jobring: error: internal store error\n")


async def test_next_lists_upcoming_fire_times(env: AdminEnv, cli: Cli) -> None:
    group = await env.group()
    job = await env.job(group, schedule_type="CRON", schedule_conf="0 30 9 * * ?",
                        schedule_timezone="Asia/Tokyo")
    result = await cli("jobs", "next", str(job["id"]), "--count", "2")
    assert result.code == 0, result.err
    first, second = result.out.splitlines()
    # 09:30 in Tokyo is 00:30 UTC, on consecutive days.
    assert first.endswith(" 00:30:00 UTC") and second.endswith(" 00:30:00 UTC") and first < second
    manual = await env.job(group, schedule_type="NONE", schedule_conf=None)
    none = await cli("jobs", "next", str(manual["id"]))
    assert (none.code, none.out) == (1, "")
    assert none.err == f"jobring: job {manual['id']} has no schedule: it runs only when triggered\n"
    # A cron whose only fire is past never fires again: said on stderr, exit 1.
    past = await env.job(group, schedule_type="CRON", schedule_conf="0 0 0 1 1 ? 2020")
    never = await cli("jobs", "next", str(past["id"]))
    assert (never.code, never.out) == (1, "") and "never fires again" in never.err
    too_many = await cli("jobs", "next", str(job["id"]), "--count", "1000")
    assert too_many.code == 2 and "count" in too_many.err


async def test_trigger_at_and_in_then_list_and_cancel(env: AdminEnv, cli: Cli) -> None:
    job = await env.job(await env.group())
    later = await cli("jobs", "trigger", str(job["id"]), "--in", "10m", "--param", "p")
    assert later.code == 0, later.err
    assert "scheduled to run at" in later.out and "delayed run" in later.out
    at = await cli("jobs", "trigger", str(job["id"]), "--at", "2026-09-22T14:00:00", "--json")
    assert at.code == 0, at.err
    pending = json.loads(at.out)
    assert pending["fire_at_iso"] == "2026-09-22T14:00:00Z" and pending["state"] == "scheduled"
    listed = await cli("jobs", "delayed", str(job["id"]))
    assert listed.code == 0 and len(listed.out.splitlines()) == 3 and "scheduled" in listed.out
    cancelled = await cli("jobs", "delayed", str(job["id"]), "--cancel", str(pending["id"]))
    assert cancelled.code == 0 and "cancelled" in cancelled.out
    assert [d.id for d in await env.store.delayed.for_job(job["id"])] != [pending["id"]]
    assert len(await env.store.delayed.for_job(job["id"])) == 1
    past = await cli("jobs", "trigger", str(job["id"]), "--at", "2020-01-01T00:00:00Z")
    assert past.code == 2 and "at" in past.err
    bad = await cli("jobs", "trigger", str(job["id"]), "--in", "soon")
    assert bad.code == 2 and "duration" in bad.err
    both = await cli("jobs", "trigger", str(job["id"]), "--in", "1m", "--at", "2026-09-21T14:00:00")
    assert both.code == 2


async def test_edit_hands_a_job_to_the_code_and_back(env: AdminEnv, cli: Cli) -> None:
    job_id = (await env.job(await env.group(), job_desc="made by hand"))["id"]
    handed = await cli("jobs", "edit", str(job_id), "--managed-by", "code")
    assert handed.code == 0, handed.err
    stored = await env.store.jobs.get(job_id)
    assert stored is not None and stored.managed_by == "code"
    listed = await cli("jobs", "list")
    assert "handed over" in listed.out
    back = await cli("jobs", "edit", str(job_id), "--managed-by", "console")
    assert back.code == 0, back.err
    stored = await env.store.jobs.get(job_id)
    assert stored is not None and stored.managed_by == "console"
    wrong = await cli("jobs", "edit", str(job_id), "--managed-by", "robots")
    assert wrong.code == 2


async def test_trigger_skipped_by_discard_later_is_not_a_failure(env: AdminEnv, cli: Cli) -> None:
    from jobring.executor.worker import MSG_DISCARD_LATER
    from jobring.protocol.models import ReturnT

    job = await env.job(await env.group())

    async def busy(body: dict[str, object]) -> ReturnT:
        return ReturnT(code=500, msg=MSG_DISCARD_LATER)

    for address in env.executors.addresses:
        env.executors.answer(address, "run", busy)
    result = await cli("jobs", "trigger", str(job["id"]))
    assert result.code == 0, result.err
    assert "trigger FAILED" not in result.out
    assert result.out.startswith(f"job {job['id']} skipped (DISCARD_LATER")
