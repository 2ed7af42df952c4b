"""Re-run from a node with a real admin process and a real jobring executor process: on an ended
run (succeeded, or failed further down) the node and its descendants run again as new job runs
with their attempts counted on, the rest of the run is kept, the run ends success in the next
round, the same repair again is refused, and the audit log records it."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from jobring.client import AdminApiError
from tests.e2e.workflow_kit import EXECUTOR_HEAD, WorkflowEnv, states, workflow_env

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(180)]

# Its "flaky" (workflow_kit) fails until the file flaky.ok exists: created before the repair.
EXECUTOR_CODE = EXECUTOR_HEAD


@pytest.fixture
async def flow(tmp_path: Path) -> AsyncIterator[WorkflowEnv]:
    async with workflow_env(tmp_path, "repair-app", "repair_jobs", EXECUTOR_CODE) as env:
        yield env


def _by_key(run: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {n["key"]: n for n in run["nodes"]}


async def _rerun_is_audited(flow: WorkflowEnv, run_id: int, workflow_id: int) -> None:
    page = await flow.admin.audit.list(action="workflow.run_rerun_from")
    records = [r for r in page.items if r["target_id"] == str(run_id)]
    assert records, page.items
    applied = [r for r in records if r["details"]["refused"] is None]
    assert len(applied) == 1, records
    (record,) = applied
    who = (record["actor"], record["target_type"], record["group_id"])
    assert who == ("admin", "workflow_run", flow.group)
    assert record["details"]["workflow_id"] == workflow_id


async def test_rerun_from_a_node_of_a_succeeded_run_runs_it_and_its_descendants_again(
    flow: WorkflowEnv,
) -> None:
    # A -> B -> C, and A -> D: re-run from B runs B and C again and keeps A and D.
    step = await flow.job("step")
    nodes = [{"key": k, "job_id": step, "params": k} for k in "ABCD"]
    edges = [{"from": "A", "to": "B"}, {"from": "B", "to": "C"}, {"from": "A", "to": "D"}]
    wid = await flow.workflow("rerun", nodes, edges)
    first = await flow.ended((await flow.admin.workflows.trigger(wid))["workflow_run_id"])
    assert first["state"] == "success", first["nodes"]
    before = _by_key(first)
    assert [before[k]["attempt"] for k in "ABCD"] == [1, 1, 1, 1]
    run_id = first["id"]

    answer = await flow.admin.workflows.rerun_from(run_id, "B", round=first["round"])
    # The answer is the run as the repair left it (B's job run may already be done by then).
    assert answer["round"] == first["round"] + 1 and answer["state"] in ("running", "success"), answer
    assert [(n["key"], n["attempt"]) for n in answer["nodes"]][:2] == [("A", 1), ("B", 2)], answer["nodes"]
    run = await flow.ended(run_id)
    assert run["state"] == "success" and run["round"] == first["round"] + 1, run["nodes"]
    after = _by_key(run)
    assert states(run) == dict.fromkeys("ABCD", "success")
    # Kept: the same attempt and job run as before.
    for key in "AD":
        assert (after[key]["attempt"], after[key]["run_id"]) == (1, before[key]["run_id"]), after[key]
    # Run again: the next attempt, each a new job run of the run log that succeeded.
    for key in "BC":
        assert after[key]["attempt"] == 2 and after[key]["run_id"] != before[key]["run_id"], after[key]
        job_run = await flow.admin.runs.get(after[key]["run_id"])
        fired = (job_run["trigger_type"], job_run["executor_param"], job_run["handle_code"])
        assert fired == ("WORKFLOW", key, 200)
    order = flow.order()
    assert [order.count(f"{k} start") for k in "ABCD"] == [1, 2, 2, 1], order
    starts_b = [i for i, line in enumerate(order) if line == "B start"]
    starts_c = [i for i, line in enumerate(order) if line == "C start"]
    ends_b = [i for i, line in enumerate(order) if line == "B end"]
    assert starts_b[1] > starts_c[0] and starts_c[1] > ends_b[1], order  # after the first run, B then C

    # The same repair again (the round it read is over) is refused and runs nothing.
    with pytest.raises(AdminApiError) as refused:
        await flow.admin.workflows.rerun_from(run_id, "B", round=first["round"])
    assert refused.value.status == 409 and f"round {run['round']}" in str(refused.value)
    assert flow.order() == order and (await flow.admin.workflows.run(run_id))["state"] == "success"
    await _rerun_is_audited(flow, run_id, wid)


async def test_rerun_from_above_a_failed_node_repairs_the_run(flow: WorkflowEnv) -> None:
    # A -> B -> C (C fails until flaky.ok exists): re-run from B runs B (which had succeeded) and
    # C again; A is kept.
    step, flaky = await flow.job("step"), await flow.job("flaky")
    nodes = [{"key": k, "job_id": flaky if k == "C" else step, "params": k} for k in "ABC"]
    wid = await flow.workflow("chain", nodes, [{"from": "A", "to": "B"}, {"from": "B", "to": "C"}])
    first = await flow.ended((await flow.admin.workflows.trigger(wid))["workflow_run_id"])
    assert first["state"] == "failed", first["nodes"]
    assert states(first) == {"A": "success", "B": "success", "C": "failed"}
    before = _by_key(first)
    run_id = first["id"]
    # An unknown node is refused (409 naming it) and changes nothing.
    with pytest.raises(AdminApiError) as unknown:
        await flow.admin.workflows.rerun_from(run_id, "nope", round=first["round"])
    assert unknown.value.status == 409 and "no node 'nope'" in str(unknown.value)

    (flow.home / "flaky.ok").write_text("", encoding="utf-8")
    await flow.admin.workflows.rerun_from(run_id, "B", round=first["round"])
    run = await flow.ended(run_id)
    assert run["state"] == "success" and run["round"] == first["round"] + 1, run["nodes"]
    after = _by_key(run)
    assert (after["A"]["attempt"], after["A"]["run_id"]) == (1, before["A"]["run_id"])
    assert [after[k]["attempt"] for k in "BC"] == [2, 2]
    assert after["C"]["run_id"] != before["C"]["run_id"] and after["B"]["run_id"] != before["B"]["run_id"]
    order = flow.order()
    first_round = ["A start", "A end", "B start", "B end", "C start", "C failed"]
    assert order == [*first_round, "B start", "B end", "C start", "C end"], order
    await _rerun_is_audited(flow, run_id, wid)
