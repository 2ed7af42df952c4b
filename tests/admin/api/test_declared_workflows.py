"""Workflows declared in executor code (``workflows`` of ``api/jobring/declareJobs``): created
managed by code with handlers resolved to the group's jobs, saved as a new version only when
the declaration changed, read-only in the API, a console workflow of the same name never taken
over, one no longer declared detached, refusals naming the workflow and the node, and an older
executor that sends no ``workflows`` leaves them alone."""

from __future__ import annotations

from typing import Any

from jobring.admin.store import Store
from tests.admin.api.test_api_workflows import _body, _driver
from tests.admin.api_harness import ACCESS_TOKEN, ApiEnv, api_env

PATH = "/api/jobring/declareJobs"
JOBS = [{"handler": "extract", "fields": {}, "start": True}, {"handler": "load", "fields": {}, "start": True}]
NIGHTLY = {"name": "nightly", "description": "every night",
           "nodes": [{"key": "e", "job": "extract", "retries": 1}, {"key": "l", "job": "load"}],
           "edges": [{"from": "e", "to": "l"}]}


async def declare(env: ApiEnv, workflows: list[dict[str, Any]] | None) -> dict[str, Any]:
    body: dict[str, Any] = {"appname": "app-a", "declarations": JOBS}
    if workflows is not None:
        body["workflows"] = workflows
    async with env.raw_client() as http:
        r = await http.post(PATH, json=body, headers={"XXL-JOB-ACCESS-TOKEN": ACCESS_TOKEN})
    assert r.status_code == 200, r.text
    answer: dict[str, Any] = r.json()
    return answer


async def test_a_declared_workflow_is_created_versioned_and_read_only(sqlite_store: Store) -> None:
    async with api_env(sqlite_store) as env, env.client("admin") as http:
        _driver(env)
        answer = await declare(env, [NIGHTLY])
        assert answer["code"] == 200, answer
        (wid,) = answer["content"]["workflows"]["created"]
        shown = (await http.get(f"/workflows/{wid}")).json()
        jobs = {j.executor_handler: j.id for j in await env.store.jobs.in_group(env.group_a)}
        assert (shown["name"], shown["managed_by"], shown["version"]) == ("nightly", "code", 1)
        assert shown["nodes"] == [{"key": "e", "job_id": jobs["extract"], "retries": 1},
                                  {"key": "l", "job_id": jobs["load"]}]
        # The same declaration again: no new version.
        again = await declare(env, [NIGHTLY])
        assert again["content"]["workflows"] == {"created": [], "updated": [], "detached": [], "skipped": [],
                                                 "schedules": []}
        changed = {**NIGHTLY, "edges": [], "nodes": [{"key": "e", "job": "extract"}]}
        assert (await declare(env, [changed]))["content"]["workflows"]["updated"] == [wid]
        assert (await http.get(f"/workflows/{wid}")).json()["version"] == 2
        edit = _body(env, [{"key": "x", "job_id": jobs["load"]}], [])
        refused = await http.put(f"/workflows/{wid}", json=edit)
        assert refused.status_code == 409
        # No longer declared: detached, and then the console may edit it.
        assert (await declare(env, []))["content"]["workflows"]["detached"] == [wid]
        assert (await http.get(f"/workflows/{wid}")).json()["managed_by"] is None
        edited = await http.put(f"/workflows/{wid}", json=edit)
        assert edited.status_code == 200, edited.text
        # An executor that sends no workflows (an older one) leaves them alone.
        assert "workflows" not in (await declare(env, None))["content"]


async def test_a_console_workflow_of_that_name_is_not_taken_over(sqlite_store: Store) -> None:
    async with api_env(sqlite_store) as env, env.client("admin") as http:
        _driver(env)
        await declare(env, [])
        job = (await env.store.jobs.in_group(env.group_a))[0].id
        mine = await http.post("/workflows", json={**_body(env, [{"key": "a", "job_id": job}], []),
                                                   "name": "nightly"})
        answer = await declare(env, [NIGHTLY])
        (skipped,) = answer["content"]["workflows"]["skipped"]
        assert skipped["workflow_id"] == mine.json()["id"] and "console" in skipped["reason"]
        assert (await http.get(f"/workflows/{mine.json()['id']}")).json()["version"] == 1


async def test_refusals_name_the_workflow_and_the_node(sqlite_store: Store) -> None:
    async with api_env(sqlite_store) as env:
        _driver(env)
        part = {"name": "part", "nodes": [{"key": "p", "job": "load"}]}
        cases = [
            ({**NIGHTLY, "nodes": [{"key": "e", "job": "nope"}], "edges": []}, "nodes[0].job", "'e'"),
            ({**NIGHTLY, "nodes": [{"key": "e", "job_id": 1}], "edges": []}, "nodes[0]", "'e'"),
            ({**NIGHTLY, "nodes": [{"key": "s", "kind": "subworkflow", "workflow": "later"}], "edges": []},
             "nodes[0].workflow", "declare it first"),
            ({**NIGHTLY, "edges": [{"from": "e", "to": "l"}, {"from": "l", "to": "e"}]}, "edges[0]", "cycle"),
        ]
        for workflow, field, text in cases:
            answer = await declare(env, [workflow])
            assert answer["code"] == 500 and answer["content"]["field"] == field, answer
            assert answer["content"]["workflow"] == "nightly" and text in answer["msg"], answer
        # A sub-workflow declared first is found by name.
        runs_part = {"name": "outer", "nodes": [{"key": "s", "kind": "subworkflow", "workflow": "part"}]}
        answer = await declare(env, [part, runs_part])
        assert answer["code"] == 200 and len(answer["content"]["workflows"]["created"]) == 2, answer
