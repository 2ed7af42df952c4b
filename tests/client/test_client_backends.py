"""One client session against the management app on every database backend."""

from __future__ import annotations

from jobring.admin.store import Store
from tests.client.adminkit import T0, admin_env


async def test_client_round_trip_on_each_backend(store: Store) -> None:
    async for env in admin_env(store):
        group = await env.group()
        async with env.client() as admin:
            job = await admin.jobs.create({"job_group": group, "job_desc": "backend check",
                                           "executor_handler": "h", "schedule_type": "FIX_RATE",
                                           "schedule_conf": "60"})
            started = await admin.jobs.start(job["id"])
            fired = await admin.jobs.trigger(job["id"], executor_param="x")
            runs = await admin.runs.list(job=job["id"])
            found = await admin.jobs.list(desc="backend", trigger_status=1)
        assert started["trigger_next_time"] > T0 and fired["trigger_code"] == 200
        assert [r["id"] for r in runs.items] == fired["log_ids"]
        assert [j["id"] for j in found.items] == [job["id"]]
