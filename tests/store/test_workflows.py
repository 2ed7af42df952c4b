"""Contract tests of ``store.workflows`` on every backend: versions, the run's compare-and-set,
the node attempts as an outbox (claimed once), and their link to the run log."""

from __future__ import annotations

import asyncio
from datetime import datetime

import pytest
from sqlalchemy import insert, select, text, update
from sqlalchemy.exc import DBAPIError, IntegrityError

from jobring.admin.store import HandleResult, JobGroup, JobInfo, NewLog, Store, TriggerResult
from jobring.admin.store import workflows as workflows_module
from jobring.admin.store.tables import job_group, workflow, workflow_run
from jobring.admin.store.workflows import (
    FireRows,
    NewNodeRun,
    NodeRunState,
    Withdrawal,
    WorkflowBusy,
    WorkflowGone,
    WorkflowNameTaken,
)

NOW = datetime(2026, 3, 10, 12, 0, 0)
T0 = 1_773_144_000_000
GRAPH = {"nodes": [{"key": "a", "job_id": 1}], "edges": []}


async def test_versions_list_and_delete(store: Store) -> None:
    wf = await store.workflows.create("nightly", 3, "", GRAPH, "alice", T0)
    got = await store.workflows.get(wf)
    assert got is not None and (got.name, got.job_group, got.version, got.definition) == (
        "nightly",
        3,
        1,
        GRAPH,
    )
    bigger = {
        "nodes": [{"key": "a", "job_id": 1}, {"key": "b", "job_id": 2}],
        "edges": [{"from": "a", "to": "b"}],
    }
    assert (
        await store.workflows.update(wf, "nightly2", 3, "d", bigger, "bob", T0 + 1, expected_version=1) == 2
    )
    # A save over a version that is no longer current is refused (another save came first).
    assert await store.workflows.update(wf, "x", 3, "", GRAPH, "bob", T0 + 2, expected_version=1) is None
    got = await store.workflows.get(wf)
    assert got is not None and (got.name, got.version, got.definition) == ("nightly2", 2, bigger)
    assert await store.workflows.definition(wf, 1) == GRAPH
    other = await store.workflows.create("other", 4, "", GRAPH, None, T0)
    listed, total = await store.workflows.list([3])
    assert [w.id for w in listed] == [wf] and total == 1
    listed, total = await store.workflows.list(None)
    assert [w.id for w in listed] == [other, wf] and total == 2
    run = await store.workflows.start_run(
        wf, 2, 3, "running", {"s": 1}, "alice", T0, [NewNodeRun("a", -1, 1, 1, None, None)]
    )
    assert await store.workflows.running_run_ids(wf) == [run]
    # A run for a group the workflow has left (moved since it was read) is refused in the write.
    with pytest.raises(WorkflowGone):
        await store.workflows.start_run(wf, 2, 4, "running", {}, None, T0, [])
    assert await store.workflows.running_run_ids(wf) == [run]
    # Refused while a run is running, checked in the delete's own transaction: nothing deleted.
    with pytest.raises(WorkflowBusy) as busy:
        await store.workflows.delete(wf)
    assert busy.value.run_ids == [run]
    assert await store.workflows.get(wf) is not None and await store.workflows.get_run(run) is not None
    assert await store.workflows.advance(run, 0, "success", {"s": 2}, T0 + 5, [])
    assert await store.workflows.delete(wf) and not await store.workflows.delete(wf)
    assert await store.workflows.get_run(run) is None and await store.workflows.node_runs(run) == []
    # A run cannot start for a workflow deleted meanwhile (start_run checks under a lock).
    with pytest.raises(WorkflowGone):
        await store.workflows.start_run(wf, 2, 3, "running", {}, None, T0, [])
    assert await store.workflows.running_run_ids(wf) == []


async def test_a_declared_workflow_is_created_once_per_group_and_name(store: Store) -> None:
    group = await store.groups.create(JobGroup(app_name="decl-app", title="d"), NOW)
    other = await store.groups.create(JobGroup(app_name="decl-other", title="o"), NOW)

    async def declare(g: int, name: str = "nightly") -> int:
        return await store.workflows.create(name, g, "", GRAPH, "executor:app", T0, managed_by="code")

    first = await declare(group)
    with pytest.raises(WorkflowNameTaken) as taken:
        await declare(group)
    assert taken.value.workflow_id == first
    assert await declare(other) != first  # the same name in another group is another workflow
    assert await declare(group, "Nightly") != first  # names are compared exactly
    # The console may still name two workflows alike (names were never unique there).
    assert await store.workflows.create("nightly", group, "", GRAPH, "alice", T0) > 0


