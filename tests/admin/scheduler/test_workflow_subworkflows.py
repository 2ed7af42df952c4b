"""Sub-workflow nodes in the driver against a real store and trigger service (an executor
double runs the jobs): the node starts a child run with the parent's context, the child's end
finishes the node and hands back what the child changed, a stop of the parent stops the child,
retry from failed runs the child again, two admins firing the same attempt start one child, and
a child that leads back to a workflow above it is refused at its start, naming the node."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import pytest
from sqlalchemy import update

from jobring.admin.services.callbacks import CallbackService
from jobring.admin.services.workflows import WorkflowDriver
from jobring.admin.store import Store
from jobring.admin.store.tables import workflow
from jobring.admin.store.workflows import NodeRunState, WorkflowRecord
from jobring.core.workflow import RetryFailed, StopRun, parse_workflow, run_from_json
from jobring.protocol.models import HandleCallbackParam
from tests.admin.trigger_kit import HOSTS, T0, Env, make_env


@dataclass
class Kit:
    env: Env
    a: WorkflowDriver
    b: WorkflowDriver
    callbacks: CallbackService

    def fired(self) -> list[str]:
        return [c.body["executorParams"] for c in self.env.double.runs()]

    async def workflow(self, doc: dict[str, Any]) -> WorkflowRecord:
        graph = parse_workflow(doc)
        wid = await self.env.store.workflows.create("w", self.env.group_id, "", graph.to_json(), None, T0)
        record = await self.env.store.workflows.get(wid)
        assert record is not None
        return record

    async def finish(self, params: str, code: int = 200, msg: str = "ok") -> None:
        runs = self.env.double.runs()
        (log_id,) = [c.body["logId"] for c in runs if c.body["executorParams"] == params][-1:]
        await self.callbacks.handle([HandleCallbackParam(log_id, T0, code, msg)])
        await self.a.on_results([(log_id, code, msg)])

    async def state(self, run_id: int) -> tuple[str, dict[str, Any]]:
        record = await self.env.store.workflows.get_run(run_id)
        assert record is not None and record.state is not None
        run = run_from_json(record.state)
        return record.status, dict(run.nodes)


@pytest.fixture
async def kit(sqlite_store: Store) -> AsyncIterator[Kit]:
    env = await make_env(sqlite_store, HOSTS)
    a = WorkflowDriver(sqlite_store, env.trigger, None, env.clock, node_id="node-a")
    b = WorkflowDriver(sqlite_store, env.trigger, None, env.clock, node_id="node-b")
    callbacks = CallbackService(sqlite_store, env.trigger, env.clock)
    try:
        yield Kit(env, a, b, callbacks)
    finally:
        await callbacks.close()
        await env.trigger.close()


async def _parent_and_child(kit: Kit) -> tuple[WorkflowRecord, WorkflowRecord]:
    job = await kit.env.job()
    child = await kit.workflow({"nodes": [{"key": "c1", "job_id": job.id, "params": "c1 {{ day }}",
                                           "result_json": True}]})
    parent = await kit.workflow({
        "nodes": [{"key": "p1", "job_id": job.id, "params": "p1"},
                  {"key": "sub", "kind": "subworkflow", "workflow_id": child.id},
                  {"key": "p2", "job_id": job.id, "params": "p2 {{ rows }}"}],
        "edges": [{"from": "p1", "to": "sub"}, {"from": "sub", "to": "p2"}]})
    return parent, child


async def test_a_sub_workflow_node_runs_the_child_and_the_parent_goes_on(kit: Kit) -> None:
    parent, child = await _parent_and_child(kit)
    run_id, _ = await kit.a.start_run(parent, {"day": "d1"}, "alice")
    await kit.finish("p1")
    assert kit.fired() == ["p1", "c1 d1"]  # the child got the parent's context
    runs, _ = await kit.env.store.workflows.list_runs(workflow_id=child.id)
    (child_run,) = runs
    assert child_run.parent_run_id == run_id and child_run.triggered_by == f"workflow run {run_id}"
    status, nodes = await kit.state(run_id)
    assert status == "running" and nodes["sub"].run_id == child_run.id
    await kit.finish("c1 d1", msg='{"rows": 42}')
    assert kit.fired() == ["p1", "c1 d1", "p2 42"]  # the child's additions came back
    await kit.finish("p2 42")
    status, nodes = await kit.state(run_id)
    assert status == "success" and nodes["sub"].message.startswith(f"workflow run {child_run.id} success")
    attempts = await kit.env.store.workflows.node_runs(run_id)
    assert {a.state for a in attempts} == {NodeRunState.ENDED}


async def test_stopping_the_parent_stops_the_child(kit: Kit) -> None:
    parent, child = await _parent_and_child(kit)
    run_id, _ = await kit.a.start_run(parent, {"day": "d1"}, "alice")
    await kit.finish("p1")
    (child_run,), _ = await kit.env.store.workflows.list_runs(workflow_id=child.id)
    assert (await kit.a.apply(run_id, StopRun(T0))).applied
    assert (await kit.state(child_run.id))[0] == "stopped"
    status, nodes = await kit.state(run_id)
    assert status == "stopped" and nodes["sub"].status.value == "stopped"


async def test_a_failed_child_fails_the_node_and_retry_from_failed_runs_it_again(kit: Kit) -> None:
    parent, child = await _parent_and_child(kit)
    run_id, _ = await kit.a.start_run(parent, {"day": "d1"}, "alice")
    await kit.finish("p1")
    await kit.finish("c1 d1", code=500, msg="boom")
    status, nodes = await kit.state(run_id)
    assert status == "failed" and nodes["sub"].status.value == "failed" and "failed" in nodes["sub"].message
    assert (await kit.a.apply(run_id, RetryFailed(T0))).applied
    runs, _ = await kit.env.store.workflows.list_runs(workflow_id=child.id)
    assert len(runs) == 2 and runs[0].status == "running"  # a new child run
    assert kit.fired() == ["p1", "c1 d1", "c1 d1"]  # p1 kept
    await kit.finish("c1 d1", msg="{}")
    status, nodes = await kit.state(run_id)
    assert nodes["sub"].status.value == "success" and nodes["sub"].attempt == 2


async def test_two_admins_firing_one_attempt_start_one_child(kit: Kit) -> None:
    job = await kit.env.job()
    child = await kit.workflow({"nodes": [{"key": "c1", "job_id": job.id, "params": "c1"}]})
    parent = await kit.workflow({"nodes": [{"key": "sub", "kind": "subworkflow", "workflow_id": child.id}]})
    # The first step is stored by one admin; both sweep before anyone fired it.
    run_id, _ = await kit.a.start_run(parent, {}, None)
    await asyncio.gather(kit.a.tick(), kit.b.tick())
    runs, _ = await kit.env.store.workflows.list_runs(workflow_id=child.id)
    assert len(runs) == 1 and kit.fired() == ["c1"]
    await kit.finish("c1")
    assert (await kit.state(run_id))[0] == "success"


async def test_a_child_that_leads_back_above_it_is_refused_at_its_start(kit: Kit) -> None:
    job = await kit.env.job()
    b = await kit.workflow({"nodes": [{"key": "b1", "job_id": job.id, "params": "b1"}]})
    a = await kit.workflow({"nodes": [{"key": "to_b", "kind": "subworkflow", "workflow_id": b.id}]})
    # B is edited after A was saved to run A (the save check of B would refuse this; here the
    # store is written directly, as an older admin might have).
    loop = parse_workflow({"nodes": [{"key": "back", "kind": "subworkflow", "workflow_id": a.id}]})
    await kit.env.store.workflows.update(b.id, "w", kit.env.group_id, "", loop.to_json(), None, T0, 1)
    run_id, _ = await kit.a.start_run(a, {}, None)
    status, nodes = await kit.state(run_id)
    assert status == "failed" and nodes["to_b"].status.value == "failed", nodes
    assert "not started" in nodes["to_b"].message and "may not recurse" in nodes["to_b"].message
    assert (await kit.env.store.workflows.list_runs(workflow_id=b.id))[1] == 0  # B never ran
    assert kit.fired() == []


async def test_a_child_moved_to_another_group_as_it_starts_fails_the_node(
        kit: Kit, monkeypatch: pytest.MonkeyPatch) -> None:
    # The child is read in the parent's group, then moved before its run is recorded: the start
    # is refused in its write and the node fails saying so (the error used to escape through
    # the parent's own start, as if the parent were gone).
    parent, child = await _parent_and_child(kit)
    async with kit.env.store.engine.begin() as conn:
        moved = update(workflow).where(workflow.c.id == child.id).values(job_group=child.job_group + 1)
        await conn.execute(moved)
    read = kit.env.store.workflows.get

    async def child_as_read_before_the_move(workflow_id: int) -> WorkflowRecord | None:
        return child if workflow_id == child.id else await read(workflow_id)

    monkeypatch.setattr(kit.env.store.workflows, "get", child_as_read_before_the_move)
    run_id, _ = await kit.a.start_run(parent, {"day": "d1"}, "alice")
    await kit.finish("p1")
    status, nodes = await kit.state(run_id)
    assert status == "failed" and nodes["sub"].status.value == "failed", nodes
    gone = f"workflow {child.id} does not exist in group {child.job_group}"
    assert nodes["sub"].message == f"attempt 1 failed: not started: {gone}"
    assert (await kit.env.store.workflows.list_runs(workflow_id=child.id))[1] == 0
    assert kit.fired() == ["p1"]


async def test_the_sweep_hands_over_a_child_end_no_admin_handed_over(kit: Kit) -> None:
    parent, child = await _parent_and_child(kit)
    run_id, _ = await kit.a.start_run(parent, {"day": "d1"}, "alice")
    await kit.finish("p1")
    (child_run,), _ = await kit.env.store.workflows.list_runs(workflow_id=child.id)
    # The child's end was stored by an admin that stopped before handing it to the parent.
    record = await kit.env.store.workflows.get_run(child_run.id)
    assert record is not None and record.state is not None
    state = {**record.state, "status": "success", "context": {**record.state["context"], "rows": 5}}
    assert await kit.env.store.workflows.advance(child_run.id, record.rev, "success", state, T0, [])
    assert kit.fired() == ["p1", "c1 d1"]
    await kit.b.tick()
    assert kit.fired() == ["p1", "c1 d1", "p2 5"]  # what the child added came back
    status, nodes = await kit.state(run_id)
    assert nodes["sub"].status.value == "success" and status == "running"


async def test_a_sub_workflow_nodes_deadline_stops_the_child(kit: Kit) -> None:
    job = await kit.env.job()
    child = await kit.workflow({"nodes": [{"key": "c1", "job_id": job.id, "params": "c1"}]})
    parent = await kit.workflow({"nodes": [{"key": "sub", "kind": "subworkflow", "workflow_id": child.id,
                                            "timeout_s": 60}]})
    run_id, _ = await kit.a.start_run(parent, {}, None)
    (child_run,), _ = await kit.env.store.workflows.list_runs(workflow_id=child.id)
    await kit.a.tick()
    assert (await kit.state(child_run.id))[0] == "running"
    kit.env.clock.advance(61_000)
    await kit.a.tick()
    assert (await kit.state(child_run.id))[0] == "stopped"
    status, nodes = await kit.state(run_id)
    assert status == "failed" and "timed_out" in nodes["sub"].message, nodes["sub"]


async def test_a_child_edited_after_the_start_past_the_tree_budget_is_not_started(kit: Kit) -> None:
    """The tree budget (admin/services/workflow_access.py) holds at run time too: at a child's
    start the whole tree, from the top run's workflow as it is now, is counted. Counting the
    child's own tree only, an edit made after the parent started multiplied past the budget
    (here 100 children of 10,000 job runs each)."""
    job = await kit.env.job()
    leaf = await kit.workflow({"nodes": [{"key": "l", "job_id": job.id, "params": "leaf"}]})

    def fan(wid: int, first: dict[str, Any] | None = None) -> dict[str, Any]:
        nodes = [{"key": f"s{i}", "kind": "subworkflow", "workflow_id": wid} for i in range(100)]
        head = [first] if first else []
        edges = [{"from": (first or nodes[0])["key"], "to": n["key"]} for n in nodes[0 if first else 1:]]
        return {"nodes": head + nodes, "edges": edges}

    middle = await kit.workflow(fan(leaf.id))
    child = await kit.workflow({"nodes": [{"key": "c", "job_id": job.id, "params": "c"}]})
    parent = await kit.workflow(fan(child.id, {"key": "p1", "job_id": job.id, "params": "p1"}))
    run_id, _ = await kit.a.start_run(parent, {}, "alice")
    # Now the child runs 100 middles of 100 leaves: 10,000 job runs, each of 100 children.
    graph = parse_workflow(fan(middle.id)).to_json()
    assert await kit.env.store.workflows.update(child.id, "w", kit.env.group_id, "", graph, None, T0,
                                                child.version) is not None
    await kit.finish("p1")
    await kit.a.wait_idle()
    runs, _ = await kit.env.store.workflows.list_runs(workflow_id=child.id)
    assert runs == []
    _, nodes = await kit.state(run_id)
    assert "more than 100,000 job runs" in (nodes["s0"].message or "")
