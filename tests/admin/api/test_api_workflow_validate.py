"""POST /api/v1/workflows/validate: a save's checks and answers (create's, or with
``workflow_id`` an update's), with nothing stored and nothing audited."""

from __future__ import annotations

from typing import Any

import httpx

from jobring.admin.security.roles import Role
from jobring.admin.security.sessions import CSRF_HEADER
from jobring.admin.services.workflows import WorkflowDriver
from jobring.admin.store import Store
from tests.admin.api_harness import PASSWORD, ApiEnv, api_env


def _driver(env: ApiEnv) -> None:
    assert env.services.trigger is not None
    env.services.workflows = WorkflowDriver(env.store, env.services.trigger, env.services.executors,
                                            env.clock, node_id="api-test")


def _body(group: int, nodes: list[dict[str, Any]], edges: list[dict[str, Any]]) -> dict[str, Any]:
    return {"name": "w", "job_group": group, "nodes": nodes, "edges": edges}


async def _audited(env: ApiEnv) -> int:
    return (await env.store.audit.list(limit=500)).total


async def _same_as_create(http: httpx.AsyncClient, body: dict[str, Any]) -> httpx.Response:
    """The validate answer, after checking that a create of ``body`` answers the same."""
    checked = await http.post("/workflows/validate", json=body)
    created = await http.post("/workflows", json=body)
    assert (checked.status_code, checked.json()) == (created.status_code, created.json())
    return checked


async def test_a_valid_graph_is_summed_up_and_nothing_is_stored_or_audited(sqlite_store: Store) -> None:
    async with api_env(sqlite_store) as env, env.client("op_in") as http:
        _driver(env)
        job = await env.add_job(env.group_a)
        body = _body(env.group_a, [{"key": "load", "job_id": job}, {"key": "route", "kind": "decision"},
                                   {"key": "extract", "job_id": job}, {"key": "small", "job_id": job},
                                   {"key": "side", "job_id": job}],
                     [{"from": "extract", "to": "load"}, {"from": "load", "to": "route"},
                      {"from": "route", "to": "small", "when": "rows < 10"}, {"from": "side", "to": "load"}])
        audited = await _audited(env)
        answer = await http.post("/workflows/validate", json=body)
        assert answer.status_code == 200, answer.text
        summary = answer.json()
        assert {k: summary[k] for k in ("valid", "nodes", "edges")} == {"valid": True, "nodes": 5, "edges": 4}
        assert sorted(summary["roots"]) == ["extract", "side"]
        order = summary["order"]
        assert sorted(order) == ["extract", "load", "route", "side", "small"]
        for edge in body["edges"]:
            assert order.index(edge["from"]) < order.index(edge["to"])
        assert (await http.get("/workflows")).json()["total"] == 0
        assert await _audited(env) == audited
        # GET /workflows/validate is not a workflow named "validate" (nor a server error).
        assert (await http.get("/workflows/validate")).status_code == 422


async def test_refusals_are_the_creates_naming_the_field_and_the_node(sqlite_store: Store) -> None:
    async with api_env(sqlite_store) as env, env.client("op_in") as http:
        _driver(env)
        job = await env.add_job(env.group_a)
        cases = [
            (_body(env.group_a, [{"key": "a", "job_id": job}, {"key": "b", "job_id": job}],
                   [{"from": "a", "to": "b"}, {"from": "b", "to": "a"}]), "cycle", "node 'b'"),
            (_body(env.group_a, [{"key": "a", "job_id": job}, {"key": "b", "job_id": 99_999}],
                   [{"from": "a", "to": "b"}]), "job 99999 does not exist", "node 'b'"),
            (_body(env.group_a, [{"key": "a", "job_id": job}, {"key": "b", "job_id": job},
                                 {"key": "c", "job_id": job}], [{"from": "a", "to": "b"}]),
             "unreachable", "node 'c'"),
            (_body(env.group_a, [{"key": "a", "kind": "subworkflow", "workflow_id": 1}], []),
             "workflow 1 does not exist", "node 'a'"),
        ]
        for body, expected, node in cases:
            answer = await _same_as_create(http, body)
            assert answer.status_code == 422, answer.text
            error, field = answer.json()["error"], answer.json()["field"]
            assert expected in error and node in error and field and error.startswith(field), answer.json()
        assert (await http.get("/workflows")).json()["total"] == 0


