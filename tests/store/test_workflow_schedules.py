"""Contract tests of ``store.workflow_schedules`` on every backend: the row replaced whole, the
due list, and the two compare-and-sets that let one admin fire each instant."""

from __future__ import annotations

import asyncio

import pytest
from sqlalchemy import insert, select

from jobring.admin.store import Store
from jobring.admin.store.tables import workflow, workflow_schedule
from jobring.admin.store.workflow_schedules import WorkflowSchedule
from jobring.admin.store.workflows import WorkflowGone

T0 = 1_773_144_000_000
GRAPH = {"nodes": [{"key": "a", "job_id": 1}], "edges": []}


def _schedule(workflow_id: int, **over: object) -> WorkflowSchedule:
    base = WorkflowSchedule(workflow_id=workflow_id, schedule_type="FIX_RATE", schedule_conf="60",
                            time_zone=None, misfire_strategy="DO_NOTHING", overlap="skip", enabled=True,
                            updated_at=T0,
                            params={"day": "x"}, next_fire_at=T0 + 60_000, updated_by="ann")
    return WorkflowSchedule(**{**{f: getattr(base, f) for f in base.__slots__}, **over})  # type: ignore[arg-type]


async def test_a_schedule_is_stored_whole_and_claimed_once_per_instant(store: Store) -> None:
    wf = await store.workflows.create("w", 3, "", GRAPH, None, T0)
    schedules = store.workflow_schedules
    assert await schedules.get(wf) is None and await schedules.earliest() is None
    await schedules.put(_schedule(wf))
    got = await schedules.get(wf)
    assert got is not None and (got.schedule_conf, got.enabled, got.params, got.next_fire_at) == (
        "60", True, {"day": "x"}, T0 + 60_000)
    assert await schedules.earliest() == T0 + 60_000
    assert await schedules.due(T0) == []
    assert [s.workflow_id for s in await schedules.due(T0 + 60_000)] == [wf]
    # Two admins claim the same instant: one wins, and the schedule moves on to the next one.
    first = await schedules.claim(wf, T0 + 60_000, T0 + 120_000, queued_at=0, result="a")
    second = await schedules.claim(wf, T0 + 60_000, T0 + 120_000, queued_at=0, result="b")
    assert (first, second) == (True, False)
    got = await schedules.get(wf)
    assert got is not None
    assert (got.next_fire_at, got.last_fire_at, got.last_result) == (T0 + 120_000, T0 + 60_000, "a")
    # A fire waiting for the running run (queue_one) is due whatever the time, and taken once.
    assert await schedules.claim(wf, T0 + 120_000, T0 + 180_000, queued_at=T0 + 120_000, result="queued")
    assert [s.queued_at for s in await schedules.due(T0)] == [T0 + 120_000]
    assert await schedules.take_queued(wf, T0 + 120_000) and not await schedules.take_queued(wf, T0 + 120_000)
    await schedules.note(wf, "started run 5")
    assert (await schedules.get(wf)).last_result == "started run 5"  # type: ignore[union-attr]
    # A stopped schedule is neither due nor claimable.
    await schedules.put(_schedule(wf, enabled=False, next_fire_at=0))
    assert await schedules.due(T0 + 10**9) == [] and await schedules.earliest() is None
    assert not await schedules.claim(wf, 0, T0, queued_at=0, result="x")
    assert set(await schedules.get_many([wf, wf + 1])) == {wf}
    # Deleting the workflow deletes its schedule.
    assert await store.workflows.delete(wf)
    assert await schedules.get(wf) is None


async def test_waiting_fires_never_hide_a_due_instant(store: Store) -> None:
    schedules = store.workflow_schedules
    for wid in range(1, 7):  # waiting fires (queue_one), nothing more planned
        await schedules.put(_schedule(wid, next_fire_at=T0 - 1_000, overlap="queue_one"))
        assert await schedules.claim(wid, T0 - 1_000, 0, queued_at=T0 - 1_000 + wid, result="x")
    await schedules.put(_schedule(500, next_fire_at=T0 - 5))
    due = [s.workflow_id for s in await schedules.due(T0, limit=5)]
    assert due[0] == 500 and len(due) == 6 and set(due[1:]) <= set(range(1, 7))


async def test_a_schedule_declared_in_code_is_marked_and_handed_back(store: Store) -> None:
    wf = await store.workflows.create("w", 3, "", GRAPH, None, T0)
    schedules = store.workflow_schedules
    await schedules.put(_schedule(wf, managed_by="code"))
    assert (await schedules.get(wf)).managed_by == "code"  # type: ignore[union-attr]
    await schedules.set_managed_by(wf, None)
    got = await schedules.get(wf)
    assert got is not None and got.managed_by is None and got.next_fire_at == T0 + 60_000


async def test_a_put_unless_managed_by_code_keeps_a_declared_schedule(store: Store) -> None:
    # The console's edit checks inside its write that the code does not own the schedule.
    wf = await store.workflows.create("w", 3, "", GRAPH, None, T0)
    schedules = store.workflow_schedules
    assert await schedules.put(_schedule(wf), unless_managed_by="code")  # none yet
    assert await schedules.put(_schedule(wf, schedule_conf="120"), unless_managed_by="code")  # the console's
    await schedules.put(_schedule(wf, schedule_conf="300", managed_by="code"))
    assert not await schedules.put(_schedule(wf, schedule_conf="1"), unless_managed_by="code")
    got = await schedules.get(wf)
    assert got is not None and (got.schedule_conf, got.managed_by) == ("300", "code")


