"""Sub-workflows and declared workflows with a real admin process and a real jobring executor
process: a parent's sub-workflow node runs the child workflow as a child run (linked both
ways), the parent goes on when the child has succeeded, and a stop of the parent stops the
child; a workflow the executor declares in code next to its jobs is created by the admin at
the executor's start, read-only, and runs."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.waiting import eventually
from tests.e2e.workflow_kit import EXECUTOR_HEAD, WorkflowEnv, states, workflow_env

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(180)]

# "hang" runs until killed; the declared workflow runs "step" twice.
EXECUTOR_CODE = EXECUTOR_HEAD + '''

@executor.job("hang")
def hang(ctx: JobContext) -> None:
    _note(f"{{ctx.params}} start")
    for _ in range(1200):
        time.sleep(0.05)
    _note(f"{{ctx.params}} end")


executor.workflow("declared-flow", description="declared in code",
                  nodes=[{{"key": "one", "job": "step", "params": "d1"}},
                         {{"key": "two", "job": "step", "params": "d2"}}],
                  edges=[{{"from": "one", "to": "two"}}])
'''


@pytest.fixture
async def env(tmp_path: Path) -> AsyncIterator[WorkflowEnv]:
    async with workflow_env(tmp_path, "sub-app", "sub_jobs", EXECUTOR_CODE) as env:
        yield env


async def test_a_sub_workflow_node_runs_the_child_and_the_parent_goes_on(env: WorkflowEnv) -> None:
    step = await env.job("step")
    child = await env.workflow("child", [{"key": "c1", "job_id": step, "params": "c1 {{ day }}"},
                                         {"key": "c2", "job_id": step, "params": "c2"}],
                               [{"from": "c1", "to": "c2"}])
    parent = await env.workflow("parent", [{"key": "p1", "job_id": step, "params": "p1"},
                                           {"key": "sub", "kind": "subworkflow", "workflow_id": child},
                                           {"key": "p2", "job_id": step, "params": "p2"}],
                                [{"from": "p1", "to": "sub"}, {"from": "sub", "to": "p2"}])
    run = await env.ended((await env.admin.workflows.trigger(parent, {"day": "d7"}))["workflow_run_id"])
    assert run["state"] == "success", run
    assert states(run) == {"p1": "success", "sub": "success", "p2": "success"}
    sub = run["nodes"][1]
    assert sub["workflow_id"] == child and sub["run_id"] is not None
    child_run = await env.admin.workflows.run(sub["run_id"])
    assert child_run["state"] == "success" and child_run["parent_run_id"] == run["id"], child_run
    assert child_run["workflow_id"] == child and child_run["context"]["day"] == "d7"
    assert env.order() == [f"{p} {e}" for p in ("p1", "c1 d7", "c2", "p2") for e in ("start", "end")]


async def test_stopping_the_parent_stops_the_child(env: WorkflowEnv) -> None:
    hang = await env.job("hang")
    child = await env.workflow("hanging child", [{"key": "h", "job_id": hang, "params": "H"}], [])
    sub = {"key": "sub", "kind": "subworkflow", "workflow_id": child}
    parent = await env.workflow("stopped parent", [sub], [])
    run_id = (await env.admin.workflows.trigger(parent))["workflow_run_id"]
    running = await env.run_until(run_id, "child started", lambda r: r["nodes"][0]["run_id"] is not None
                                  and "H start" in env.order())
    child_run_id = running["nodes"][0]["run_id"]
    stopped = await env.admin.workflows.stop(run_id, round=running["round"])
    assert stopped["state"] == "stopped"
    child_run = await env.ended(child_run_id)
    assert child_run["state"] == "stopped" and states(child_run) == {"h": "stopped"}, child_run
    assert "H end" not in env.order()


async def test_a_workflow_declared_in_code_is_created_and_runs(env: WorkflowEnv) -> None:
    async def declared() -> dict[str, Any] | None:
        page = await env.admin.workflows.list()
        found = [w for w in page.items if w["name"] == "declared-flow"]
        return found[0] if found else None

    flow = await eventually("the declared workflow", declared)
    assert flow["managed_by"] == "code" and flow["description"] == "declared in code"
    step = await env.job("step")
    assert [n["job_id"] for n in flow["nodes"]] == [step, step]
    run = await env.ended((await env.admin.workflows.trigger(flow["id"]))["workflow_run_id"])
    assert run["state"] == "success", run
    assert env.order() == ["d1 start", "d1 end", "d2 start", "d2 end"]