async def test_a_declared_create_waits_for_one_in_flight_and_then_finds_it(store: Store) -> None:
    # Two replicas of one executor declaring at once through two admin nodes: the other node's
    # create holds the group's row between its check and its commit; this one waits for it.
    if store.db.backend == "sqlite":
        pytest.skip("SQLite runs one write at a time: two creates are never in flight together")
    group = await store.groups.create(JobGroup(app_name="decl-race", title="d"), NOW)
    async with store.db.engine.connect() as rival:
        await rival.begin()
        await rival.execute(select(job_group.c.id).where(job_group.c.id == group).with_for_update())
        await rival.execute(insert(workflow).values(name="nightly", job_group=group, description="",
                                                    version=1, created_at=T0, updated_at=T0,
                                                    managed_by="code"))
        mine = asyncio.create_task(
            store.workflows.create("nightly", group, "", GRAPH, "executor:app", T0, managed_by="code"))
        done, _ = await asyncio.wait({mine}, timeout=1.0)
        assert not done, "the create did not wait for the group's lock"
        await rival.commit()
    with pytest.raises(WorkflowNameTaken):
        await mine
    listed, total = await store.workflows.list([group])
    assert total == 1


async def test_a_start_alone_waits_for_one_in_flight_and_then_finds_its_run(store: Store) -> None:
    # Two manual triggers of a one-at-a-time workflow at once: the other one holds the
    # workflow's row between its check and its commit; this one waits, then finds its run.
    group = await store.groups.create(JobGroup(app_name="alone", title="a"), NOW)
    wf = await store.workflows.create("w", group, "", GRAPH, None, T0)
    first = await store.workflows.start_run(wf, 1, group, "running", {}, None, T0, [], alone=True)
    with pytest.raises(WorkflowBusy) as busy:
        await store.workflows.start_run(wf, 1, group, "running", {}, None, T0, [], alone=True)
    assert busy.value.run_ids == [first]
    second = await store.workflows.start_run(wf, 1, group, "running", {}, None, T0, [])  # not alone
    assert second != first
    async with store.db.write() as conn:  # both ended: none running
        await conn.execute(update(workflow_run).values(status="success"))
    if store.db.backend == "sqlite":
        return  # one write at a time: two starts are never in flight together
    async with store.db.engine.connect() as rival:
        await rival.begin()
        # as a start holds it (shared by starts that are not alone, and by deletes' readers)
        await rival.execute(select(workflow.c.id).where(workflow.c.id == wf).with_for_update(read=True))
        await rival.execute(insert(workflow_run).values(workflow_id=wf, version=1, job_group=group,
                                                        status="running", rev=0, state="{}", started_at=T0))
        mine = asyncio.create_task(store.workflows.start_run(wf, 1, group, "running", {}, None, T0, [],
                                                             alone=True))
        done, _ = await asyncio.wait({mine}, timeout=1.0)
        assert not done, "the start did not wait for the workflow's lock"
        await rival.commit()
    with pytest.raises(WorkflowBusy):
        await mine


async def test_a_save_or_delete_for_one_group_does_not_touch_the_workflow_once_moved(store: Store) -> None:
    # The console checks the caller's group, then writes: a move to another group (or a change
    # of who manages it) in between makes the write find nothing, in the write itself.
    wf = await store.workflows.create("nightly", 3, "", GRAPH, "alice", T0)
    assert await store.workflows.update(wf, "nightly", 4, "", GRAPH, "admin", T0 + 1, 1) == 2  # moved to 4
    assert await store.workflows.update(wf, "mine", 3, "", GRAPH, "bob", T0 + 2, 2, owner_group=3) is None
    assert not await store.workflows.delete(wf, owner_group=3)
    # Declared in code: a console save (managed_by None) finds nothing, the code's own does.
    await store.workflow_children.set_managed_by(wf, "code")
    assert await store.workflows.update(wf, "x", 4, "", GRAPH, "bob", T0 + 3, 2, owner_group=4) is None
    assert await store.workflows.update(wf, "nightly", 4, "d", GRAPH, None, T0 + 3, 2, owner_group=4,
                                        managed_by="code") == 3
    got = await store.workflows.get(wf)
    assert got is not None
    assert (got.name, got.job_group, got.version, got.description) == ("nightly", 4, 3, "d")
    assert await store.workflows.delete(wf, owner_group=4) and await store.workflows.get(wf) is None