async def test_rights_over_the_groups_get_the_creates_answer(sqlite_store: Store) -> None:
    async with api_env(sqlite_store) as env:
        _driver(env)
        mine, theirs = await env.add_job(env.group_a), await env.add_job(env.group_b)
        ours = _body(env.group_a, [{"key": "a", "job_id": mine}], [])
        async with env.client("op_out") as other:  # an operator of group B only: A is not there
            refused = await _same_as_create(other, ours)
            assert refused.status_code == 404, refused.text
            assert refused.json()["error"] == f"executor group {env.group_a} not found"
        async with env.client("viewer") as viewer:  # a viewer of group A
            refused = await _same_as_create(viewer, ours)
            assert refused.status_code == 403, refused.text
        async with env.client("op_in") as http:  # group A's operator, a node running B's job
            body = _body(env.group_a, [{"key": "a", "job_id": mine}, {"key": "b", "job_id": theirs}],
                         [{"from": "a", "to": "b"}])
            refused = await _same_as_create(http, body)
            assert refused.status_code == 422 and refused.json()["field"] == "nodes[1].job_id", refused.text
        async with env.client("admin") as admin:  # even an admin: only the workflow's own group's jobs
            refused = await _same_as_create(admin, _body(env.group_a, [{"key": "b", "job_id": theirs}], []))
            assert refused.status_code == 422 and "workflow's group" in refused.json()["error"]
        async with env.client() as anonymous:
            assert (await anonymous.post("/workflows/validate", json=ours)).status_code == 401
        assert (await env.store.workflows.list(None, 0, 10))[1] == 0


async def test_a_session_needs_its_csrf_token_as_for_other_writes(sqlite_store: Store) -> None:
    async with api_env(sqlite_store) as env, env.client() as http:
        _driver(env)
        await env.add_user("alice", Role.OPERATOR, [env.group_a], password=PASSWORD)
        job = await env.add_job(env.group_a)
        body = _body(env.group_a, [{"key": "a", "job_id": job}], [])
        login = await http.post("/auth/login", json={"username": "alice", "password": PASSWORD})
        assert login.status_code == 200, login.text
        refused = await http.post("/workflows/validate", json=body)
        assert refused.status_code == 403, refused.text
        checked = await http.post("/workflows/validate", json=body,
                                  headers={CSRF_HEADER: login.json()["csrf_token"]})
        assert checked.status_code == 200 and checked.json()["valid"] is True, checked.text


async def test_with_a_workflow_id_it_is_the_updates_check(sqlite_store: Store) -> None:
    async with api_env(sqlite_store) as env, env.client("op_in") as http:
        _driver(env)
        job, theirs = await env.add_job(env.group_a), await env.add_job(env.group_b)
        body = _body(env.group_a, [{"key": "a", "job_id": job}], [])
        wf = (await http.post("/workflows", json=body)).json()
        saved = await http.put(f"/workflows/{wf['id']}", json={**body, "version": 1})
        assert saved.status_code == 200 and saved.json()["version"] == 2
        audited = await _audited(env)

        async def same_as_update(as_edit: dict[str, Any], workflow_id: int = wf["id"],
                                 client: httpx.AsyncClient = http) -> httpx.Response:
            query = {"workflow_id": workflow_id}
            checked = await client.post("/workflows/validate", params=query, json=as_edit)
            if checked.status_code != 200:
                updated = await client.put(f"/workflows/{workflow_id}", json=as_edit)
                assert (checked.status_code, checked.json()) == (updated.status_code, updated.json())
            return checked

        ok = await same_as_update({**body, "name": "renamed", "version": 2})
        assert ok.status_code == 200 and ok.json()["order"] == ["a"], ok.text
        # A sub-workflow node running this very workflow: fine for a new workflow, a loop for this one.
        looping = _body(env.group_a, [{"key": "a", "job_id": job},
                                      {"key": "again", "kind": "subworkflow", "workflow_id": wf["id"]}],
                        [{"from": "a", "to": "again"}])
        assert (await http.post("/workflows/validate", json=looping)).status_code == 200
        loop = await same_as_update(looping)
        assert loop.status_code == 422 and "may not recurse" in loop.json()["error"], loop.text
        assert "node 'again'" in loop.json()["error"]
        stale = await same_as_update({**body, "version": 1})
        assert stale.status_code == 409 and stale.json()["field"] == "version", stale.text
        missing = await same_as_update(body, workflow_id=wf["id"] + 100)
        assert missing.status_code == 404, missing.text
        async with env.client("op_out") as other:  # B's operator: A's workflow is not there
            theirs_body = _body(env.group_b, [{"key": "a", "job_id": theirs}], [])
            hidden = await same_as_update(theirs_body, client=other)
            assert hidden.status_code == 404, hidden.text
        moved = await same_as_update({**body, "job_group": env.group_b})  # op_in may not operate B
        assert moved.status_code == 404 and moved.json()["error"] == f"executor group {env.group_b} not found"
        got = (await http.get(f"/workflows/{wf['id']}")).json()
        assert (got["name"], got["version"], len(got["nodes"])) == ("w", 2, 1)
        graph = {"nodes": body["nodes"], "edges": []}
        declared = await env.store.workflows.create("in code", env.group_a, "", graph, None,
                                                    env.clock.now_ms(), managed_by="code")
        in_code = await same_as_update(body, workflow_id=declared)
        assert in_code.status_code == 409 and in_code.json()["field"] == "managed_by", in_code.text
        assert await _audited(env) == audited
