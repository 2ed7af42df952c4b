"""Regression tests of the backfill security review: one group cannot crowd out the others'
backfills (a cap per group, a runner that walks every running backfill by turns), the caps hold
under concurrent requests, and a backfill follows its job to another group (who sees it, who
cancels it, where it may be created)."""

from __future__ import annotations

import asyncio

import pytest

from jobring.admin.api.management import backfills as api
from jobring.admin.monitors.backfills import BackfillRunner
from jobring.admin.store import Store
from tests.admin.api_harness import api_env

RANGE = {"start": "2026-03-01T00:00:00Z", "end": "2026-03-03T23:59:59Z"}
DAILY = {"schedule_conf": "0 0 2 * * ?", "schedule_timezone": "UTC"}


async def test_one_group_cannot_starve_the_others(
    sqlite_store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(api, "MAX_RUNNING_PER_JOB", 2)
    monkeypatch.setattr(api, "MAX_RUNNING_PER_GROUP", 5)
    async with (api_env(sqlite_store) as env, env.client("op_in") as op_a, env.client("op_out") as op_b):
        codes = []
        for _ in range(4):
            job = await env.add_job(env.group_a, **DAILY)
            codes += [(await op_a.post(f"/jobs/{job}/backfill", json=RANGE)).status_code for _ in range(2)]
        assert codes == [201] * 5 + [409] * 3
        refused = await op_a.post(f"/jobs/{job}/backfill", json=RANGE)
        assert refused.status_code == 409 and "group" in refused.text, refused.text
        job_b = await env.add_job(env.group_b, **DAILY)
        r = await op_b.post(f"/jobs/{job_b}/backfill", json=RANGE)
        assert r.status_code == 201, r.text
        runner = BackfillRunner(env.store, env.services.trigger, env.clock, page=2)
        await runner.tick()
        row = await env.store.backfills.get(r.json()["id"])
        assert row is not None and row.started == 1
        # Every running backfill was walked, not only the first page.
        assert runner.fired == 6


async def test_the_overall_cap_holds(sqlite_store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(api, "MAX_RUNNING_TOTAL", 2)
    async with (api_env(sqlite_store) as env, env.client("op_in") as op_a, env.client("op_out") as op_b):
        job_a = await env.add_job(env.group_a, **DAILY)
        job_b = await env.add_job(env.group_b, **DAILY)
        assert (await op_a.post(f"/jobs/{job_a}/backfill", json=RANGE)).status_code == 201
        assert (await op_b.post(f"/jobs/{job_b}/backfill", json=RANGE)).status_code == 201
        assert (await op_b.post(f"/jobs/{job_b}/backfill", json=RANGE)).status_code == 409


async def test_concurrent_requests_do_not_pass_the_job_cap(sqlite_store: Store) -> None:
    async with api_env(sqlite_store) as env, env.client("op_in") as op_a:
        job = await env.add_job(env.group_a, **DAILY)
        answers = await asyncio.gather(*[op_a.post(f"/jobs/{job}/backfill", json=RANGE) for _ in range(30)])
        assert sorted(r.status_code for r in answers) == [201] * 10 + [409] * 20
        running = [b for b in await env.store.backfills.for_job(job, 200) if b.status == "running"]
        assert len(running) == api.MAX_RUNNING_PER_JOB


async def test_a_backfill_follows_its_job_to_another_group(sqlite_store: Store) -> None:
    async with (api_env(sqlite_store) as env, env.client("op_in") as op_a, env.client("op_out") as op_b,
                env.client("admin") as admin):
        job = await env.add_job(env.group_a, **DAILY)
        backfill = (await op_a.post(f"/jobs/{job}/backfill", json=RANGE)).json()["id"]
        assert (await admin.patch(f"/jobs/{job}", json={"job_group": env.group_b})).status_code == 200
        assert (await op_a.get(f"/backfills/{backfill}")).status_code == 404
        assert (await op_a.delete(f"/backfills/{backfill}")).status_code == 404
        seen = await op_b.get(f"/backfills/{backfill}")
        assert seen.status_code == 200 and seen.json()["job_group"] == env.group_b, seen.text
        cancelled = await op_b.delete(f"/backfills/{backfill}")
        assert cancelled.status_code == 200 and cancelled.json()["status"] == "cancelled", cancelled.text


async def test_a_job_moved_between_the_check_and_the_write_gets_no_backfill(sqlite_store: Store) -> None:
    async with api_env(sqlite_store) as env, env.client("op_in") as op_a:
        job = await env.add_job(env.group_a, **DAILY)
        repo = env.store.backfills
        create = repo.create

        async def moved_meanwhile(job_id: int, *args: object, **kwargs: object) -> int:
            # An admin moves the job to group B after the request's group check.
            from dataclasses import replace

            found = await env.store.jobs.get(job_id)
            assert found is not None
            await env.store.jobs.update(replace(found, job_group=env.group_b))
            return await create(job_id, *args, **kwargs)  # type: ignore[arg-type]

        repo.create = moved_meanwhile  # type: ignore[method-assign]
        try:
            r = await op_a.post(f"/jobs/{job}/backfill", json=RANGE)
        finally:
            repo.create = create  # type: ignore[method-assign]
        assert r.status_code == 404, r.text
        assert await env.store.backfills.for_job(job) == []
