"""Flow control through the REST API: job and group settings (validated, role and group
checked), queued runs listed by state, and cancelling a queued run."""

from __future__ import annotations

from jobring.admin.store import Store
from tests.admin.api_harness import api_env


async def test_job_flow_settings_round_trip_and_validation(sqlite_store: Store) -> None:
    async with api_env(sqlite_store) as env, env.client("op_in") as http:
        body = {"job_group": env.group_a, "job_desc": "tenants", "executor_handler": "h",
                "flow": {"max_concurrent_runs": 30, "concurrency_key": "{{params.tenant}}", "key_limit": 2,
                         "rate_limit": 10, "rate_period": "minute", "priority": 3}}
        created = await http.post("/jobs", json=body)
        assert created.status_code == 201, created.text
        flow = created.json()["flow"]
        assert flow == {"max_concurrent_runs": 30, "concurrency_key": "{{params.tenant}}", "key_limit": 2,
                        "on_limit": "queue", "rate_limit": 10, "rate_period": "minute", "priority": 3}
        job_id = created.json()["id"]
        changed = await http.patch(f"/jobs/{job_id}",
                                   json={"flow": {"max_concurrent_runs": 5, "on_limit": "skip"}})
        assert changed.status_code == 200 and changed.json()["flow"]["on_limit"] == "skip"
        assert changed.json()["flow"]["concurrency_key"] is None
        cleared = await http.patch(f"/jobs/{job_id}", json={"flow": None})
        assert cleared.status_code == 200 and cleared.json()["flow"] is None
        emptied = await http.patch(f"/jobs/{job_id}", json={"flow": {}})
        assert emptied.status_code == 200 and emptied.json()["flow"] is None
        for bad, field in (({"key_limit": 2}, "flow.key_limit"),
                           ({"concurrency_key": "{{ params. }}"}, "flow.concurrency_key"),
                           ({"priority": 4}, "flow.priority"),
                           ({"on_limit": "drop"}, "flow.on_limit"),
                           ({"max_concurrent_runs": 0}, "flow.max_concurrent_runs")):
            refused = await http.patch(f"/jobs/{job_id}", json={"flow": bad})
            assert refused.status_code == 422, (bad, refused.text)
            assert field in (refused.json()["field"] or "") + refused.json()["error"], refused.json()


async def test_group_flow_needs_write_access_to_the_group(sqlite_store: Store) -> None:
    async with api_env(sqlite_store) as env:
        async with env.client("op_in") as http:
            ok = await http.put(f"/groups/{env.group_a}/flow", json={"max_concurrent_runs": 30})
            assert ok.status_code == 200, ok.text
            assert ok.json()["flow"]["max_concurrent_runs"] == 30
            other = await http.put(f"/groups/{env.group_b}/flow", json={"max_concurrent_runs": 1})
            assert other.status_code in (403, 404)
        async with env.client("viewer") as http:
            assert (await http.put(f"/groups/{env.group_a}/flow", json={})).status_code == 403
            seen = await http.get(f"/groups/{env.group_a}")
            assert seen.json()["flow"]["max_concurrent_runs"] == 30
        async with env.client("admin") as http:
            cleared = await http.put(f"/groups/{env.group_a}/flow", json={})
            assert cleared.status_code == 200 and cleared.json()["flow"] is None
            audit = (await http.get("/audit", params={"action": "group.flow"})).json()
            assert len(audit["items"]) == 2


async def test_queued_runs_are_listed_and_cancelled(sqlite_store: Store) -> None:
    async with api_env(sqlite_store) as env:
        async with env.client("op_in") as http:
            job = (await http.post("/jobs", json={"job_group": env.group_a, "job_desc": "one at a time",
                                                  "executor_handler": "h",
                                                  "flow": {"max_concurrent_runs": 1}})).json()
            for _ in range(3):
                fired = await http.post(f"/jobs/{job['id']}/trigger", json={})
                assert fired.status_code == 200, fired.text
            queued = (await http.get("/runs", params={"job_id": job["id"], "state": "queued"})).json()
            assert queued["total"] == 2 and all(r["state"] == "queued" for r in queued["items"])
            assert queued["items"][0]["trigger_msg"].startswith("queued: limit reached")
            run_id = queued["items"][0]["id"]
        async with env.client("op_out") as http:
            assert (await http.post(f"/runs/{run_id}/cancel")).status_code == 404
        async with env.client("viewer") as http:
            assert (await http.post(f"/runs/{run_id}/cancel")).status_code == 403
        async with env.client("op_in") as http:
            cancelled = await http.post(f"/runs/{run_id}/cancel")
            assert cancelled.status_code == 200, cancelled.text
            assert cancelled.json()["state"] == "killed"
            again = await http.post(f"/runs/{run_id}/cancel")
            assert again.status_code == 409
            left = (await http.get("/runs", params={"job_id": job["id"], "state": "queued"})).json()
            assert left["total"] == 1