async def test_a_step_is_stored_once_over_its_revision(store: Store) -> None:
    wf = await store.workflows.create("w", 1, "", GRAPH, None, T0)
    run = await store.workflows.start_run(
        wf, 1, 1, "running", {"v": 0}, None, T0, [NewNodeRun("a", -1, 1, 1, "p", 5)]
    )
    step = [NewNodeRun("b", -1, 1, 2, None, None), NewNodeRun("f", 0, 1, 2, None, None)]
    assert await store.workflows.advance(run, 0, "running", {"v": 1}, T0 + 1, step)
    # A second admin that computed its step from revision 0 too stores nothing, starts nothing.
    assert not await store.workflows.advance(
        run, 0, "running", {"v": 9}, T0 + 1, [NewNodeRun("c", -1, 1, 3, None, None)]
    )
    record = await store.workflows.get_run(run)
    assert record is not None and (record.rev, record.state, record.ended_at) == (1, {"v": 1}, None)
    assert [(n.node_key, n.item, n.state) for n in await store.workflows.node_runs(run)] == [
        ("a", -1, "pending"),
        ("b", -1, "pending"),
        ("f", 0, "pending"),
    ]
    assert await store.workflows.advance(run, 1, "success", {"v": 2}, T0 + 5, [])
    record = await store.workflows.get_run(run)
    assert record is not None and (record.status, record.ended_at) == ("success", T0 + 5)
    runs, total = await store.workflows.list_runs(workflow_id=wf, status="success")
    assert total == 1 and runs[0].id == run and runs[0].state is None
    # The same attempt cannot be started twice (the outbox key is the command's key).
    with pytest.raises(IntegrityError):
        await store.workflows.advance(run, 2, "running", {}, T0, [NewNodeRun("a", -1, 1, 1, None, None)])


async def test_node_attempts_are_claimed_once_and_linked_to_their_run(store: Store) -> None:
    group = await store.groups.create(JobGroup(app_name="wf-app", title="W"), NOW)
    job = await store.jobs.create(JobInfo(job_group=group, job_desc="j", executor_handler="h"))
    wf = await store.workflows.create("w", group, "", GRAPH, None, T0)
    run = await store.workflows.start_run(
        wf, 1, group, "running", {}, None, T0, [NewNodeRun("a", -1, 1, job, None, None)]
    )
    (attempt,) = await store.workflows.to_fire(T0, stale_ms=1_000)
    assert await store.workflows.claim(attempt.id, "n1", T0)
    assert not await store.workflows.claim(attempt.id, "n2", T0)
    assert await store.workflows.to_fire(T0 + 500, stale_ms=1_000) == []
    # Claimed long ago and never reported fired: another node may take it over.
    assert [a.id for a in await store.workflows.to_fire(T0 + 2_000, stale_ms=1_000)] == [attempt.id]
    assert not await store.workflows.claim(attempt.id, "n2", T0 + 2_000, stale_before_ms=T0)
    assert await store.workflows.claim(attempt.id, "n2", T0 + 2_000, stale_before_ms=T0 + 1_000)
    assert await store.workflows.log_of_node_run(attempt.id) is None
    row = NewLog(
        group, job, NOW, executor_handler="h", trigger_type="WORKFLOW", workflow_node_run_id=attempt.id
    )
    (log_id,) = await store.logs.insert_fires([row])
    assert log_id is not None
    with pytest.raises(IntegrityError):  # an attempt is in the run log at most once
        await store.logs.insert_fires([row])
    assert await store.workflows.log_of_node_run(attempt.id) == log_id
    assert await store.workflows.fired(attempt.id, log_id) and not await store.workflows.fired(
        attempt.id, log_id
    )
    assert [n.id for n in await store.workflows.node_runs_of_logs([log_id])] == [attempt.id]
    assert await store.workflows.running_with_results() == []
    await store.logs.record_results([HandleResult(log_id, 500, "boom", NOW)])
    (ended,) = await store.workflows.running_with_results()
    assert (ended.node_run.id, ended.handle_code, ended.handle_msg) == (attempt.id, 500, "boom")
    assert await store.workflows.ended([attempt.id], T0 + 3) == 1
    assert await store.workflows.ended([attempt.id], T0 + 3) == 0
    assert await store.workflows.ended([], T0 + 3) == 0
    (record,) = await store.workflows.node_runs(run)
    assert (record.state, record.log_id, record.ended_at) == (NodeRunState.ENDED, log_id, T0 + 3)


