"""/api/v1/workflows and /workflow-runs: validation answers naming the field and node, the
group checks per node's job, trigger, the run page, repairs and audit entries."""

from __future__ import annotations

from typing import Any

import pytest

from jobring.admin.services.workflows import WorkflowDriver
from jobring.admin.store import Store
from tests.admin.api_harness import ApiEnv, api_env


def _driver(env: ApiEnv) -> None:
    assert env.services.trigger is not None
    env.services.workflows = WorkflowDriver(env.store, env.services.trigger, env.services.executors,
                                            env.clock, node_id="api-test")


def _body(env: ApiEnv, nodes: list[dict[str, Any]], edges: list[dict[str, Any]]) -> dict[str, Any]:
    return {"name": "w", "job_group": env.group_a, "nodes": nodes, "edges": edges}


async def test_refusals_name_the_field_and_the_node(sqlite_store: Store) -> None:
    async with api_env(sqlite_store) as env, env.client("op_in") as http:
        _driver(env)
        mine, theirs = await env.add_job(env.group_a), await env.add_job(env.group_b)
        cases = [
            (_body(env, [{"key": "a", "job_id": mine}, {"key": "b", "job_id": mine}],
                   [{"from": "a", "to": "b"}, {"from": "b", "to": "a"}]), "cycle"),
            (_body(env, [{"key": "a", "job_id": 99_999}], []), "job 99999 does not exist or is in a group"),
            (_body(env, [{"key": "a", "job_id": theirs}], []), "does not exist or is in a group you may not"),
            (_body(env, [{"key": "a", "job_id": mine}, {"key": "b", "job_id": mine},
                         {"key": "c", "job_id": mine}], [{"from": "a", "to": "b"}]), "'c'"),
            (_body(env, [{"key": "a", "job_id": mine, "join": "sometimes"}], []), "join"),
            (_body(env, [{"key": "a", "kind": "subworkflow", "workflow_id": 1}], []),
             "workflow 1 does not exist"),
        ]
        for body, expected in cases:
            answer = await http.post("/workflows", json=body)
            assert answer.status_code == 422, answer.text
            assert expected in answer.json()["error"] and answer.json()["field"], answer.json()
        assert (await http.get("/workflows")).json()["total"] == 0
        async with env.client("viewer") as viewer:
            answer = await viewer.post("/workflows", json=_body(env, [{"key": "a", "job_id": mine}], []))
            assert answer.status_code == 403


async def test_a_missing_job_and_another_groups_job_get_the_same_refusal(sqlite_store: Store) -> None:
    async with api_env(sqlite_store) as env, env.client("op_in") as http:
        _driver(env)
        theirs = await env.add_job(env.group_b)
        missing = theirs + 1000
        answers = [(await http.post("/workflows", json=_body(env, [{"key": "a", "job_id": job}], []))).json()
                   for job in (theirs, missing)]
        assert answers[0]["error"] == answers[1]["error"].replace(str(missing), str(theirs))
        assert f"group {env.group_b}" not in answers[0]["error"]


async def test_names_and_descriptions_are_single_line_text(sqlite_store: Store) -> None:
    async with api_env(sqlite_store) as env, env.client("op_in") as http:
        _driver(env)
        job = await env.add_job(env.group_a)
        nodes = [{"key": "a", "job_id": job}]
        for field, value in (("name", "evil\r\nX-Injected: 1"), ("name", "a\u2028b"), ("name", "nul\x00"),
                             ("description", "d\x1b[31m"), ("description", "two\nlines")):
            answer = await http.post("/workflows", json={**_body(env, nodes, []), field: value})
            assert answer.status_code == 422, (field, value, answer.text)
            assert field in answer.text
        created = await http.post("/workflows", json=_body(env, nodes, []))
        answer = await http.put(f"/workflows/{created.json()['id']}",
                                json={**_body(env, nodes, []), "name": "x\ry"})
        assert answer.status_code == 422
        assert (await http.get("/workflows")).json()["items"][0]["name"] == "w"


