"""Delayed runs (trigger-at): the API's validation, listing and cancelling, and the runner
firing each exactly once at its instant, also with two admin nodes and after a crash."""

from __future__ import annotations

import pytest
from sqlalchemy import insert

from jobring.admin.loop.delayed import DelayedFireRunner
from jobring.admin.store import Store
from jobring.admin.store.records import LogStatus
from jobring.admin.store.tables import delayed_fire
from tests.admin.api_harness import T0, api_env


async def test_trigger_at_records_a_pending_run_fired_once_at_its_instant(sqlite_store: Store) -> None:
    async with api_env(sqlite_store) as env, env.client("op_in") as http:
        job = await env.add_job(env.group_a)
        r = await http.post(
            f"/jobs/{job}/trigger-at",
            json={"delay_ms": 60_000, "executor_param": "late", "addresses": [env.double.address(1)]},
        )
        assert r.status_code == 201, r.text
        fire = r.json()
        assert (fire["fire_at"], fire["state"], fire["created_by"]) == (T0 + 60_000, "scheduled", "op_in")
        assert fire["fire_at_iso"] == "2026-01-01T00:01:00Z"
        listed = (await http.get(f"/jobs/{job}/delayed")).json()
        assert [f["id"] for f in listed] == [fire["id"]]

        runner = DelayedFireRunner(env.store, env.services.trigger, env.clock)  # type: ignore[arg-type]
        assert await runner.tick() is None  # a minute away: beyond the read-ahead
        env.clock.advance(59_000)
        assert await runner.tick() == T0 + 60_000  # within the read-ahead: the runner sleeps until then
        assert env.double.runs() == []
        env.clock.advance(1_000)
        assert await runner.tick() is None
        runs = env.double.runs()
        assert [(c.address, c.body["executorParams"]) for c in runs] == [(env.double.address(1), "late")]
        page = await env.store.logs.list(job_id=job, status=LogStatus.ALL)
        assert [(e.trigger_type, e.planned_time) for e in page.items] == [("DELAYED", -fire["id"])]
        assert (await http.get(f"/jobs/{job}/delayed")).json() == []
        assert await runner.tick() is None and len(env.double.runs()) == 1


async def test_pending_runs_are_listed_across_jobs_for_the_callers_groups(sqlite_store: Store) -> None:
    async with api_env(sqlite_store) as env:
        a1, a2 = await env.add_job(env.group_a), await env.add_job(env.group_a)
        b = await env.add_job(env.group_b)
        async with env.client("admin") as admin:
            ids = [(await admin.post(f"/jobs/{job}/trigger-at", json={"delay_ms": delay})).json()["id"]
                   for job, delay in ((a1, 90_000), (b, 10_000), (a2, 30_000))]
            listed = (await admin.get("/delayed-runs")).json()
            assert [f["id"] for f in listed] == [ids[1], ids[2], ids[0]]  # soonest first, every group
            one = (await admin.get("/delayed-runs", params={"job_id": a2})).json()
            assert [(f["id"], f["job_id"], f["state"]) for f in one] == [(ids[2], a2, "scheduled")]
        async with env.client("op_in") as http:  # operator of group A only
            assert [f["id"] for f in (await http.get("/delayed-runs")).json()] == [ids[2], ids[0]]
            assert (await http.get("/delayed-runs", params={"job_id": b})).json() == []
            assert (await http.get("/delayed-runs", params={"limit": 1})).json()[0]["id"] == ids[2]


async def test_a_fire_recorded_by_one_node_is_not_sent_by_another(sqlite_store: Store) -> None:
    async with api_env(sqlite_store) as env, env.client("op_in") as http:
        job = await env.add_job(env.group_a)
        r = await http.post(f"/jobs/{job}/trigger-at", json={"at": T0 + 5_000})
        fire_id = r.json()["id"]
        first = DelayedFireRunner(env.store, env.services.trigger, env.clock)  # type: ignore[arg-type]
        env.clock.advance(5_000)
        pending = await env.store.delayed.due(T0 + 5_000)
        await first.tick()
        assert len(env.double.runs()) == 1
        # A node that read the row before the first deleted it (or that restarted after a
        # crash between recording and deleting) finds the run recorded: not sent twice.
        async with env.store.db.write() as conn:
            row = pending[0]
            await conn.execute(
                insert(delayed_fire).values(
                    id=row.id,
                    job_id=row.job_id,
                    job_group=row.job_group,
                    fire_at=row.fire_at,
                    executor_param=None,
                    addresses=None,
                    created_by="x",
                    created_at=T0,
                )
            )
        second = DelayedFireRunner(env.store, env.services.trigger, env.clock)  # type: ignore[arg-type]
        await second.tick()
        assert len(env.double.runs()) == 1
        assert await env.store.delayed.get(fire_id) is None


