"""Workflows with a real admin process and a real jobring executor process: a diamond
A -> (B, C) -> D with the all-success join runs each node once, in order; a node failing under
the stop rule fails the run, and retry-from-failed completes it without re-running what had
succeeded; a handler's ctx.workflow.set reaches the next node's params and ctx.workflow.get."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.e2e.workflow_kit import EXECUTOR_HEAD, WorkflowEnv, workflow_env

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(180)]

# "flaky" (workflow_kit) fails until the file flaky.ok exists (the test creates it before retrying).
EXECUTOR_CODE = EXECUTOR_HEAD + '''

@executor.job("produce")
def produce(ctx: JobContext) -> None:
    assert ctx.workflow is not None
    ctx.workflow.set("rows", 1234)


@executor.job("consume")
def consume(ctx: JobContext) -> None:
    _note(f"consume params={{ctx.params}} rows={{ctx.workflow.get('rows')!r}}")
'''


@pytest.fixture
async def flow(tmp_path: Path) -> AsyncIterator[WorkflowEnv]:
    async with workflow_env(tmp_path, "flow-app", "flow_jobs", EXECUTOR_CODE) as env:
        yield env


async def test_a_diamond_runs_each_node_once_in_order(flow: WorkflowEnv) -> None:
    step = await flow.job("step")
    nodes = [{"key": k, "job_id": step, "params": k} for k in "ABCD"]
    edges = [{"from": "A", "to": "B"}, {"from": "A", "to": "C"}, {"from": "B", "to": "D"},
             {"from": "C", "to": "D"}]
    created = await flow.admin.workflows.create({"name": "diamond", "job_group": flow.group,
                                                 "nodes": nodes, "edges": edges})
    started = await flow.admin.workflows.trigger(created["id"])
    run = await flow.ended(started["workflow_run_id"])
    assert run["state"] == "success", run["nodes"]
    assert [(n["key"], n["state"], n["attempt"]) for n in run["nodes"]] == [(k, "success", 1) for k in "ABCD"]
    order = flow.order()
    assert sorted(order) == sorted(f"{k} {e}" for k in "ABCD" for e in ("start", "end")), order  # once each
    at = {line: i for i, line in enumerate(order)}
    assert at["A end"] < at["B start"] and at["A end"] < at["C start"]
    assert at["B end"] < at["D start"] and at["C end"] < at["D start"]
    # Each node's run is a run of the run log, triggered by the workflow.
    for node in run["nodes"]:
        job_run = await flow.admin.runs.get(node["run_id"])
        assert (job_run["trigger_type"], job_run["executor_param"], job_run["handle_code"]) == (
            "WORKFLOW", node["key"], 200)
    listed = await flow.admin.workflows.runs(workflow=created["id"])
    assert [r["id"] for r in listed.items] == [started["workflow_run_id"]]


async def test_a_failed_node_stops_the_run_and_retry_from_failed_completes_it(flow: WorkflowEnv) -> None:
    step, flaky = await flow.job("step"), await flow.job("flaky")
    nodes = [{"key": "A", "job_id": step, "params": "A"}, {"key": "F", "job_id": flaky, "params": "F"},
             {"key": "S", "job_id": step, "params": "S"}, {"key": "D", "job_id": step, "params": "D"}]
    edges = [{"from": "A", "to": "F"}, {"from": "A", "to": "S"}, {"from": "F", "to": "D"},
             {"from": "S", "to": "D"}]
    created = await flow.admin.workflows.create({"name": "flaky", "job_group": flow.group,
                                                 "nodes": nodes, "edges": edges})
    started = await flow.admin.workflows.trigger(created["id"])
    run = await flow.ended(started["workflow_run_id"])
    states = {n["key"]: n["state"] for n in run["nodes"]}
    assert run["state"] == "failed" and states["A"] == "success" and states["F"] == "failed", run
    assert states["D"] in ("stopped", "waiting") and "D start" not in flow.order()
    (flow.home / "flaky.ok").write_text("", encoding="utf-8")
    retried = await flow.admin.workflows.retry(run["id"], round=run["round"])
    assert retried["state"] == "running"
    run = await flow.ended(run["id"])
    assert run["state"] == "success", run["nodes"]
    attempts = {n["key"]: n["attempt"] for n in run["nodes"]}
    assert attempts["A"] == 1 and attempts["F"] == 2 and attempts["D"] == 1
    order = flow.order()
    assert order.count("A start") == 1 and order.count("F start") == 2 and order.count("D start") == 1, order
    # The same repair again is refused: the round moved on.
    with pytest.raises(Exception, match="409|round|success"):
        await flow.admin.workflows.retry(run["id"], round=0)


async def test_a_handler_passes_data_to_the_next_node_through_the_context(flow: WorkflowEnv) -> None:
    produce, consume = await flow.job("produce"), await flow.job("consume")
    nodes = [{"key": "A", "job_id": produce}, {"key": "B", "job_id": consume, "params": "n={{ rows }}"}]
    created = await flow.admin.workflows.create({"name": "data", "job_group": flow.group, "nodes": nodes,
                                                 "edges": [{"from": "A", "to": "B"}]})
    started = await flow.admin.workflows.trigger(created["id"], params={"day": "20261201"})
    run = await flow.ended(started["workflow_run_id"])
    assert run["state"] == "success", run["nodes"]
    assert run["context"] == {"day": "20261201", "rows": 1234}
    assert flow.order() == ["consume params=n=1234 rows=1234"]