async def test_a_node_renews_only_the_claims_it_still_holds(store: Store) -> None:
    group = await store.groups.create(JobGroup(app_name="wf-app", title="W"), NOW)
    job = await store.jobs.create(JobInfo(job_group=group, job_desc="j", executor_handler="h"))
    wf = await store.workflows.create("w", group, "", GRAPH, None, T0)
    run = await store.workflows.start_run(
        wf, 1, group, "running", {}, None, T0,
        [NewNodeRun(k, -1, 1, job, None, None) for k in ("mine", "taken", "fired", "pending")],
    )
    mine, taken, fired, pending = (a.id for a in await store.workflows.node_runs(run))
    for attempt in (mine, taken, fired):
        assert await store.workflows.claim(attempt, "n1", T0)
    assert await store.workflows.claim(taken, "n2", T0 + 2_000, stale_before_ms=T0 + 1)  # taken over
    assert await store.workflows.fired(fired, 99)
    everything = [mine, taken, fired, pending]
    assert await store.workflows.keep_claims(everything, "n1", T0) == {mine}  # renewed at the same ms
    assert await store.workflows.keep_claims(everything, "n1", T0 + 1_500) == {mine}
    assert await store.workflows.keep_claims([mine], "n1", T0 + 1_600) == {mine}
    assert await store.workflows.keep_claims([taken], "n1", T0 + 1_700) == set()
    assert await store.workflows.keep_claims([], "n1", T0 + 1_800) == set()
    states = {a.id: (a.state, a.claimed_by, a.claimed_at) for a in await store.workflows.node_runs(run)}
    assert states == {
        mine: (NodeRunState.FIRING, "n1", T0 + 1_600),
        taken: (NodeRunState.FIRING, "n2", T0 + 2_000),
        fired: (NodeRunState.RUNNING, "n1", T0),
        pending: (NodeRunState.PENDING, None, None),
    }
    # A renewed claim is not stale: no other node takes it over.
    assert not await store.workflows.claim(mine, "n2", T0 + 2_000, stale_before_ms=T0 + 1_000)
    assert [a.id for a in await store.workflows.to_fire(T0 + 2_000, stale_ms=1_000)] == [pending]


@pytest.mark.parametrize("returning", [True, False], ids=["returning", "read-back"])
async def test_a_step_stores_its_attempts_claimed_and_returns_them_with_their_jobs(
    store: Store, returning: bool
) -> None:
    # The driver fires a step's attempts from what this write returns: with INSERT ... RETURNING
    # the attempts as inserted, else read back in the same transaction (MySQL).
    store.db.force_no_returning = not returning
    group = await store.groups.create(JobGroup(app_name="wf-app", title="W"), NOW)
    job = await store.jobs.create(JobInfo(job_group=group, job_desc="j", executor_handler="h"))
    wf = await store.workflows.create("w", group, "", GRAPH, None, T0)
    run = await store.workflows.start_run(wf, 1, group, "running", {}, None, T0, [])
    step = [NewNodeRun("b", -1, 1, job, "p", 7), NewNodeRun("f", 0, 2, job, None, None),
            NewNodeRun("s", -1, 1, 0, None, None, workflow_id=wf)]
    stored = await store.workflows.advance(run, 0, "running", {"v": 1}, T0 + 1, step, claimed_by="n1")
    assert stored is not None
    assert [(a.node_key, a.item, a.attempt, a.job_id, a.params, a.timeout_s, a.state, a.claimed_by,
             a.claimed_at, a.workflow_id, a.workflow_run_id) for a in stored.attempts] == [
        ("b", -1, 1, job, "p", 7, NodeRunState.FIRING, "n1", T0 + 1, None, run),
        ("f", 0, 2, job, None, None, NodeRunState.FIRING, "n1", T0 + 1, None, run),
        ("s", -1, 1, 0, None, None, NodeRunState.FIRING, "n1", T0 + 1, wf, run),
    ]
    assert stored.attempts == await store.workflows.node_runs(run)
    assert stored.jobs == {job: await store.jobs.get(job)}  # every column as a read of the job
    got = await store.workflows.get_run(run)
    assert got is not None and (got.rev, got.status, got.state) == (1, "running", {"v": 1})
    # A step computed from a revision no longer stored is refused whole: no attempt inserted.
    late = [NewNodeRun("late", -1, 1, job, None, None)]
    assert await store.workflows.advance(run, 0, "failed", {"v": 2}, T0 + 2, late, claimed_by="n2") is None
    assert [a.node_key for a in await store.workflows.node_runs(run)] == ["b", "f", "s"]
    got = await store.workflows.get_run(run)
    assert got is not None
    assert (got.rev, got.status, got.state, got.ended_at) == (1, "running", {"v": 1}, None)
    # The step that ends the run with a last attempt stores its end.
    ended = await store.workflows.advance(run, 1, "failed", {"v": 3}, T0 + 3, late, claimed_by="n1")
    assert ended is not None and [a.node_key for a in ended.attempts] == ["late"]
    got = await store.workflows.get_run(run)
    assert got is not None and (got.rev, got.status, got.ended_at) == (2, "failed", T0 + 3)


