"""/runs/{id}/subtasks for any run: the run page asks it of every run, so a run that neither
mapped nor was sharded answers no progress and no sub-tasks (not 404); unknown runs and
runs of groups the caller may not read stay not found. A job's broadcast hooks need the route
SHARDING_BROADCAST, no shard count and handler names (422 naming the field)."""

from __future__ import annotations

from jobring.admin.store import Store
from tests.admin.api_harness import api_env


async def test_a_plain_run_has_no_subtasks_and_hidden_runs_are_not_found(sqlite_store: Store) -> None:
    async with api_env(sqlite_store) as env:
        async with env.client("op_in") as http:
            job = (await http.post("/jobs", json={"job_group": env.group_a, "job_desc": "plain",
                                                  "executor_handler": "h"})).json()
            fired = await http.post(f"/jobs/{job['id']}/trigger", json={})
            assert fired.status_code == 200, fired.text
            run_id = fired.json()["run_ids"][0]
            page = await http.get(f"/runs/{run_id}/subtasks")
            assert page.status_code == 200, page.text
            assert page.json() == {"progress": None, "items": [], "next_after_id": None}
            assert (await http.get("/runs/999999/subtasks")).status_code == 404
            assert (await http.post(f"/runs/{run_id}/retry-failed")).status_code == 404
        async with env.client("op_out") as http:
            assert (await http.get(f"/runs/{run_id}/subtasks")).status_code == 404


async def test_broadcast_hooks_need_a_broadcast_job_and_a_handler_name(sqlite_store: Store) -> None:
    async with api_env(sqlite_store) as env, env.client("op_in") as http:
        base = {"job_group": env.group_a, "job_desc": "b", "executor_handler": "refresh"}
        wrong = await http.post("/jobs", json={**base, "broadcast_pre": "snapshot"})
        assert wrong.status_code == 422 and "broadcast_pre" in wrong.text, wrong.text
        bad = await http.post("/jobs", json={**base, "executor_route_strategy": "SHARDING_BROADCAST",
                                             "broadcast_post": "9 lives"})
        assert bad.status_code == 422 and "broadcast_post" in bad.text, bad.text
        sharded = await http.post("/jobs", json={**base, "executor_route_strategy": "SHARDING_BROADCAST",
                                                 "broadcast_post": "report", "shard_count": 4})
        assert sharded.status_code == 422 and "broadcast_post" in sharded.text, sharded.text
        made = await http.post("/jobs", json={**base, "executor_route_strategy": "SHARDING_BROADCAST",
                                              "broadcast_pre": "snapshot", "broadcast_post": "report"})
        assert made.status_code == 201, made.text
        assert (made.json()["broadcast_pre"], made.json()["broadcast_post"]) == ("snapshot", "report")
        job = made.json()["id"]
        cleared = await http.patch(f"/jobs/{job}", json={"broadcast_pre": None})
        assert cleared.status_code == 200 and cleared.json()["broadcast_pre"] is None, cleared.text
