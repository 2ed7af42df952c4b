"""/api/v1 and sub-workflow nodes: a sub-workflow must exist and be in the workflow's own group;
loops (A runs B runs A) are refused naming the node; a workflow of another group is refused as
if missing; the run page names the child run and the child names its parent; a child run is
repaired through its parent only; a workflow declared in code is read-only."""

from __future__ import annotations

from typing import Any

from jobring.admin.store import Store
from jobring.admin.store.workflows import MANAGED_BY_CODE
from tests.admin.api.test_api_workflows import _body, _driver
from tests.admin.api_harness import api_env


async def _create(http: Any, body: dict[str, Any]) -> int:
    answer = await http.post("/workflows", json=body)
    assert answer.status_code == 201, answer.text
    return int(answer.json()["id"])


async def test_sub_workflow_refusals_name_the_node(sqlite_store: Store) -> None:
    async with api_env(sqlite_store) as env, env.client("admin") as http:
        _driver(env)
        job = await env.add_job(env.group_a)
        b = await _create(http, _body(env, [{"key": "b1", "job_id": job}], []))
        a = await _create(http, _body(env, [{"key": "a1", "job_id": job},
                                            {"key": "run_b", "kind": "subworkflow", "workflow_id": b}],
                                      [{"from": "a1", "to": "run_b"}]))
        # B may not run A: A runs B.
        loop = {**_body(env, [{"key": "b1", "job_id": job},
                              {"key": "back", "kind": "subworkflow", "workflow_id": a}],
                        [{"from": "b1", "to": "back"}])}
        refused = await http.put(f"/workflows/{b}", json=loop)
        assert refused.status_code == 422, refused.text
        assert refused.json()["field"] == "nodes[1].workflow_id"
        assert "(node 'back')" in refused.json()["error"] and "may not recurse" in refused.json()["error"]
        # Itself.
        me = _body(env, [{"key": "me", "kind": "subworkflow", "workflow_id": a}], [])
        refused = await http.put(f"/workflows/{a}", json=me)
        assert refused.status_code == 422 and "(node 'me')" in refused.json()["error"]
        # Another group's workflow: as if it did not exist.
        theirs_job = await env.add_job(env.group_b)
        theirs = await _create(http, {**_body(env, [{"key": "t", "job_id": theirs_job}], []),
                                      "job_group": env.group_b})
        refused = await http.post("/workflows", json=_body(
            env, [{"key": "other", "kind": "subworkflow", "workflow_id": theirs}], []))
        assert refused.status_code == 422 and "(node 'other')" in refused.json()["error"]
        assert "does not exist or is not in this workflow's group" in refused.json()["error"]


async def test_the_run_page_links_parent_and_child_and_repairs_go_through_the_parent(
    sqlite_store: Store,
) -> None:
    async with api_env(sqlite_store) as env, env.client("op_in") as http:
        _driver(env)
        job = await env.add_job(env.group_a)
        child = await _create(http, _body(env, [{"key": "c", "job_id": job}], []))
        parent = await _create(http, _body(env, [{"key": "sub", "kind": "subworkflow", "workflow_id": child}],
                                           []))
        run_id = (await http.post(f"/workflows/{parent}/trigger", json={})).json()["workflow_run_id"]
        run = (await http.get(f"/workflow-runs/{run_id}")).json()
        (node,) = run["nodes"]
        assert (node["kind"], node["workflow_id"], node["state"]) == ("subworkflow", child, "running")
        child_run = (await http.get(f"/workflow-runs/{node['run_id']}")).json()
        assert child_run["parent_run_id"] == run_id and child_run["workflow_id"] == child
        refused = await http.post(f"/workflow-runs/{child_run['id']}/retry")
        assert refused.status_code == 409 and f"workflow run {run_id}" in refused.json()["error"]
        stopped = await http.post(f"/workflow-runs/{run_id}/stop")
        assert stopped.status_code == 200 and stopped.json()["state"] == "stopped"
        assert (await http.get(f"/workflow-runs/{child_run['id']}")).json()["state"] == "stopped"


async def test_a_workflow_declared_in_code_is_read_only(sqlite_store: Store) -> None:
    async with api_env(sqlite_store) as env, env.client("admin") as http:
        _driver(env)
        job = await env.add_job(env.group_a)
        body = _body(env, [{"key": "a", "job_id": job}], [])
        definition = {"nodes": body["nodes"], "edges": []}
        wid = await env.store.workflows.create("declared", env.group_a, "", definition, "executor:x", 0,
                                               managed_by=MANAGED_BY_CODE)
        shown = (await http.get(f"/workflows/{wid}")).json()
        assert shown["managed_by"] == "code"
        refused = await http.put(f"/workflows/{wid}", json=body)
        assert refused.status_code == 409 and refused.json()["field"] == "managed_by"
        assert (await http.post(f"/workflows/{wid}/trigger", json={})).status_code == 200


async def test_a_tree_of_sub_workflows_multiplying_past_the_budget_is_refused(sqlite_store: Store) -> None:
    """Nesting is capped at five, but each level may hold up to MAX_NODES sub-workflow nodes:
    without a budget over the whole tree one trigger could start 100**3 job runs (1000**5 at
    most), a denial of service open to any writer of one group."""
    async with api_env(sqlite_store) as env, env.client("admin") as http:
        _driver(env)
        job = await env.add_job(env.group_a)
        below = await _create(http, _body(env, [{"key": "leaf", "job_id": job}], []))

        def fan(wid: int) -> dict[str, Any]:
            nodes = [{"key": f"s{i}", "kind": "subworkflow", "workflow_id": wid} for i in range(100)]
            return _body(env, nodes, [{"from": "s0", "to": f"s{i}"} for i in range(1, 100)])

        for _ in range(2):  # 100 job runs, then 10,000: within the budget
            below = await _create(http, fan(below))
        refused = await http.post("/workflows", json=fan(below))  # 1,000,000
        assert refused.status_code == 422, refused.text
        # s0-s9 start 100,000 job runs: s10 passes the budget.
        assert refused.json()["field"] == "nodes[10].workflow_id", refused.text
        assert "(node 's10')" in refused.json()["error"] and "more than 100,000 job runs" in refused.text