@pytest.mark.parametrize("returning", [True, False], ids=["returning", "no-returning"])
async def test_a_step_records_its_job_attempts_run_log_rows_in_its_write(
        store: Store, returning: bool) -> None:
    # The step's write (PostgreSQL's one statement, or its transaction) records each job
    # attempt's run-log row as the trigger would (its params, else the job's; stamped; no
    # retries), for a job still in the run's group whose params are not a template, and none
    # for a sub-workflow attempt. Without INSERT ... RETURNING the step records none (the
    # trigger does at the fire). A lost race records nothing.
    store.db.force_no_returning = not returning
    one_statement = (await store.db.capabilities()).insert_returning
    group = await store.groups.create(JobGroup(app_name="wf-app", title="W"), NOW)
    other = await store.groups.create(JobGroup(app_name="wf-other", title="O"), NOW)
    job = await store.jobs.create(JobInfo(job_group=group, job_desc="j", executor_handler="h",
                                          executor_param="job's", executor_fail_retry_count=3))
    moved = await store.jobs.create(JobInfo(job_group=other, job_desc="m", executor_handler="h"))
    templated = await store.jobs.create(JobInfo(job_group=group, job_desc="t", executor_handler="h",
                                                timing='{"params_template": true}'))
    wf = await store.workflows.create("w", group, "", GRAPH, None, T0)
    run = await store.workflows.start_run(wf, 1, group, "running", {}, None, T0, [])
    rows = FireRows("n1", "WORKFLOW", T0, group)
    step = [NewNodeRun("own", -1, 1, job, "p" * 512, None), NewNodeRun("default", -1, 1, job, None, None),
            NewNodeRun("moved", -1, 1, moved, None, None), NewNodeRun("tpl", -1, 1, templated, None, None),
            NewNodeRun("sub", -1, 1, 0, None, None, workflow_id=wf)]
    late = await store.workflows.advance(run, 5, "running", {}, T0, step, claimed_by="n1", fire_rows=rows)
    assert late is None and await store.logs.for_job(job) == []
    stored = await store.workflows.advance(run, 0, "running", {}, T0, step, claimed_by="n1", fire_rows=rows)
    assert stored is not None
    by_key = {a.node_key: a for a in stored.attempts}
    if not one_statement:
        assert stored.log_ids == {} and await store.logs.for_job(job) == []
        return
    assert set(stored.log_ids) == {by_key["own"].id, by_key["default"].id}
    assert stored.logged_at_ms == T0
    for key, param in (("own", "p" * 512), ("default", "job's")):
        entry = await store.logs.get(stored.log_ids[by_key[key].id])
        assert entry is not None
        assert (entry.job_id, entry.job_group, entry.executor_handler, entry.executor_param,
                entry.executor_fail_retry_count, entry.trigger_type, entry.admin_node, entry.attempt,
                entry.workflow_node_run_id, entry.sent_time, entry.trigger_code, entry.handle_code,
                entry.planned_time) == (job, group, "h", param, 0, "WORKFLOW", "n1", 1, by_key[key].id, T0,
                                        0, 0, None)
        assert entry.trigger_time == datetime(2026, 3, 10, 12, 0, 0)
    assert await store.logs.for_job(moved) == [] and await store.logs.for_job(templated) == []
    # The attempt's identity holds: a second row for it is refused.
    with pytest.raises(IntegrityError):
        await store.logs.insert_fires([NewLog(group, job, NOW, workflow_node_run_id=by_key["own"].id)])
    # A row not sent is withdrawn, and its attempt ended, only by the admin whose claim the
    # attempt still is: one that took the attempt over owns both (and may have sent it again).
    own = stored.log_ids[by_key["own"].id]
    withdraw = store.workflows.withdraw_unsent
    assert await withdraw(by_key["own"].id, own, "n2", T0 + 5) is Withdrawal.TAKEN_OVER
    assert await store.logs.get(own) is not None
    default = stored.log_ids[by_key["default"].id]
    # sent after all (its /run answered): it stays
    assert await store.logs.update_trigger_results([TriggerResult(default, "http://e:1", 200, "ok", T0)]) == 1
    assert await withdraw(by_key["default"].id, default, "n1", T0 + 5) is Withdrawal.SENT
    assert await store.logs.get(default) is not None
    assert await withdraw(by_key["own"].id, own, "n1", T0 + 5) is Withdrawal.WITHDRAWN
    assert await store.logs.get(own) is None
    ended = {a.node_key: (a.state, a.ended_at) for a in await store.workflows.node_runs(run)}
    assert ended["own"] == ended["default"] == (NodeRunState.ENDED, T0 + 5)
    assert ended["moved"][0] == NodeRunState.FIRING


