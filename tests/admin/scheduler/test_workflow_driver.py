"""The workflow driver against a real store, a real trigger service and an executor double:
two drivers (two admin nodes) handed the same results fire each node attempt once; the sweep
fires attempts nobody fired and takes over those claimed by a node that died."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import pytest
from sqlalchemy import event

from jobring.admin.dispatch.client import ExecutorClient
from jobring.admin.services import workflow_steps as steps_module
from jobring.admin.services import workflows as workflows_module
from jobring.admin.services.callbacks import CallbackService
from jobring.admin.services.workflows import WorkflowDriver
from jobring.admin.store import Store
from jobring.admin.store import workflows as store_module
from jobring.admin.store.records import NewLog
from jobring.admin.store.workflow_records import SMALL_STATE_CHARS
from jobring.admin.store.workflows import NewNodeRun, NodeRunState, WorkflowRecord
from jobring.admin.trigger.unsure import UnsureFires
from jobring.core.workflow import (
    NodeFinished,
    Outcome,
    RetryFailed,
    RunStarted,
    apply,
    parse_workflow,
    run_from_json,
    run_to_json,
)
from jobring.protocol.models import HandleCallbackParam, ReturnT
from tests.admin.trigger_kit import HOSTS, T0, Env, make_env

STALE_MS = 30_000


@dataclass
class Two:
    env: Env
    a: WorkflowDriver
    b: WorkflowDriver
    callbacks: CallbackService

    def fired(self) -> list[tuple[str, int]]:
        """(params, log id) of every /run the executors got."""
        return [(c.body["executorParams"], c.body["logId"]) for c in self.env.double.runs()]

    async def workflow(self, doc: dict[str, Any]) -> WorkflowRecord:
        graph = parse_workflow(doc)
        wf = await self.env.store.workflows.create("w", self.env.group_id, "", graph.to_json(), None, T0)
        record = await self.env.store.workflows.get(wf)
        assert record is not None
        return record

    async def finish(self, params: str, code: int = 200) -> None:
        """The run of the node with these params reports ``code``; both drivers hear of it (the
        callback reached one node, and the other's sweep saw the ended run at the same time)."""
        (log_id,) = [log for p, log in self.fired() if p == params][-1:]
        await self.callbacks.handle([HandleCallbackParam(log_id, T0, code, "ok" if code == 200 else "boom")])
        results = [(log_id, code, "ok")]
        await asyncio.gather(self.a.on_results(results), self.b.on_results(results), self.b.tick())


@pytest.fixture
async def two(sqlite_store: Store) -> AsyncIterator[Two]:
    env = await make_env(sqlite_store, HOSTS)
    a = WorkflowDriver(sqlite_store, env.trigger, None, env.clock, node_id="node-a", stale_ms=STALE_MS)
    b = WorkflowDriver(sqlite_store, env.trigger, None, env.clock, node_id="node-b", stale_ms=STALE_MS)
    callbacks = CallbackService(sqlite_store, env.trigger, env.clock)
    try:
        yield Two(env, a, b, callbacks)
    finally:
        await callbacks.close()
        await env.trigger.close()


def _diamond(job_id: int) -> dict[str, Any]:
    return {"nodes": [{"key": k, "job_id": job_id, "params": k} for k in "ABCD"],
            "edges": [{"from": "A", "to": "B"}, {"from": "A", "to": "C"}, {"from": "B", "to": "D"},
                      {"from": "C", "to": "D"}]}


async def test_two_drivers_fire_each_node_of_a_diamond_once(two: Two) -> None:
    job = await two.env.job()
    workflow = await two.workflow(_diamond(job.id))
    run_id, step = await two.a.start_run(workflow, {}, "alice")
    assert step.applied and [p for p, _ in two.fired()] == ["A"]
    await two.finish("A")
    assert sorted(p for p, _ in two.fired()) == ["A", "B", "C"]
    await two.finish("B")
    assert sorted(p for p, _ in two.fired()) == ["A", "B", "C"]  # D waits for C (all_success)
    await two.finish("C")
    await two.finish("D")
    assert sorted(p for p, _ in two.fired()) == ["A", "B", "C", "D"]
    record = await two.env.store.workflows.get_run(run_id)
    assert record is not None and record.status == "success"
    attempts = await two.env.store.workflows.node_runs(run_id)
    assert [(a.node_key, a.attempt, a.state) for a in attempts] == [
        (k, 1, NodeRunState.ENDED) for k in "ABCD"]
    await asyncio.gather(two.a.tick(), two.b.tick())
    assert len(two.fired()) == 4


async def test_a_failure_stops_the_run_and_retry_from_failed_fires_only_the_failed(two: Two) -> None:
    job = await two.env.job()
    workflow = await two.workflow(_diamond(job.id))
    run_id, _ = await two.a.start_run(workflow, {}, None)
    await two.finish("A")
    await two.finish("B", code=500)
    record = await two.env.store.workflows.get_run(run_id)
    assert record is not None and record.status == "failed"
    step = await two.b.apply(run_id, RetryFailed(T0, round=0))
    assert step.applied
    # C was running when B failed under the stop rule: killed then, run again now.
    assert sorted(p for p, _ in two.fired()) == ["A", "B", "B", "C", "C"]
    await two.finish("B")
    await two.finish("C")
    await two.finish("D")
    record = await two.env.store.workflows.get_run(run_id)
    assert record is not None and record.status == "success"
    assert (await two.b.apply(run_id, RetryFailed(T0, round=0))).note is not None  # a repeat is refused


async def test_the_sweep_fires_what_a_dead_node_claimed_once_the_claim_is_stale(two: Two) -> None:
    job = await two.env.job()
    workflow = await two.workflow({"nodes": [{"key": "A", "job_id": job.id, "params": "A"}], "edges": []})
    # A node stored the run's first step and died before firing it.
    graph = await two.a.graph(workflow.id, workflow.version)
    first = apply(graph, None, RunStarted(T0, 1))
    assert first.run is not None
    run_id = await two.env.store.workflows.start_run(workflow.id, 1, workflow.job_group, "running",
                                                     run_to_json(first.run), None, T0,
                                                     [NewNodeRun("A", -1, 1, job.id, "A", None)])
    (attempt,) = await two.env.store.workflows.node_runs(run_id)
    assert await two.env.store.workflows.claim(attempt.id, "dead-node", T0)
    await two.b.tick()
    assert two.fired() == []  # the claim is recent: its node may still be firing it
    two.env.clock.advance(STALE_MS + 1)
    await asyncio.gather(two.a.tick(), two.b.tick())
    assert [p for p, _ in two.fired()] == ["A"]
    await two.finish("A")
    record = await two.env.store.workflows.get_run(run_id)
    assert record is not None and record.status == "success"


async def test_a_driver_has_at_most_its_cap_of_job_starts_in_flight(
    two: Two, monkeypatch: pytest.MonkeyPatch
) -> None:
    job = await two.env.job()
    workflow = await two.workflow({"nodes": [{"key": "each", "kind": "fanout", "job_id": job.id,
                                              "items": "xs", "parallelism": 10, "params": "{{ item }}"}]})
    driver = WorkflowDriver(two.env.store, two.env.trigger, None, two.env.clock, node_id="capped",
                            max_concurrent_fires=3)
    real_fire = two.env.trigger.fire
    gate, three_in = asyncio.Event(), asyncio.Event()
    in_flight, most = 0, 0

    async def gated(request: Any) -> Any:
        nonlocal in_flight, most
        in_flight += 1
        most = max(most, in_flight)
        if in_flight == 3:
            three_in.set()
        await gate.wait()
        in_flight -= 1
        return await real_fire(request)

    monkeypatch.setattr(two.env.trigger, "fire", gated)
    start = asyncio.create_task(driver.start_run(workflow, {"xs": list(range(10))}, "alice"))
    await asyncio.wait_for(three_in.wait(), 5)
    for _ in range(50):  # give any further start every chance to begin
        await asyncio.sleep(0)
    assert most == 3
    gate.set()
    await asyncio.wait_for(start, 10)
    assert most == 3
    assert sorted(int(p) for p, _ in two.fired()) == list(range(10))


async def test_a_large_state_is_stepped_and_encoded_off_the_event_loop(
    two: Two, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A run's state reaches megabytes; reading, applying and writing it back must not hold the loop.
    loop_thread = threading.get_ident()
    threads: dict[str, set[int]] = {"apply": set(), "encode": set()}
    real_apply, real_encode = apply, steps_module.StateEncoder.encode

    def watched_apply(*args: Any) -> Any:
        threads["apply"].add(threading.get_ident())
        return real_apply(*args)

    def watched_encode(encoder: steps_module.StateEncoder, run: Any) -> Any:
        threads["encode"].add(threading.get_ident())
        return real_encode(encoder, run)

    job = await two.env.job()
    workflow = await two.workflow(_diamond(job.id))
    monkeypatch.setattr(steps_module, "SMALL_STATE_CHARS", 0)  # every state counts as large
    monkeypatch.setattr(store_module, "SMALL_STATE_CHARS", 0)
    monkeypatch.setattr(workflows_module, "KNOWN_STEP_ON_LOOP", 0)  # and every step of a known run
    monkeypatch.setattr(steps_module, "apply", watched_apply)
    monkeypatch.setattr(steps_module.StateEncoder, "encode", watched_encode)
    await two.a.start_run(workflow, {}, "alice")
    await two.finish("A")
    assert sorted(p for p, _ in two.fired()) == ["A", "B", "C"]
    assert threads["apply"] and loop_thread not in threads["apply"]
    assert threads["encode"] and loop_thread not in threads["encode"]


async def test_a_step_that_starts_nodes_reads_their_group_while_it_is_stored(
    two: Two, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The group cache lasts a second; a join's last parent often comes later than that.
    job = await two.env.job()
    workflow = await two.workflow(_diamond(job.id))
    await two.a.start_run(workflow, {}, "alice")
    warmed: list[int] = []
    real = two.env.trigger.warm_group

    async def warm_group(group_id: int) -> None:
        warmed.append(group_id)
        await real(group_id)

    monkeypatch.setattr(two.env.trigger, "warm_group", warm_group)
    reads: list[int] = []
    real_get = two.env.store.groups.get

    async def get(group_id: int) -> Any:
        reads.append(group_id)
        return await real_get(group_id)

    monkeypatch.setattr(two.env.store.groups, "get", get)
    two.env.clock.advance(5_000)
    await two.finish("A")
    assert sorted(p for p, _ in two.fired()) == ["A", "B", "C"]
    # By the steps that started B and C (both drivers heard of A's result); their fires found
    # it read (or being read): read once.
    assert warmed and set(warmed) == {two.env.group_id}
    assert reads == [two.env.group_id]


def _apply_threads(monkeypatch: pytest.MonkeyPatch) -> set[int]:
    """The threads the engine's ``apply`` is called in from now on (filled as it is)."""
    threads: set[int] = set()
    real_apply = apply

    def watched_apply(*args: Any) -> Any:
        threads.add(threading.get_ident())
        return real_apply(*args)

    monkeypatch.setattr(steps_module, "apply", watched_apply)
    return threads


async def test_a_small_state_is_stepped_on_the_event_loop(two: Two, monkeypatch: pytest.MonkeyPatch) -> None:
    # A few KB take less CPU than the hand-off to a worker thread and back.
    job = await two.env.job()
    workflow = await two.workflow(_diamond(job.id))
    run_id, _ = await two.a.start_run(workflow, {}, "alice")
    threads = _apply_threads(monkeypatch)
    await two.finish("A")
    assert sorted(p for p, _ in two.fired()) == ["A", "B", "C"]
    assert threads == {threading.get_ident()}
    record = await two.env.store.workflows.get_run(run_id)
    assert record is not None and 0 < record.state_chars <= SMALL_STATE_CHARS


async def test_a_known_runs_step_of_few_events_is_on_the_event_loop_whatever_its_size(
    two: Two, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Its run is in memory and only its changed nodes are encoded: less CPU than the hand-off.
    job = await two.env.job()
    workflow = await two.workflow(_diamond(job.id))
    monkeypatch.setattr(steps_module, "SMALL_STATE_CHARS", 0)  # every state counts as large
    monkeypatch.setattr(store_module, "SMALL_STATE_CHARS", 0)
    await two.a.start_run(workflow, {}, "alice")
    threads = _apply_threads(monkeypatch)
    (log_id,) = [log for p, log in two.fired() if p == "A"]
    await two.callbacks.handle([HandleCallbackParam(log_id, T0, 200, "ok")])
    await two.a.on_results([(log_id, 200, "ok")])  # driver a alone: it stored the run last
    assert sorted(p for p, _ in two.fired()) == ["A", "B", "C"]
    assert threads == {threading.get_ident()}


async def test_a_run_a_dead_node_recorded_and_never_sent_is_sent_once_after_asking(two: Two) -> None:
    job = await two.env.job()
    workflow = await two.workflow({"nodes": [{"key": "A", "job_id": job.id, "params": "A"}], "edges": []})
    graph = await two.a.graph(workflow.id, workflow.version)
    first = apply(graph, None, RunStarted(T0, 1))
    assert first.run is not None
    run_id = await two.env.store.workflows.start_run(workflow.id, 1, workflow.job_group, "running",
                                                     run_to_json(first.run), None, T0,
                                                     [NewNodeRun("A", -1, 1, job.id, "A", None)])
    (attempt,) = await two.env.store.workflows.node_runs(run_id)
    # The dead node claimed the attempt and recorded its job run, then died before /run.
    assert await two.env.store.workflows.claim(attempt.id, "dead-node", T0)
    (log_id,) = await two.env.store.logs.insert_fires([NewLog(
        job_group=two.env.group_id, job_id=job.id, trigger_time=datetime.fromtimestamp(T0 / 1000, tz=UTC),
        executor_handler="demoJobHandler", executor_param="A", trigger_type="WORKFLOW",
        admin_node="dead-node", workflow_node_run_id=attempt.id)])
    assert log_id is not None
    asked: list[list[int]] = []

    async def received(body: dict[str, Any]) -> ReturnT:
        asked.append([i for i, _ in body["runs"]])
        return ReturnT.success({"received": []})

    for address in two.env.double.addresses:
        two.env.double.answer(address, "received", received)
    client: ExecutorClient = two.env.trigger.dispatcher._client  # noqa: SLF001 (the double's client)
    unsure = UnsureFires(two.env.store, two.env.trigger, client)
    survivor = WorkflowDriver(two.env.store, two.env.trigger, None, two.env.clock, node_id="node-b",
                              stale_ms=STALE_MS, unsure=unsure)
    two.env.clock.advance(STALE_MS + 1)
    await survivor.tick()
    await unsure.wait_idle()
    assert asked and all(set(ids) == {log_id} for ids in asked)  # every executor asked of it (only)
    assert two.fired() == [("A", log_id)]  # sent now, under the run id the dead node recorded
    await asyncio.gather(survivor.tick(), two.a.tick())
    await unsure.wait_idle()
    assert len(two.fired()) == 1
    await two.callbacks.handle([HandleCallbackParam(log_id, T0, 200, "ok")])
    await survivor.on_results([(log_id, 200, "ok")])
    record = await two.env.store.workflows.get_run(run_id)
    assert record is not None and record.status == "success"


async def test_the_results_of_a_fan_in_are_applied_as_one_step(two: Two) -> None:
    job = await two.env.job()
    middle = [f"m{i}" for i in range(20)]
    workflow = await two.workflow({
        "nodes": [{"key": k, "job_id": job.id, "params": k} for k in ["root", *middle, "sink"]],
        "edges": [{"from": "root", "to": m} for m in middle] + [{"from": m, "to": "sink"} for m in middle]})
    run_id, _ = await two.a.start_run(workflow, {}, None)
    await two.finish("root")
    assert sorted(p for p, _ in two.fired()) == sorted(["root", *middle])
    await two.a.wait_idle()
    before = await two.env.store.workflows.get_run(run_id)
    assert before is not None
    logs = [log for p, log in two.fired() if p in middle]
    await two.callbacks.handle([HandleCallbackParam(log, T0, 200, "ok") for log in logs])
    await two.a.on_results([(log, 200, "ok") for log in logs])
    # One read and one write for the twenty results (each alone would be a write, and most
    # would first lose the race to another and be read and applied again).
    after = await two.env.store.workflows.get_run(run_id)
    assert after is not None
    assert after.rev - before.rev <= 2, (before.rev, after.rev)
    assert sorted(p for p, _ in two.fired()).count("sink") == 1
    await two.finish("sink")
    record = await two.env.store.workflows.get_run(run_id)
    assert record is not None and record.status == "success"


async def test_a_node_starts_after_its_parents_result_without_reading_the_run_again(
    two: Two, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Between a result and the child's /run: one write, storing the step with the child's
    # attempt inserted claimed and returned by its INSERT, its job read and its job run
    # recorded in the same transaction (four statements; until 2026-12-01 the job run was a
    # write of its own at the fire). Nothing is read: the
    # attempt of the result is the one this driver linked (its context additions come with
    # the result), the run is the one it stored last, the executor group is cached for
    # workflow fires as for scheduled ones, and a small state is never handed to a worker
    # thread. (Before: the attempt read, the group's two reads, and the attempts read back
    # after their insert: 3 reads, 5 statements.)
    job = await two.env.job()
    workflow = await two.workflow({"nodes": [{"key": k, "job_id": job.id, "params": k} for k in "AB"],
                                   "edges": [{"from": "A", "to": "B"}]})
    await two.a.start_run(workflow, {}, None)
    await two.a.wait_idle()
    (log_id,) = [log for p, log in two.fired() if p == "A"]
    await two.callbacks.handle([HandleCallbackParam(log_id, T0, 200, "ok")])
    db = two.env.store.db
    real_read, real_write, real_to_thread = db.read, db.write, asyncio.to_thread
    counted = {"read": 0, "write": 0, "thread": 0, "statement": 0}
    at_run: dict[str, int] = {}

    def counting(kind: str, real: Any) -> Any:
        def opened(*args: Any, **kwargs: Any) -> Any:
            counted[kind] += 1
            return real(*args, **kwargs)
        return opened

    async def to_thread(fn: Any, *args: Any) -> Any:
        counted["thread"] += 1
        return await real_to_thread(fn, *args)

    def statement(conn: Any, cursor: Any, text: str, *args: Any) -> None:
        if not text.startswith("BEGIN"):
            counted["statement"] += 1

    async def run(body: dict[str, Any]) -> ReturnT:
        at_run.update(counted)
        return ReturnT.success()

    for address in two.env.double.addresses:
        two.env.double.answer(address, "run", run)
    monkeypatch.setattr(db, "read", counting("read", real_read))
    monkeypatch.setattr(db, "write", counting("write", real_write))
    monkeypatch.setattr(asyncio, "to_thread", to_thread)
    event.listen(db.engine.sync_engine, "before_cursor_execute", statement)
    try:
        await two.a.on_results([(log_id, 200, "ok")], {})
    finally:
        event.remove(db.engine.sync_engine, "before_cursor_execute", statement)
    assert [p for p, _ in two.fired()] == ["A", "B"]
    assert at_run == {"read": 0, "write": 1, "thread": 0, "statement": 4}, at_run


async def test_a_result_this_driver_did_not_fire_is_read_with_its_context_additions(two: Two) -> None:
    # Driver a fired A; its result reaches driver b (the callback came to another admin): b
    # has no memory of A's job run and reads the attempt, with the additions stored on it.
    job = await two.env.job()
    workflow = await two.workflow({"nodes": [{"key": k, "job_id": job.id, "params": k} for k in "AB"],
                                   "edges": [{"from": "A", "to": "B"}]})
    await two.a.start_run(workflow, {}, None)
    await two.a.wait_idle()
    (log_id,) = [log for p, log in two.fired() if p == "A"]
    await two.callbacks.handle([HandleCallbackParam(log_id, T0, 200, "ok", workflow_context={"k": 1})])
    await two.b.on_results([(log_id, 200, "ok")], {log_id: '{"k":1}'})
    await two.b.wait_idle()
    assert [p for p, _ in two.fired()] == ["A", "B"]
    (b,) = [c.body for c in two.env.double.runs() if c.body["executorParams"] == "B"]
    assert b["workflowContext"] == {"k": 1}


async def test_attempts_a_dead_node_stored_claimed_are_taken_over_once_the_claim_is_stale(two: Two) -> None:
    job = await two.env.job()
    workflow = await two.workflow({"nodes": [{"key": k, "job_id": job.id, "params": k} for k in "AB"],
                                   "edges": [{"from": "A", "to": "B"}]})
    run_id, _ = await two.a.start_run(workflow, {}, None)
    await two.a.wait_idle()
    record = await two.env.store.workflows.get_run(run_id)
    assert record is not None and record.state is not None
    # A node stored A's success with B's attempt claimed by it, and died before firing B.
    graph = await two.a.graph(workflow.id, workflow.version)
    (log_a,) = [log for p, log in two.fired() if p == "A"]
    step = apply(graph, run_from_json(record.state), NodeFinished("A", 1, Outcome.SUCCESS, T0, run_id=log_a))
    assert step.run is not None
    stored = await two.env.store.workflows.advance(
        run_id, record.rev, "running", run_to_json(step.run), T0, [NewNodeRun("B", -1, 1, job.id, "B", None)],
        claimed_by="dead-node")
    assert stored is not None and [(a.node_key, a.state, a.claimed_by) for a in stored.attempts] == [
        ("B", NodeRunState.FIRING, "dead-node")]
    assert set(stored.jobs) == {job.id}
    await asyncio.gather(two.a.tick(), two.b.tick())
    assert [p for p, _ in two.fired()] == ["A"]  # the claim is recent: its node may be firing it
    two.env.clock.advance(STALE_MS + 1)
    await asyncio.gather(two.a.tick(), two.b.tick())
    assert [p for p, _ in two.fired()] == ["A", "B"]