async def test_a_put_for_one_group_stores_nothing_once_the_workflow_left_it(store: Store) -> None:
    wf = await store.workflows.create("w", 3, "", GRAPH, None, T0)
    schedules = store.workflow_schedules
    assert await schedules.put(_schedule(wf), owner_group=3)
    await store.workflows.update(wf, "w", 4, "", GRAPH, None, T0 + 1, 1)  # moved to group 4
    with pytest.raises(WorkflowGone):
        await schedules.put(_schedule(wf, schedule_conf="120"), owner_group=3)
    got = await schedules.get(wf)
    assert got is not None and got.schedule_conf == "60"
    await store.workflows.delete(wf)
    with pytest.raises(WorkflowGone):  # deleted: no schedule row left behind for it
        await schedules.put(_schedule(wf), owner_group=4)
    assert await schedules.get(wf) is None


async def test_a_first_put_waits_for_one_in_flight_and_replaces_it(store: Store) -> None:
    # Two replicas of one executor declaring a new schedule at once through two admin nodes: the
    # other node's put has inserted the row, not yet committed, holding a lock on the workflow's
    # row as a reader (a run's start) does; this put waits and replaces the row. (On PostgreSQL
    # it used to pass the lock, insert too and fail on the key once the other committed.)
    if store.db.backend == "sqlite":
        pytest.skip("SQLite runs one write at a time: two puts are never in flight together")
    wf = await store.workflows.create("w", 3, "", GRAPH, None, T0)
    async with store.db.engine.connect() as rival:
        await rival.begin()
        await rival.execute(select(workflow.c.id).where(workflow.c.id == wf).with_for_update(read=True))
        await rival.execute(insert(workflow_schedule).values(
            workflow_id=wf, schedule_type="FIX_RATE", schedule_conf="60", params="{}", updated_at=T0))
        mine = asyncio.create_task(
            store.workflow_schedules.put(_schedule(wf, schedule_conf="120"), owner_group=3))
        await asyncio.wait({mine}, timeout=1.0)  # (it waits for the rival's lock)
        await rival.commit()
    assert await mine
    got = await store.workflow_schedules.get(wf)
    assert got is not None and got.schedule_conf == "120"


async def test_an_edit_keeps_the_fire_the_sweep_recorded_meanwhile(store: Store) -> None:
    # The console reads the schedule, the sweep fires an instant and notes its run, then the
    # console's edit (built from what it read) lands: the note stays, the edit applies.
    wf = await store.workflows.create("w", 3, "", GRAPH, None, T0)
    schedules = store.workflow_schedules
    await schedules.put(_schedule(wf))
    read_by_console = await schedules.get(wf)
    assert read_by_console is not None
    assert await schedules.claim(wf, T0 + 60_000, T0 + 120_000, queued_at=0, result="t: starting")
    await schedules.note(wf, "t: started run 9")
    edit = _schedule(wf, enabled=False, next_fire_at=0, last_fire_at=read_by_console.last_fire_at,
                     last_result=read_by_console.last_result, updated_at=T0 + 1)
    assert await schedules.put(edit)
    got = await schedules.get(wf)
    assert got is not None
    assert (got.enabled, got.next_fire_at, got.last_fire_at, got.last_result) == (
        False, 0, T0 + 60_000, "t: started run 9")
    # The same edit saved twice changes nothing and is no conflict.
    assert await schedules.put(edit)
    assert await schedules.get(wf) == got


async def test_an_edit_planned_before_its_instant_was_fired_does_not_plan_it_again(store: Store) -> None:
    wf = await store.workflows.create("w", 3, "", GRAPH, None, T0)
    schedules = store.workflow_schedules
    await schedules.put(_schedule(wf))
    instant = T0 + 60_000
    # The console plans the next instant before it comes; the sweep fires it; the edit lands.
    edit = _schedule(wf, updated_by="bob", params={"day": "y"}, next_fire_at=instant)
    assert await schedules.claim(wf, instant, instant + 60_000, queued_at=0, result="started run 1")
    assert await schedules.put(edit, unless_managed_by="code")
    assert not await schedules.claim(wf, instant, instant + 60_000, queued_at=0, result="again")
    stored = await schedules.get(wf)
    assert stored is not None and (stored.next_fire_at, stored.last_fire_at) == (instant + 60_000, instant)
    assert stored.params == {"day": "y"} and stored.updated_by == "bob"
    # An instant after the last fire is planned as the caller says; stopping plans none.
    assert await schedules.put(_schedule(wf, next_fire_at=instant + 30_000))
    assert (await schedules.get(wf)).next_fire_at == instant + 30_000  # type: ignore[union-attr]
    assert await schedules.put(_schedule(wf, enabled=False, next_fire_at=0))
    assert (await schedules.get(wf)).next_fire_at == 0  # type: ignore[union-attr]
    # Started again (next 0 stored): the caller's instant, whatever the last fire says.
    assert await schedules.put(_schedule(wf, next_fire_at=instant))
    assert (await schedules.get(wf)).next_fire_at == instant  # type: ignore[union-attr]