BAD = [
    ({}, "at"),
    ({"at": T0 + 1000, "delay_ms": 5}, "at"),
    ({"at": T0 - 1}, "at"),
    ({"at": "yesterday"}, "at"),
    ({"at": "2025-12-31T23:59:59Z"}, "at"),
    ({"at": "2028-01-01T00:00:00+01:00"}, "at"),
    ({"delay_ms": 0}, "delay_ms"),
    ({"delay_ms": 367 * 86_400_000}, "delay_ms"),
    ({"delay_ms": 1000, "addresses": ["http://elsewhere:9999/"]}, "addresses.0"),
    ({"delay_ms": 1000, "executor_param": "x" * 513}, "executor_param"),
]


@pytest.mark.parametrize(("body", "field"), BAD, ids=[str(b) for b, _ in BAD])
async def test_bad_trigger_at_names_its_field_and_records_nothing(
    sqlite_store: Store, body: dict[str, object], field: str
) -> None:
    async with api_env(sqlite_store) as env, env.client("op_in") as http:
        job = await env.add_job(env.group_a)
        r = await http.post(f"/jobs/{job}/trigger-at", json=body)
        # An address the group does not have: refused by the group as stored (409).
        assert r.status_code == (409 if field == "addresses.0" else 422), r.text
        assert r.json()["field"] == field, r.text
        assert await env.store.delayed.for_job(job) == []


async def test_iso_instants_and_cancel(sqlite_store: Store) -> None:
    async with api_env(sqlite_store) as env, env.client("op_in") as http:
        job = await env.add_job(env.group_a)
        naive = await http.post(f"/jobs/{job}/trigger-at", json={"at": "2026-01-01T02:00:00"})
        offset = await http.post(f"/jobs/{job}/trigger-at", json={"at": "2026-01-01T02:00:00+01:00"})
        assert naive.json()["fire_at"] == T0 + 7_200_000
        assert offset.json()["fire_at"] == T0 + 3_600_000
        assert [f["id"] for f in (await http.get(f"/jobs/{job}/delayed")).json()] == [
            offset.json()["id"],
            naive.json()["id"],
        ]
        assert (await http.delete(f"/jobs/{job}/delayed/{offset.json()['id']}")).status_code == 204
        assert (await http.delete(f"/jobs/{job}/delayed/{offset.json()['id']}")).status_code == 404
        other = await env.add_job(env.group_a)
        assert (await http.delete(f"/jobs/{other}/delayed/{naive.json()['id']}")).status_code == 404
        audit = await env.store.audit.list(limit=10)
        assert {"job.trigger_at", "job.delayed_cancel"} <= {e.action for e in audit.items}
        # Deleting the job drops its pending runs.
        assert (await http.delete(f"/jobs/{job}")).status_code == 204
        assert await env.store.delayed.for_job(job) == []


async def test_a_fire_of_a_deleted_job_or_a_gone_address_is_dropped_with_a_warning(
    sqlite_store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    async with api_env(sqlite_store) as env:
        gone = await env.add_job(env.group_a)
        moved = await env.add_job(env.group_a)
        await env.store.delayed.add(gone, env.group_a, T0 + 1_000, None, None, "t", T0)
        await env.store.delayed.add(moved, env.group_a, T0 + 1_000, None, ["http://left:9999/"], "t", T0)
        await env.store.jobs.delete(gone)
        runner = DelayedFireRunner(env.store, env.services.trigger, env.clock)  # type: ignore[arg-type]
        env.clock.advance(1_000)
        await runner.tick()
        assert env.double.runs() == [] and await env.store.delayed.due(T0 + 10_000) == []
        warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
        assert any("no longer exists" in w for w in warnings)
        assert any("not run" in w and "left" in w for w in warnings)