async def test_nodes_must_run_the_owning_groups_jobs_even_for_admins(sqlite_store: Store) -> None:
    async with api_env(sqlite_store) as env, env.client("admin") as admin:
        _driver(env)
        mine, theirs = await env.add_job(env.group_a), await env.add_job(env.group_b)
        body = _body(env, [{"key": "a", "job_id": mine}, {"key": "b", "job_id": theirs, "params": "secret"}],
                     [{"from": "a", "to": "b"}])
        answer = await admin.post("/workflows", json=body)
        assert answer.status_code == 422, answer.text
        assert answer.json()["field"] == "nodes[1].job_id"
        assert "'b'" in answer.json()["error"] and "workflow's group" in answer.json()["error"]
        created = await admin.post("/workflows", json=_body(env, [{"key": "a", "job_id": mine}], []))
        assert created.status_code == 201
        move = {**_body(env, [{"key": "a", "job_id": mine}], []), "job_group": env.group_b}
        moved = await admin.put(f"/workflows/{created.json()['id']}", json=move)
        assert moved.status_code == 422 and moved.json()["field"] == "nodes[0].job_id"


async def test_trigger_observe_stop_retry_and_audit(sqlite_store: Store) -> None:
    async with api_env(sqlite_store) as env, env.client("op_in") as http:
        _driver(env)
        job = await env.add_job(env.group_a)
        body = _body(env, [{"key": "a", "job_id": job, "params": "p-{{ day }}"}, {"key": "b", "job_id": job}],
                     [{"from": "a", "to": "b"}])
        created = await http.post("/workflows", json=body)
        assert created.status_code == 201, created.text
        wf = created.json()
        assert (wf["version"], [n["key"] for n in wf["nodes"]]) == (1, ["a", "b"])
        bad = await http.post(f"/workflows/{wf['id']}/trigger", json={"params": []})
        assert bad.status_code == 422  # params must be an object
        started = await http.post(f"/workflows/{wf['id']}/trigger", json={"params": {"day": "0101"}})
        assert started.status_code == 200, started.text
        run_id = started.json()["workflow_run_id"]
        run = (await http.get(f"/workflow-runs/{run_id}")).json()
        assert run["state"] == "running" and run["context"] == {"day": "0101"}
        node_a = run["nodes"][0]
        assert (node_a["key"], node_a["state"], node_a["attempt"]) == ("a", "running", 1)
        fired = [c.body for c in env.double.runs()]
        assert fired[-1]["executorParams"] == "p-0101" and fired[-1]["logId"] == node_a["run_id"]
        stopped = await http.post(f"/workflow-runs/{run_id}/stop", json={"round": run["round"]})
        assert stopped.status_code == 200 and stopped.json()["state"] == "stopped"
        again = await http.post(f"/workflow-runs/{run_id}/stop", json={"round": run["round"]})
        assert again.status_code == 409
        retried = await http.post(f"/workflow-runs/{run_id}/retry")
        assert retried.status_code == 200 and retried.json()["state"] == "running"
        assert retried.json()["nodes"][0]["attempt"] == 2
        listed = (await http.get("/workflow-runs", params={"workflow_id": wf["id"]})).json()
        assert run_id in [r["id"] for r in listed["items"]]
        busy = await http.delete(f"/workflows/{wf['id']}")
        assert busy.status_code == 409
        async with env.client("admin") as admin:
            events = (await admin.get("/audit", params={"limit": 50})).json()["items"]
        actions = [e["action"] for e in events]
        wanted = {"workflow.create", "workflow.trigger", "workflow.run_stop", "workflow.run_retry"}
        assert wanted <= set(actions)
        # The second stop was refused (409): audited as a failure, with why.
        stops = [(e["outcome"], e["details"]["refused"] is None) for e in events
                 if e["action"] == "workflow.run_stop"]
        assert sorted(stops) == [("failure", False), ("success", True)], stops
        # Another group's operator: as if it did not exist.
        async with env.client("op_out") as other:
            assert (await other.get(f"/workflows/{wf['id']}")).status_code == 404
            assert (await other.get(f"/workflow-runs/{run_id}")).status_code == 404
            assert (await other.post(f"/workflow-runs/{run_id}/stop")).status_code == 404


