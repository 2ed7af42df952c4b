"""/runs/{id}/subtasks for any run: the run page asks it of every run, so a run that neither
mapped nor was sharded answers no progress and no sub-tasks (not 404); unknown runs and
runs of groups the caller may not read stay not found."""

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
