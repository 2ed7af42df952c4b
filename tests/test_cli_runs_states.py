"""Run states through the API, the client and `jobring runs ...`: fires recorded ahead are
"scheduled", hidden by default, and a follower waits for their dispatch."""

from __future__ import annotations

import asyncio
import types
from collections.abc import AsyncIterator
from datetime import UTC, datetime

import pytest
from sqlalchemy import update

from jobring.admin.store import HandleResult, NewLog, Store
from jobring.admin.store.tables import job_log
from jobring.client import AdminApiError
from jobring.core.timefmt import iso_ms
from tests.client.adminkit import AdminEnv, admin_env, log_answer
from tests.client.clikit import Cli, cli_for


@pytest.fixture
async def env(sqlite_store: Store) -> AsyncIterator[AdminEnv]:
    async for built in admin_env(sqlite_store):
        yield built


@pytest.fixture
def cli(env: AdminEnv, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> Cli:
    return cli_for(env, capsys, monkeypatch)


async def _scheduled_and_manual(env: AdminEnv) -> tuple[int, int, int, int]:
    """A job with one fire recorded 2 s ahead (scheduled) and one manual run (running)."""
    group = await env.group()
    job = (await env.job(group))["id"]
    planned = env.clock.now_ms() + 2_000
    scheduled = await env.store.logs.insert(NewLog(
        group, job, datetime.fromtimestamp(planned / 1000, tz=UTC), executor_handler="demoJobHandler",
        trigger_type="CRON", planned_time=planned,
    ))
    async with env.client() as admin:
        manual = (await admin.jobs.trigger(job))["run_ids"][0]
    return job, scheduled, manual, planned


async def test_api_states_filters_and_default(env: AdminEnv) -> None:
    job, scheduled, manual, planned = await _scheduled_and_manual(env)
    async with env.client() as admin:
        default = await admin.runs.list(job=job)
        assert [r["id"] for r in default.items] == [manual]  # the fire ahead is not a run yet
        assert default.items[0]["state"] == "running" and default.items[0]["duration_ms"] is None
        only = await admin.runs.list(job=job, state="scheduled")
        assert [(r["id"], r["state"]) for r in only.items] == [(scheduled, "scheduled")]
        both = await admin.runs.list(job=job, state=["scheduled", "running"])
        assert {r["id"] for r in both.items} == {scheduled, manual}
        assert (await admin.runs.list(job=job, status="all")).total == 2  # the older filter as before
        with pytest.raises(AdminApiError) as refused:
            await admin.runs.list(job=job, state="scheduled,nonsense")
        assert (refused.value.status, refused.value.field) == (422, "state")
        detail = await admin.runs.get(scheduled)
        assert detail["state"] == "scheduled"
        log = await admin.runs.log(scheduled)
        assert log["is_end"] is False and f"scheduled for {iso_ms(planned)}" in log["log_content"]
        # At its instant the fire is due: "dispatching" until the executor answered.
        env.clock.advance(2_000)
        assert (await admin.runs.get(scheduled))["state"] == "dispatching"
        dash = await admin.dashboard.get()
        assert dash["runs_today"] == 2 and dash["runs_today_running"] == 2


async def test_dashboard_does_not_count_scheduled_fires(env: AdminEnv) -> None:
    await _scheduled_and_manual(env)
    async with env.client() as admin:
        dash = await admin.dashboard.get()
    assert (dash["runs_today"], dash["runs_today_running"]) == (1, 1)


async def test_duration_of_a_finished_run(env: AdminEnv) -> None:
    _, _, manual, _ = await _scheduled_and_manual(env)
    dispatched = (await env.store.logs.get(manual)).dispatch_time  # type: ignore[union-attr]
    assert dispatched is not None
    finished = datetime.fromtimestamp((dispatched + 2_345) / 1000, tz=UTC)
    await env.store.logs.record_results([HandleResult(manual, 500, "ValueError: bad input", finished)])
    async with env.client() as admin:
        run = await admin.runs.get(manual)
    assert (run["state"], run["duration_ms"]) == ("failed", 2_345)
    # A row finished before the millisecond column existed: measured from its whole-second time.
    async with env.store.db.write() as conn:
        await conn.execute(update(job_log).where(job_log.c.id == manual).values(handle_time_ms=None))
    async with env.client() as admin:
        assert 1_345 <= (await admin.runs.get(manual))["duration_ms"] <= 2_345


async def test_cli_lists_states_and_shows_a_scheduled_run(env: AdminEnv, cli: Cli) -> None:
    job, scheduled, manual, planned = await _scheduled_and_manual(env)
    table = await cli("runs", "list", "--job", str(job))
    header, *rows = table.out.splitlines()
    assert "STATE" in header and "DURATION" in header
    assert [r.split()[0] for r in rows] == [str(manual)]
    listed = await cli("runs", "list", "--job", str(job), "--state", "scheduled")
    (row,) = listed.out.splitlines()[1:]
    assert row.split()[0] == str(scheduled) and "scheduled" in row and iso_ms(planned) in row
    bad = await cli("runs", "list", "--state", "sleeping")
    assert bad.code == 2 and "sleeping" in bad.err
    shown = await cli("runs", "show", str(scheduled))
    assert f"scheduled for {iso_ms(planned)}" in shown.out
    once = await cli("runs", "log", str(scheduled))
    assert once.code == 0 and f"scheduled for {iso_ms(planned)}" in once.out


async def test_follow_waits_for_the_dispatch(
    env: AdminEnv, cli: Cli, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, scheduled, _, _ = await _scheduled_and_manual(env)
    address = env.executors.address(0)
    env.executors.answer(address, "log", log_answer({1: "started", 2: "done"}, end_after=2))
    loop = asyncio.get_running_loop()
    waits: list[float] = []

    async def dispatch() -> None:
        async with env.store.db.write() as conn:
            await conn.execute(update(job_log).where(job_log.c.id == scheduled).values(
                trigger_code=200, executor_address=address, dispatch_time=env.clock.now_ms()))

    def sleep(seconds: float) -> None:  # the follower's poll pause: the fire goes out meanwhile
        waits.append(seconds)
        if len(waits) == 1:
            asyncio.run_coroutine_threadsafe(dispatch(), loop).result(10)

    monkeypatch.setattr("jobring.cli.runs.time", types.SimpleNamespace(sleep=sleep))
    followed = await cli("runs", "log", str(scheduled), "--follow")
    assert followed.code == 0, followed.err
    assert "scheduled for" in followed.err
    assert followed.out.splitlines() == ["started", "done"]
    assert len(waits) == 1
