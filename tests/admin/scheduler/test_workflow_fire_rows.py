"""A workflow step records its job attempts' run-log rows in its own write (``FireRows``, where
the database has INSERT ... RETURNING): the trigger then sends each under that row, with no
write of its own before the /run; without it, and for a job whose params are a template, the
trigger records the row at the fire as before. On every backend (the driver, a real trigger
service and an executor double)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Sequence
from datetime import UTC, datetime
from typing import Any

import pytest

from jobring.admin.services.workflow_fires import STOPPED_BY_WORKFLOW
from jobring.admin.services.workflow_steps import Wanted
from jobring.admin.services.workflows import WorkflowDriver
from jobring.admin.store import Store
from jobring.admin.store.records import NewLog
from jobring.admin.store.workflows import NewNodeRun, NodeRunRecord, NodeRunState
from jobring.core.workflow import KillJob, RunStarted, apply, parse_workflow, run_to_json
from jobring.protocol.models import FAIL_CODE
from tests.admin.trigger_kit import HOSTS, T0, Env, make_env

NOW = datetime.fromtimestamp(T0 / 1000, tz=UTC)


@pytest.fixture
async def env(store: Store) -> AsyncIterator[Env]:
    env = await make_env(store, HOSTS)
    try:
        yield env
    finally:
        await env.trigger.close()


@pytest.fixture
async def new_driver(env: Env) -> AsyncIterator[Callable[..., WorkflowDriver]]:
    """Makes drivers ("node-a") over the env; their background work (group reads ahead of
    fires, queued steps) is awaited before the store closes."""
    made: list[WorkflowDriver] = []

    def make(**kwargs: Any) -> WorkflowDriver:
        made.append(WorkflowDriver(env.store, env.trigger, None, env.clock, node_id="node-a", **kwargs))
        return made[-1]

    try:
        yield make
    finally:
        for driver in made:
            await driver.wait_idle()


def _inserts_counted(env: Env, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """A list that grows by the job ids of each ``insert_fires`` call (the trigger's recording)."""
    calls: list[int] = []
    real = env.store.logs.insert_fires

    async def counted(rows: Sequence[NewLog]) -> list[int | None]:
        calls.extend(r.job_id for r in rows)
        return await real(rows)

    monkeypatch.setattr(env.store.logs, "insert_fires", counted)
    return calls


async def test_a_chain_runs_each_node_once_under_the_row_its_step_recorded(
        env: Env, new_driver: Callable[..., WorkflowDriver], monkeypatch: pytest.MonkeyPatch) -> None:
    store = env.store
    one_statement = (await store.db.capabilities()).insert_returning
    plain = await env.job(executor_param="job's")
    templated = await env.job(timing='{"params_template": true}', executor_param="as is")
    doc: dict[str, Any] = {
        "nodes": [{"key": "A", "job_id": plain.id, "params": "A"}, {"key": "B", "job_id": plain.id},
                  {"key": "T", "job_id": templated.id}],
        "edges": [{"from": "A", "to": "B"}, {"from": "B", "to": "T"}]}
    graph = parse_workflow(doc)
    wf_id = await store.workflows.create("w", env.group_id, "", graph.to_json(), None, T0)
    workflow = await store.workflows.get(wf_id)
    assert workflow is not None
    driver = new_driver()
    recorded = _inserts_counted(env, monkeypatch)
    run_id, _ = await driver.start_run(workflow, {}, "alice")
    for _ in "AB":
        env.clock.advance(1_500)  # the next row's stamp is another whole second
        last = env.double.runs()[-1].body
        await driver.on_results([(int(last["logId"]), 200, "ok")])
    runs = [c.body for c in env.double.runs()]
    assert [r["executorParams"] for r in runs] == ["A", "job's", "as is"]
    # The first step's attempt was stored by start_run (the trigger records it); the others by
    # steps, which record their rows themselves (with INSERT ... RETURNING), except the
    # templated job's (its params are rendered by the trigger).
    assert recorded == ([plain.id, templated.id] if one_statement else [plain.id, plain.id, templated.id])
    for attempt in await store.workflows.node_runs(run_id):
        assert attempt.log_id is not None
        entry = await store.logs.get(attempt.log_id)
        assert entry is not None and entry.workflow_node_run_id == attempt.id
        (sent,) = [r for r in runs if r["logId"] == attempt.log_id]
        # The run is sent stamped as its row: (logId, logDateTime) is its identity.
        assert (entry.admin_node, entry.trigger_type, entry.trigger_code, entry.sent_time) == (
            "node-a", "WORKFLOW", 200, sent["logDateTime"])


async def test_a_step_starting_more_jobs_than_fire_at_once_leaves_their_rows_to_the_trigger(
        env: Env, new_driver: Callable[..., WorkflowDriver], monkeypatch: pytest.MonkeyPatch) -> None:
    # The starts beyond the driver's fires in flight wait their turn: their rows are recorded
    # as each is fired (stamped then), not with the step.
    store = env.store
    job = await env.job()
    doc = {"nodes": [{"key": k, "job_id": job.id, "params": k} for k in "ABC"],
           "edges": [{"from": "A", "to": "B"}, {"from": "A", "to": "C"}]}
    wf_id = await store.workflows.create("w", env.group_id, "", parse_workflow(doc).to_json(), None, T0)
    workflow = await store.workflows.get(wf_id)
    assert workflow is not None
    driver = new_driver(max_concurrent_fires=1)
    recorded = _inserts_counted(env, monkeypatch)
    await driver.start_run(workflow, {}, "alice")
    await driver.on_results([(int(env.double.runs()[-1].body["logId"]), 200, "ok")])
    assert sorted(c.body["executorParams"] for c in env.double.runs()) == ["A", "B", "C"]
    assert recorded == [job.id] * 3


@pytest.mark.parametrize("taken_over", [False, True])
@pytest.mark.parametrize("why", ["stopped", "job moved"])
async def test_a_row_recorded_with_an_attempt_that_is_not_sent_is_withdrawn(
        env: Env, new_driver: Callable[..., WorkflowDriver], taken_over: bool, why: str) -> None:
    # An attempt whose step recorded its row but which is stopped before its fire: the row is
    # withdrawn, as if never recorded (no run, no failure, nothing for the lost-run monitor).
    # Unless another admin took the attempt over meanwhile (this one stalled past the claim
    # window): then its run is left to that admin (which ends it as stopped, or sends it). When
    # the fire is refused (here: its job moved to another group) the attempt is left too.
    store = env.store
    run_id, attempt, log_id = await _unsent_attempt(env, "node-a", 1)
    job = await store.jobs.get(attempt.job_id)
    assert job is not None
    if taken_over:
        assert await store.workflows.claim(attempt.id, "node-b", T0 + 60_000, stale_before_ms=T0 + 1)
    driver = new_driver()
    stopped = why == "stopped"
    group = env.group_id if stopped else env.group_id + 1000
    known = Wanted({}, group, {job.id: job}, superseded=stopped, recorded=(log_id, T0))
    await driver.fires.fire(attempt, known=known, claimed=True)
    assert (await store.logs.get(log_id) is None) is not taken_over
    assert env.double.runs() == []
    (after,) = await store.workflows.node_runs(run_id)
    left = NodeRunState.FIRING if taken_over and not stopped else NodeRunState.ENDED
    assert (after.state, after.claimed_by) == (left, "node-b" if taken_over else "node-a")


async def _unsent_attempt(env: Env, claimed_by: str, attempt_no: int) -> tuple[int, NodeRunRecord, int]:
    """A run whose node A (started: its attempt 1 running) has an attempt ``attempt_no`` claimed
    by ``claimed_by`` at T0 with a recorded, never confirmed run (as its step records it):
    (run id, that attempt, its log id)."""
    store = env.store
    job = await env.job()
    graph = parse_workflow({"nodes": [{"key": "A", "job_id": job.id}], "edges": []})
    wf_id = await store.workflows.create("w", env.group_id, "", graph.to_json(), None, T0)
    started = apply(graph, None, RunStarted(T0, 1)).run
    assert started is not None
    state = run_to_json(started)
    run_id = await store.workflows.start_run(wf_id, 1, env.group_id, "running", state, None, T0, [])
    start = [NewNodeRun("A", -1, attempt_no, job.id, None, None)]
    stored = await store.workflows.advance(run_id, 0, "running", state, T0, start, claimed_by=claimed_by)
    assert stored is not None
    (attempt,) = stored.attempts
    log_id = stored.log_ids.get(attempt.id)
    if log_id is None:  # no INSERT ... RETURNING: recorded as the trigger would
        (log_id,) = await store.logs.insert_fires([NewLog(env.group_id, job.id, NOW, trigger_type="WORKFLOW",
                                                          workflow_node_run_id=attempt.id)])
    assert log_id is not None
    return run_id, attempt, log_id


async def test_a_stopped_attempt_whose_run_was_recorded_but_not_sent_ends_it_as_killed(
        env: Env, new_driver: Callable[..., WorkflowDriver]) -> None:
    # Stopping a node whose attempt is claimed and recorded but not yet linked (its fire not
    # there yet): the recorded run is ended as killed, not left for the lost-run monitor.
    run_id, attempt, log_id = await _unsent_attempt(env, "node-a", 1)
    driver = new_driver()
    await driver.fires.kill(run_id, KillJob("A", 1, None, None))
    entry = await env.store.logs.get(log_id)
    assert entry is not None and (entry.handle_code, entry.handle_msg) == (FAIL_CODE, STOPPED_BY_WORKFLOW)
    (after,) = await env.store.workflows.node_runs(run_id)
    assert after.state == NodeRunState.ENDED and env.double.runs() == []


async def test_a_taken_over_attempt_no_longer_wanted_ends_the_run_its_dead_admin_recorded(
        env: Env, new_driver: Callable[..., WorkflowDriver]) -> None:
    # A dead admin's claimed attempt whose run it recorded (perhaps sent), taken over by the
    # sweep when the run no longer wants it (node A runs its attempt 1, not this 2nd): the run
    # is ended as its stop ends a linked run, and nothing is sent.
    run_id, attempt, log_id = await _unsent_attempt(env, "node-dead", 2)
    env.clock.advance(60_000)  # the claim is stale
    driver = new_driver()
    await driver.tick()
    entry = await env.store.logs.get(log_id)
    assert entry is not None and (entry.handle_code, entry.handle_msg) == (FAIL_CODE, STOPPED_BY_WORKFLOW)
    (after,) = await env.store.workflows.node_runs(run_id)
    assert after.state == NodeRunState.ENDED and env.double.runs() == []
