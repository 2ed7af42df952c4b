"""Backfills across roles and groups: a viewer may read but not start or cancel; another group's
operator sees a backfill (and its job) as missing; bad requests name the field; a templated
job's params must parse."""

from __future__ import annotations

from jobring.admin.store import Store
from tests.admin.api_harness import api_env

RANGE = {"start": "2026-03-01T00:00:00Z", "end": "2026-03-03T23:59:59Z"}


async def test_backfills_respect_roles_and_groups(sqlite_store: Store) -> None:
    async with (api_env(sqlite_store) as env, env.client("op_in") as op, env.client("op_out") as op_b,
                env.client("viewer") as viewer):
        job = await env.add_job(env.group_a, schedule_conf="0 0 2 * * ?", schedule_timezone="UTC")
        r = await viewer.post(f"/jobs/{job}/backfill", json={**RANGE, "dry_run": True})
        assert r.status_code == 403, r.text
        r = await op_b.post(f"/jobs/{job}/backfill", json=RANGE)
        assert r.status_code == 404, r.text
        r = await op.post(f"/jobs/{job}/backfill", json={**RANGE, "parallelism": 2})
        assert r.status_code == 201 and r.json()["total"] == 3, r.text
        backfill = r.json()["id"]
        assert (await viewer.get(f"/backfills/{backfill}")).json()["status"] == "running"
        assert (await op_b.get(f"/backfills/{backfill}")).status_code == 404
        assert (await op_b.get(f"/jobs/{job}/backfills")).status_code == 404
        assert (await op_b.delete(f"/backfills/{backfill}")).status_code == 404
        assert (await viewer.delete(f"/backfills/{backfill}")).status_code == 403
        row = await env.store.backfills.get(backfill)
        assert row is not None and row.status == "running"
        assert (await op.delete(f"/backfills/{backfill}")).json()["status"] == "cancelled"


async def test_bad_backfill_requests_name_the_field(sqlite_store: Store) -> None:
    async with api_env(sqlite_store) as env, env.client("op_in") as op:
        job = await env.add_job(env.group_a)
        manual = await env.add_job(env.group_a, schedule_type="NONE", schedule_conf=None)
        for body, field in (
            ({"start": RANGE["start"]}, "end"),
            ({**RANGE, "dates": ["2026-03-01"]}, "start"),
            ({"dates": ["2026-13-01"]}, "dates[0]"),
            ({**RANGE, "order": "sideways"}, "order"),
            ({"start": RANGE["end"], "end": RANGE["start"]}, "end"),
            ({"start": "2026-03-01T00:00:00", "end": RANGE["end"]}, "start"),
        ):
            r = await op.post(f"/jobs/{job}/backfill", json=body)
            assert r.status_code == 422 and r.json()["field"] == field, (body, r.text)
        r = await op.post(f"/jobs/{manual}/backfill", json=RANGE)  # the job, not the request: 409
        assert r.status_code == 409 and r.json()["field"] == "schedule_type", r.text
        r = await op.post(f"/jobs/{job}/backfill", json={"start": "2026-03-01T00:10:00Z",
                                                         "end": "2026-03-01T00:20:00Z"})
        assert r.status_code == 422 and r.json()["field"] == "start", r.text


async def test_a_templated_jobs_params_must_parse(sqlite_store: Store) -> None:
    async with api_env(sqlite_store) as env, env.client("op_in") as op:
        body = {"job_group": env.group_a, "job_desc": "t", "executor_handler": "h", "schedule_type": "CRON",
                "schedule_conf": "0 0 2 * * ?", "executor_param": "day={{ logical_date | fmt(",
                "timing": {"params_template": True}}
        r = await op.post("/jobs", json=body)
        assert r.status_code == 422 and r.json()["field"] == "executor_param", r.text
        r = await op.post("/jobs", json={**body, "timing": None})
        assert r.status_code == 201, r.text  # without the switch, {{ is plain text
        r = await op.patch(f"/jobs/{r.json()['id']}", json={"timing": {"params_template": True}})
        assert r.status_code == 422 and r.json()["field"] == "executor_param", r.text