async def test_a_step_survives_a_column_a_newer_version_added(store: Store) -> None:
    # Admins of two versions share the database during a rolling upgrade: the step's attempts
    # come back as the columns this version knows, whatever else the table has.
    group = await store.groups.create(JobGroup(app_name="wf-new", title="W"), NOW)
    job = await store.jobs.create(JobInfo(job_group=group, job_desc="j", executor_handler="h"))
    wf = await store.workflows.create("w", group, "", GRAPH, None, T0)
    run = await store.workflows.start_run(wf, 1, group, "running", {}, None, T0, [])
    async with store.db.engine.begin() as conn:
        await conn.execute(text("ALTER TABLE jobring_workflow_node_run ADD COLUMN future_col INTEGER"))
    start = [NewNodeRun("a", -1, 1, job, None, None)]
    stored = await store.workflows.advance(run, 0, "running", {}, T0 + 1, start, claimed_by="n1")
    assert stored is not None and [a.node_key for a in stored.attempts] == ["a"] and set(stored.jobs) == {job}


async def test_a_step_whose_jobs_cannot_be_read_is_stored_whole_or_not_at_all(
        store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    # The jobs are read in the step's transaction: a failure to read them rolls the step back.
    # On PostgreSQL the step's one statement returns them: no read after it (which, failing,
    # would have left a stored step without its jobs).
    group = await store.groups.create(JobGroup(app_name="wf-jobs", title="W"), NOW)
    job = await store.jobs.create(JobInfo(job_group=group, job_desc="j", executor_handler="h"))
    wf = await store.workflows.create("w", group, "", GRAPH, None, T0)
    run = await store.workflows.start_run(wf, 1, group, "running", {}, None, T0, [])

    async def connection_lost(*_: object) -> None:
        raise OSError("connection lost")

    monkeypatch.setattr(workflows_module, "_jobs_of", connection_lost)
    start = [NewNodeRun("a", -1, 1, job, None, None)]
    try:
        stored = await store.workflows.advance(run, 0, "running", {}, T0 + 1, start, claimed_by="n1")
    except OSError:
        stored = None
    got, attempts = await store.workflows.get_run(run), await store.workflows.node_runs(run)
    assert got is not None
    if store.db.backend == "postgresql":
        assert stored is not None and stored.attempts == attempts and set(stored.jobs) == {job}
        assert got.rev == 1 and [(a.node_key, a.claimed_by) for a in attempts] == [("a", "n1")]
    else:
        assert stored is None and got.rev == 0 and attempts == []


async def test_a_step_never_cuts_a_value_longer_than_its_column(store: Store) -> None:
    if store.db.backend == "sqlite":
        pytest.skip("SQLite does not enforce VARCHAR lengths")
    group = await store.groups.create(JobGroup(app_name="wf-long", title="W"), NOW)
    job = await store.jobs.create(JobInfo(job_group=group, job_desc="j", executor_handler="h"))
    wf = await store.workflows.create("w", group, "", GRAPH, None, T0)
    run = await store.workflows.start_run(wf, 1, group, "running", {}, None, T0, [])
    with pytest.raises(DBAPIError):
        long_key = [NewNodeRun("k" * 70, -1, 1, job, None, None)]
        await store.workflows.advance(run, 0, "running", {}, T0 + 1, long_key, claimed_by="n1")
    got = await store.workflows.get_run(run)
    assert got is not None and got.rev == 0 and await store.workflows.node_runs(run) == []
