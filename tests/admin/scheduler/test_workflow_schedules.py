"""The workflow scheduler against a real store, the real driver and an executor double, with a
manual clock: two admins sweeping at the same instant start one run; the overlap rules skip or
queue a fire while a run is going; a fire missed by more than the threshold follows the misfire
rule; a node's job moved to another group keeps the scheduled run from starting."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass, replace
from datetime import UTC, datetime

import pytest
from sqlalchemy import update

from jobring.admin.monitors.workflow_schedules import WorkflowScheduler
from jobring.admin.services.workflows import WorkflowDriver
from jobring.admin.store import Store
from jobring.admin.store.tables import workflow
from jobring.admin.store.workflow_schedules import WorkflowSchedule
from jobring.admin.store.workflows import WorkflowRecord
from jobring.core.workflow import parse_workflow
from tests.admin.trigger_kit import HOSTS, T0, Env, make_env

pytestmark = pytest.mark.timeout(30)
MINUTE = 60_000


@dataclass
class Sched:
    env: Env
    a: WorkflowScheduler
    b: WorkflowScheduler
    driver: WorkflowDriver

    async def workflow(self, overlap: str = "skip", misfire: str = "DO_NOTHING") -> WorkflowRecord:
        job = await self.env.job()
        node = {"key": "a", "job_id": job.id, "params": "{{ day }}"}
        graph = parse_workflow({"nodes": [node], "edges": []})
        wf = await self.env.store.workflows.create("w", self.env.group_id, "", graph.to_json(), None, T0)
        await self.env.store.workflow_schedules.put(WorkflowSchedule(
            workflow_id=wf, schedule_type="FIX_RATE", schedule_conf="60", time_zone=None,
            misfire_strategy=misfire, overlap=overlap, enabled=True, updated_at=T0, params={"day": "d1"},
            next_fire_at=T0 + MINUTE))
        record = await self.env.store.workflows.get(wf)
        assert record is not None
        return record

    async def runs(self, wf: int) -> list[int]:
        records, _ = await self.env.store.workflows.list_runs(workflow_id=wf, group_ids=None, status=None,
                                                              offset=0, limit=50)
        return sorted(r.id for r in records)

    async def end(self, run_id: int) -> None:
        record = await self.env.store.workflows.get_run(run_id)
        assert record is not None and record.state is not None
        assert await self.env.store.workflows.advance(run_id, record.rev, "success", record.state, T0, [])

    async def schedule(self, wf: int) -> WorkflowSchedule:
        got = await self.env.store.workflow_schedules.get(wf)
        assert got is not None
        return got


@pytest.fixture
async def sched(sqlite_store: Store) -> AsyncIterator[Sched]:
    env = await make_env(sqlite_store, HOSTS)
    driver = WorkflowDriver(sqlite_store, env.trigger, None, env.clock, node_id="node-a")
    a = WorkflowScheduler(sqlite_store, driver, env.clock, default_zone="UTC")
    b = WorkflowScheduler(sqlite_store, driver, env.clock, default_zone="UTC")
    try:
        yield Sched(env, a, b, driver)
    finally:
        await env.trigger.close()


async def test_two_admins_at_the_same_instant_start_one_run(sched: Sched) -> None:
    wf = await sched.workflow()
    await asyncio.gather(sched.a.tick(), sched.b.tick())
    assert await sched.runs(wf.id) == []  # not due yet
    sched.env.clock.set(T0 + MINUTE + 30)
    await asyncio.gather(sched.a.tick(), sched.b.tick())
    (run_id,) = await sched.runs(wf.id)
    run = await sched.env.store.workflows.get_run(run_id)
    assert run is not None and run.triggered_by == "schedule"
    # The schedule's params are the run's starting context (the node's params rendered from it).
    assert [c.body["executorParams"] for c in sched.env.double.runs()] == ["d1"]
    schedule = await sched.schedule(wf.id)
    assert schedule.next_fire_at == T0 + 2 * MINUTE and f"started run {run_id}" in schedule.last_result
    assert 0 < sched.a.next_wait_s() <= 1.0


async def test_skip_drops_a_fire_while_a_run_is_going(sched: Sched) -> None:
    wf = await sched.workflow(overlap="skip")
    sched.env.clock.set(T0 + MINUTE)
    await sched.a.tick()
    sched.env.clock.set(T0 + 2 * MINUTE)
    await sched.a.tick()
    assert len(await sched.runs(wf.id)) == 1
    assert "skipped: a run is still running" in (await sched.schedule(wf.id)).last_result


async def test_a_fire_finding_a_manual_run_started_since_its_count_is_skipped(
        sched: Sched, monkeypatch: pytest.MonkeyPatch) -> None:
    # A manual trigger starts a run between the sweep's count of running runs and its start:
    # the start, decided in its write, finds it and the fire is skipped (allow: it starts).
    for overlap, started in (("skip", 1), ("allow", 2)):
        wf = await sched.workflow(overlap=overlap)
        manual = await sched.driver.start_run(wf, {"day": "d0"}, "ann", alone=True)
        assert manual[0] and await sched.runs(wf.id) == [manual[0]]

        async def counted_before(workflow_id: int) -> list[int]:
            return []  # as counted just before the manual trigger's run

        with monkeypatch.context() as patch:
            patch.setattr(sched.env.store.workflows, "running_run_ids", counted_before)
            sched.env.clock.set(T0 + MINUTE)
            await sched.a.tick()
        assert len(await sched.runs(wf.id)) == started, overlap
        if overlap == "skip":
            note = (await sched.schedule(wf.id)).last_result
            assert f"skipped: run {manual[0]} started meanwhile (overlap skip)" in note, note


async def test_queue_one_starts_the_waiting_fire_when_the_run_ends(sched: Sched) -> None:
    wf = await sched.workflow(overlap="queue_one")
    sched.env.clock.set(T0 + MINUTE)
    await sched.a.tick()
    (first,) = await sched.runs(wf.id)
    sched.env.clock.set(T0 + 2 * MINUTE)
    await sched.a.tick()
    sched.env.clock.set(T0 + 3 * MINUTE)
    await sched.a.tick()  # one waits already: this fire is skipped
    assert await sched.runs(wf.id) == [first]
    assert (await sched.schedule(wf.id)).queued_at == T0 + 2 * MINUTE
    await sched.end(first)
    await asyncio.gather(sched.a.tick(), sched.b.tick())
    assert len(await sched.runs(wf.id)) == 2
    assert (await sched.schedule(wf.id)).queued_at == 0


async def test_a_missed_fire_follows_the_misfire_rule(sched: Sched) -> None:
    skipped = await sched.workflow(misfire="DO_NOTHING")
    fired = await sched.workflow(misfire="FIRE_ONCE_NOW")
    sched.env.clock.set(T0 + 10 * MINUTE + 1_000)  # ten minutes late
    await sched.a.tick()
    assert await sched.runs(skipped.id) == [] and len(await sched.runs(fired.id)) == 1
    # Both resume at the first instant within the threshold (it fires late, on the next sweep).
    for wf in (skipped, fired):
        assert (await sched.schedule(wf.id)).next_fire_at == T0 + 10 * MINUTE


async def test_a_job_moved_to_another_group_keeps_the_run_from_starting(sched: Sched) -> None:
    wf = await sched.workflow()
    job_id = int(wf.definition["nodes"][0]["job_id"])
    job = await sched.env.store.jobs.get(job_id)
    assert job is not None
    await sched.env.store.jobs.update(replace(job, job_group=sched.env.group_id + 100))
    sched.env.clock.set(T0 + MINUTE)
    await sched.a.tick()
    assert await sched.runs(wf.id) == []
    assert "not started" in (await sched.schedule(wf.id)).last_result


async def test_a_workflow_moved_as_its_run_starts_keeps_its_schedule(
        sched: Sched, monkeypatch: pytest.MonkeyPatch) -> None:
    # Moved to another group between the sweep's read and the run's start: the start is refused
    # in its write (no run under the group it left), and the schedule is kept for the next fire.
    wf = await sched.workflow()
    async with sched.env.store.engine.begin() as conn:
        moved = update(workflow).where(workflow.c.id == wf.id).values(job_group=wf.job_group + 100)
        await conn.execute(moved)

    async def as_read_before_the_move(workflow_id: int) -> WorkflowRecord | None:
        return wf if workflow_id == wf.id else None

    monkeypatch.setattr(sched.env.store.workflows, "get", as_read_before_the_move)
    sched.env.clock.set(T0 + MINUTE)
    await sched.a.tick()
    assert await sched.runs(wf.id) == []
    assert "moved to another group" in (await sched.schedule(wf.id)).last_result


async def _once(sched: Sched, at_ms: int, misfire: str) -> WorkflowRecord:
    wf = await sched.workflow(misfire=misfire)
    schedule = await sched.schedule(wf.id)
    at = datetime.fromtimestamp(at_ms / 1000, tz=UTC).strftime("%Y-%m-%dT%H:%M:%S")
    await sched.env.store.workflow_schedules.put(replace(schedule, schedule_type="ONCE", schedule_conf=at,
                                                         next_fire_at=at_ms))
    return wf


async def test_a_one_shot_fires_once_and_is_spent(sched: Sched) -> None:
    wf = await _once(sched, T0 + MINUTE, "DO_NOTHING")
    sched.env.clock.set(T0 + MINUTE + 10)
    await asyncio.gather(sched.a.tick(), sched.b.tick())
    assert len(await sched.runs(wf.id)) == 1
    assert (await sched.schedule(wf.id)).next_fire_at == 0  # spent
    sched.env.clock.set(T0 + 100 * MINUTE)
    await sched.a.tick()
    assert len(await sched.runs(wf.id)) == 1


async def test_a_missed_one_shot_follows_the_misfire_rule(sched: Sched) -> None:
    skipped = await _once(sched, T0 + MINUTE, "DO_NOTHING")
    fired = await _once(sched, T0 + MINUTE, "FIRE_ONCE_NOW")
    sched.env.clock.set(T0 + 30 * MINUTE)  # the admin was down at the instant
    await sched.a.tick()
    assert await sched.runs(skipped.id) == [] and len(await sched.runs(fired.id)) == 1
    for wf in (skipped, fired):
        assert (await sched.schedule(wf.id)).next_fire_at == 0
    assert "missed" in (await sched.schedule(skipped.id)).last_result