async def test_saving_refuses_more_fan_out_nodes_than_a_run_may_hold(sqlite_store: Store) -> None:
    async with api_env(sqlite_store) as env, env.client("op_in") as http:
        _driver(env)
        job = await env.add_job(env.group_a)
        fanouts = [{"key": f"f{i}", "kind": "fanout", "job_id": job, "items": "xs", "parallelism": 1}
                   for i in range(11)]
        body = _body(env, [{"key": "root", "job_id": job}, *fanouts],
                     [{"from": "root", "to": f"f{i}"} for i in range(11)])
        answer = await http.post("/workflows", json=body)
        assert answer.status_code == 422, answer.text
        assert answer.json()["field"] == "nodes[11].kind" and "'f10'" in answer.json()["error"]


async def test_a_run_started_just_before_the_delete_is_not_lost(
    sqlite_store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with api_env(sqlite_store) as env, env.client("op_in") as http:
        _driver(env)
        job = await env.add_job(env.group_a)
        wf = (await http.post("/workflows", json=_body(env, [{"key": "a", "job_id": job}], []))).json()
        store = env.store.workflows
        real_delete = store.delete
        late: list[int] = []

        async def trigger_lands_first(workflow_id: int, **kwargs: Any) -> bool:
            # A trigger on another admin stores its run after any check made before the delete.
            late.append(await store.start_run(workflow_id, 1, env.group_a, "running", {}, "bob", 1, []))
            return await real_delete(workflow_id, **kwargs)

        monkeypatch.setattr(store, "delete", trigger_lands_first)
        answer = await http.delete(f"/workflows/{wf['id']}")
        assert answer.status_code == 409, answer.text
        assert str(late[0]) in answer.json()["error"]
        assert await store.get_run(late[0]) is not None and await store.get(wf["id"]) is not None


async def test_a_trigger_of_a_workflow_deleted_meanwhile_answers_404(
    sqlite_store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with api_env(sqlite_store) as env, env.client("op_in") as http:
        _driver(env)
        job = await env.add_job(env.group_a)
        wf = (await http.post("/workflows", json=_body(env, [{"key": "a", "job_id": job}], []))).json()
        store = env.store.workflows
        real_start = store.start_run

        async def deleted_first(*args: Any, **kwargs: Any) -> int:
            await store.delete(wf["id"])
            return await real_start(*args, **kwargs)

        monkeypatch.setattr(store, "start_run", deleted_first)
        answer = await http.post(f"/workflows/{wf['id']}/trigger", json={"params": {}})
        assert answer.status_code == 404, answer.text
        assert (await store.list_runs(workflow_id=wf["id"]))[1] == 0


async def test_writes_checked_on_one_group_leave_the_workflow_alone_once_moved(
    sqlite_store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    # op_in may write group A only; an admin moves the workflow to B between op_in's check and
    # op_in's write: the write finds nothing (checked in it) and B's workflow stays as it is.
    async with api_env(sqlite_store) as env, env.client("op_in") as http:
        _driver(env)
        job_a, job_b = await env.add_job(env.group_a), await env.add_job(env.group_b)
        wf = (await http.post("/workflows", json=_body(env, [{"key": "a", "job_id": job_a}], []))).json()
        workflows, schedules = env.store.workflows, env.store.workflow_schedules
        moves: list[int] = []

        async def move(name: str, group: int, job: int) -> None:
            current = await workflows.get(wf["id"])
            assert current is not None
            graph = {"nodes": [{"key": "a", "job_id": job}], "edges": []}
            moves.append(await workflows.update(wf["id"], name, group, "", graph, "admin", 1,
                                                current.version) or 0)

        def moving_first(real: Any) -> Any:
            async def write(*args: Any, **kwargs: Any) -> Any:
                await move("theirs", env.group_b, job_b)
                return await real(*args, **kwargs)
            return write

        schedule = {"schedule_type": "FIX_RATE", "schedule_conf": "60", "enabled": True}
        monkeypatch.setattr(schedules, "put", moving_first(schedules.put))
        answer = await http.put(f"/workflows/{wf['id']}/schedule", json=schedule)
        assert answer.status_code == 404, answer.text
        assert await schedules.get(wf["id"]) is None
        monkeypatch.undo()
        await move("w", env.group_a, job_a)  # back in A
        monkeypatch.setattr(workflows, "delete", moving_first(workflows.delete))
        answer = await http.delete(f"/workflows/{wf['id']}")
        assert answer.status_code == 404, answer.text
        kept = await workflows.get(wf["id"])
        assert kept is not None and (kept.name, kept.job_group) == ("theirs", env.group_b)
        assert moves == [2, 3, 4]


async def test_an_edit_from_a_version_that_is_not_the_current_one_is_refused(
    sqlite_store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with api_env(sqlite_store) as env, env.client("op_in") as http:
        _driver(env)
        job = await env.add_job(env.group_a)
        body = _body(env, [{"key": "a", "job_id": job}], [])
        wf = (await http.post("/workflows", json=body)).json()
        saved = await http.put(f"/workflows/{wf['id']}", json={**body, "name": "x", "version": 1})
        assert saved.status_code == 200 and saved.json()["version"] == 2
        for version in (1, 3, 7):  # older, or one never saved (the next one, guessed)
            answer = await http.put(f"/workflows/{wf['id']}", json={**body, "name": "y", "version": version})
            assert answer.status_code == 409 and answer.json()["field"] == "version", answer.text
        got = (await http.get(f"/workflows/{wf['id']}")).json()
        assert (got["name"], got["version"]) == ("x", 2)
        # The guessed next version saved meanwhile by an admin moving it to group B: the edit,
        # checked on group A at version 2, must not land on B's version 3.
        workflows, theirs = env.store.workflows, await env.add_job(env.group_b)
        real_update = workflows.update

        async def moved_first(*args: Any, **kwargs: Any) -> int | None:
            await real_update(wf["id"], "theirs", env.group_b, "", {"nodes": [{"key": "a", "job_id": theirs}],
                                                                      "edges": []}, "admin", 1, 2)
            return await real_update(*args, **kwargs)

        monkeypatch.setattr(workflows, "update", moved_first)
        answer = await http.put(f"/workflows/{wf['id']}", json={**body, "name": "y", "version": 3})
        assert answer.status_code == 409, answer.text


async def test_a_run_is_stopped_even_when_one_of_its_jobs_was_deleted(sqlite_store: Store) -> None:
    async with api_env(sqlite_store) as env, env.client("op_in") as http:
        _driver(env)
        first, later = await env.add_job(env.group_a), await env.add_job(env.group_a)
        body = _body(env, [{"key": "a", "job_id": first}, {"key": "b", "job_id": later}],
                     [{"from": "a", "to": "b"}])
        wf = (await http.post("/workflows", json=body)).json()
        run_id = (await http.post(f"/workflows/{wf['id']}/trigger", json={})).json()["workflow_run_id"]
        assert await env.store.jobs.delete(later)
        stopped = await http.post(f"/workflow-runs/{run_id}/stop")
        assert stopped.status_code == 200 and stopped.json()["state"] == "stopped", stopped.text
        # A repair that starts nodes is checked: the deleted job is named.
        retried = await http.post(f"/workflow-runs/{run_id}/retry")
        assert retried.status_code == 422 and str(later) in retried.json()["error"], retried.text


async def test_an_update_is_audited_with_the_changed_fields_and_graph(sqlite_store: Store) -> None:
    async with api_env(sqlite_store) as env, env.client("op_in") as http, env.client("admin") as admin:
        _driver(env)
        job = await env.add_job(env.group_a)
        first = _body(env, [{"key": "a", "job_id": job}, {"key": "b", "job_id": job}],
                      [{"from": "a", "to": "b"}])
        wf = (await http.post("/workflows", json=first)).json()
        second = {**_body(env, [{"key": "a", "job_id": job, "params": "x"}, {"key": "c", "job_id": job}],
                          [{"from": "a", "to": "c"}]), "description": "new"}
        assert (await http.put(f"/workflows/{wf['id']}", json=second)).status_code == 200
        events = (await admin.get("/audit", params={"action": "workflow.update"})).json()["items"]
        (event,) = events
        changes = event["details"]["changes"]
        assert changes["version"] == {"before": 1, "after": 2}
        assert changes["description"] == {"before": "", "after": "new"}
        assert "name" not in changes and "job_group" not in changes  # unchanged
        before, after = changes["graph"]["before"], changes["graph"]["after"]
        assert (before["nodes"], after["nodes"]) == (2, 2) and before["sha256"] != after["sha256"]
        assert after["nodes_added"] == ["c"] and after["nodes_removed"] == ["b"]
        assert after["nodes_changed"] == ["a"]
        assert (after["edges_added"], after["edges_removed"]) == (["a -> c"], ["a -> b"])
