"""Listing and filtering through the API on every backend (the queries differ per dialect)."""

from __future__ import annotations

import pytest

from jobring.admin.api.management import runs as runs_api
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


async def test_run_cursor_paging_and_estimated_totals(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with api_env(store) as env, env.client("admin") as http:
        job_a = await env.add_job(env.group_a)
        job_b = await env.add_job(env.group_b)
        for n in range(9):  # three runs per instant: pages end inside a tie
            in_b = n % 3 == 0
            await env.add_run(job_b if in_b else job_a, env.group_b if in_b else env.group_a, handle_code=200)
            if n % 3 == 2:
                env.clock.advance(1_000)
        everything = (await http.get("/runs", params={"limit": 100})).json()
        assert everything["total"] == 9 and everything["total_exact"] is True
        assert everything["next_cursor"] is None  # the page was not full
        expected = [r["id"] for r in everything["items"]]

        seen: list[int] = []
        params: dict[str, object] = {"limit": 2}
        while True:
            page = (await http.get("/runs", params=params)).json()
            assert page["total"] == 9
            seen += [r["id"] for r in page["items"]]
            if page["next_cursor"] is None:
                break
            params = {"limit": 2, "cursor": page["next_cursor"]}
        assert seen == expected

        # The cursor keeps the filters of the query it is given with.
        first = (await http.get("/runs", params={"limit": 1, "job_group": env.group_a})).json()
        rest = (await http.get(
            "/runs", params={"job_group": env.group_a, "cursor": first["next_cursor"]}
        )).json()
        in_a = [r["id"] for r in everything["items"] if r["job_group"] == env.group_a]
        assert [first["items"][0]["id"]] + [r["id"] for r in rest["items"]] == in_a

        for bad in ("x", "12", "1-0", "-1-5", "1-99999999999999999999", "1" * 18 + "-1", "1-1-1", " 1-1"):
            answer = await http.get("/runs", params={"cursor": bad})
            assert answer.status_code == 422, bad
            assert answer.json()["field"] == "cursor"

        oldest = (await http.get("/runs", params={"limit": 2, "order": "oldest"})).json()
        assert [r["id"] for r in oldest["items"]] == expected[::-1][:2]
        after = (await http.get("/runs", params={"order": "oldest", "cursor": oldest["next_cursor"]})).json()
        assert [r["id"] for r in after["items"]] == expected[::-1][2:]
        assert (await http.get("/runs", params={"order": "sideways"})).json()["field"] == "order"

        monkeypatch.setattr(runs_api, "RUNS_COUNT_CAP", 4)
        capped = (await http.get("/runs", params={"limit": 2})).json()
        assert capped["total_exact"] is False and capped["total"] >= 5
        assert [r["id"] for r in capped["items"]] == expected[:2]
        small = (await http.get("/runs", params={"job_group": env.group_b})).json()
        assert (small["total"], small["total_exact"]) == (3, True)
