from __future__ import annotations

import pytest

from jobring.client import AdminApiError
from tests.client.adminkit import T0, AdminEnv


async def test_create_get_list_update_and_delete_a_job(env: AdminEnv) -> None:
    group = await env.group()
    async with env.client() as admin:
        created = await admin.jobs.create({
            "job_group": group, "job_desc": "nightly report", "executor_handler": "report",
            "schedule_type": "CRON", "schedule_conf": "0 0 2 * * ?", "executor_param": "full",
        })
        assert created["id"] > 0 and created["trigger_status"] == 0
        assert (await admin.jobs.get(created["id"]))["executor_param"] == "full"

        await env.job(group, job_desc="other")
        page = await admin.jobs.list(group=group, desc="nightly")
        assert page.total == 1 and [j["id"] for j in page.items] == [created["id"]]

        changed = await admin.jobs.update(created["id"], {"executor_param": "delta"})
        assert changed["executor_param"] == "delta" and changed["job_desc"] == "nightly report"

        await admin.jobs.delete(created["id"])
        with pytest.raises(AdminApiError) as info:
            await admin.jobs.get(created["id"])
    assert info.value.status == 404 and str(created["id"]) in info.value.message


async def test_start_stop_and_copy(env: AdminEnv) -> None:
    job = await env.job(await env.group())
    async with env.client() as admin:
        started = await admin.jobs.start(job["id"])
        assert started["trigger_status"] == 1 and started["trigger_next_time"] > T0
        assert (await admin.jobs.list(trigger_status=1)).total == 1
        copy = await admin.jobs.copy(job["id"])
        assert copy["id"] != job["id"] and copy["trigger_status"] == 0
        stopped = await admin.jobs.stop(job["id"])
        assert stopped["trigger_status"] == 0
        assert (await admin.jobs.list(trigger_status=1)).total == 0


async def test_bad_cron_is_refused_with_the_field_and_nothing_is_stored(env: AdminEnv) -> None:
    group = await env.group()
    async with env.client() as admin:
        with pytest.raises(AdminApiError) as info:
            await admin.jobs.create({"job_group": group, "job_desc": "x", "executor_handler": "h",
                                     "schedule_type": "CRON", "schedule_conf": "not a cron"})
        assert info.value.status in (400, 422) and info.value.field == "schedule_conf"
        assert info.value.is_client_error
        assert (await admin.jobs.list()).total == 0


async def test_trigger_runs_the_job_on_an_executor_with_overrides(env: AdminEnv) -> None:
    job = await env.job(await env.group())
    second = env.executors.address(1)
    async with env.client() as admin:
        result = await admin.jobs.trigger(job["id"], executor_param="once", addresses=[second])
    assert result["trigger_code"] == 200 and len(result["log_ids"]) == 1
    (call,) = env.executors.runs()
    assert call.address == second and call.body["executorParams"] == "once"


async def test_preview_lists_the_next_fire_times(env: AdminEnv) -> None:
    async with env.client() as admin:
        preview = await admin.jobs.preview("FIX_RATE", "60", count=3, after=T0)
    assert preview["times"] == [T0 + 60_000, T0 + 120_000, T0 + 180_000]
    assert len(preview["times_iso"]) == 3


async def test_glue_is_refused_while_glue_is_disabled(env: AdminEnv) -> None:
    job = await env.job(await env.group())
    async with env.client() as admin:
        with pytest.raises(AdminApiError) as info:
            await admin.glue.save(job["id"], "echo hi", "first")
    assert info.value.status == 403 and "GLUE is disabled" in info.value.message


async def test_trigger_at_lists_and_cancels_delayed_runs(env: AdminEnv) -> None:
    from datetime import UTC, datetime, timedelta

    job = await env.job(await env.group())
    async with env.client() as admin:
        later = await admin.jobs.trigger_at(job["id"], delay=timedelta(minutes=10), params="p")
        assert later["fire_at"] == T0 + 600_000 and later["state"] == "scheduled"
        at = datetime.fromtimestamp((T0 + 3_600_000) / 1000, tz=UTC)
        fixed = await admin.jobs.trigger_at(job["id"], at=at)
        assert fixed["fire_at"] == T0 + 3_600_000
        assert [d["id"] for d in await admin.jobs.delayed(job["id"])] == [later["id"], fixed["id"]]
        await admin.jobs.cancel_delayed(job["id"], later["id"])
        assert [d["id"] for d in await admin.jobs.delayed(job["id"])] == [fixed["id"]]
        with pytest.raises(AdminApiError) as info:
            await admin.jobs.trigger_at(job["id"], at=datetime.fromtimestamp(T0 / 1000 - 1, tz=UTC))
        assert info.value.status == 422 and info.value.field == "at"
        with pytest.raises(AdminApiError) as info:
            await admin.jobs.trigger_at(job["id"])
        assert info.value.field == "at"


async def test_backfill_dry_run_start_list_show_and_cancel(env: AdminEnv) -> None:
    group = await env.group()
    async with env.client() as admin:
        job = await admin.jobs.create({"job_group": group, "job_desc": "daily", "executor_handler": "h",
                                       "schedule_type": "CRON", "schedule_conf": "0 0 2 * * ?",
                                       "schedule_timezone": "Asia/Shanghai"})
        dry = await admin.jobs.backfill(job["id"], dates=["2026-03-01", "2026-03-03"], dry_run=True,
                                        order="newest_first", parallelism=2)
        # 02:00 in Shanghai is 18:00 UTC the day before; newest first.
        assert [i["logical_iso"] for i in dry["instants"]] == ["2026-03-02T18:00:00Z", "2026-02-28T18:00:00Z"]
        assert dry["id"] is None and dry["status"] == "dry_run"
        with pytest.raises(AdminApiError) as info:
            await admin.jobs.backfill(job["id"], start="2026-03-01T00:00:00Z")
        assert info.value.status == 422 and info.value.field == "end"
        with pytest.raises(AdminApiError) as info:
            await admin.jobs.backfill(job["id"], dates=["2026-02-30"])
        assert info.value.status == 422 and info.value.field == "dates[0]"
        started = await admin.jobs.backfill(job["id"], start="2026-03-01T00:00:00Z",
                                            end="2026-03-05T00:00:00Z",
                                            parallelism=2)
        assert (started["status"], started["total"]) == ("running", 4)
        [listed] = await admin.jobs.backfills(job["id"])
        assert listed["id"] == started["id"]
        assert (await admin.jobs.get_backfill(started["id"]))["order"] == "oldest_first"
        cancelled = await admin.jobs.cancel_backfill(started["id"])
        assert cancelled["status"] == "cancelled" and cancelled["ended_at"] is not None
        with pytest.raises(AdminApiError) as info:
            await admin.jobs.get_backfill(started["id"] + 1000)
        assert info.value.status == 404
