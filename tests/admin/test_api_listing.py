"""Listing and filtering through the API on every backend (the queries differ per dialect)."""

from __future__ import annotations

from jobring.admin.store import Store
from tests.admin.api_harness import T0, api_env


async def test_job_and_run_listings(store: Store) -> None:
    async with api_env(store) as env, env.client("admin") as http:
        for i in range(7):
            group = env.group_a if i % 2 == 0 else env.group_b
            body = {
                "job_group": group,
                "job_desc": f"report_{i}%" if i < 3 else f"sync {i}",
                "executor_handler": "h1" if i < 5 else "h2",
                "author": "Zoë" if i == 6 else "al",
                "schedule_type": "FIX_RATE",
                "schedule_conf": "60",
            }
            r = await http.post("/jobs", json=body)
            assert r.status_code == 201, r.text
        ids = [j["id"] for j in (await http.get("/jobs", params={"sort": "id_asc"})).json()["items"]]
        await http.post(f"/jobs/{ids[0]}/start")
        await http.post(f"/jobs/{ids[1]}/start")

        async def total(**params: object) -> int:
            r = await http.get("/jobs", params=params)
            assert r.status_code == 200, r.text
            return int(r.json()["total"])

        assert await total() == 7
        assert await total(job_group=env.group_a) == 4
        assert await total(trigger_status=1) == 2
        assert await total(trigger_status=1, job_group=env.group_b) == 1
        assert await total(desc="_1%") == 1  # LIKE wildcards are literal
        assert await total(desc="report") == 3
        assert await total(handler="h2") == 2
        assert await total(author="Zoë") == 1
        page = (await http.get("/jobs", params={"limit": 3, "offset": 6, "sort": "id_asc"})).json()
        assert page["total"] == 7 and [j["id"] for j in page["items"]] == ids[6:]

        for n, job_id in enumerate(ids[:3]):
            await env.add_run(job_id, env.group_a if n % 2 == 0 else env.group_b, handle_code=200)
            env.clock.advance(60_000)
        await env.add_run(ids[0], env.group_a)
        await env.add_run(ids[0], env.group_a, handle_code=500)

        async def runs(**params: object) -> list[int]:
            r = await http.get("/runs", params=params)
            assert r.status_code == 200, r.text
            return [item["job_id"] for item in r.json()["items"]]

        assert len(await runs()) == 5
        assert await runs(job_group=env.group_b) == [ids[1]]
        assert len(await runs(status="success")) == 3
        assert await runs(status="running") == [ids[0]]
        assert len(await runs(trigger_from=T0 + 60_000, trigger_to=T0 + 120_000)) == 2
        async with env.client("viewer") as viewer:
            assert (await viewer.get("/runs")).json()["total"] == 4  # group A only
            assert (await viewer.get("/jobs")).json()["total"] == 4
