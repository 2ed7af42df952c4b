"""Jobs declared in code: the caps per request and per executor group, retired jobs deleted
after the grace period, and alarm targets declared with the management API's rules."""

from __future__ import annotations

from typing import Any

from jobring.admin.monitors.declared_retirement import DAY_MS, RetiredDeclaredJobsMonitor
from jobring.admin.services.audit import AuditLog
from jobring.admin.services.settings import AdminSettings
from jobring.admin.store import Store
from jobring.admin.store.records import NewLog
from tests.admin.api.test_declared_jobs import declare, jobs_by_handler
from tests.admin.api_harness import api_env, at

RATE: dict[str, Any] = {"schedule_type": "FIX_RATE", "schedule_conf": "3600"}


def _handlers(prefix: str, count: int) -> list[dict[str, Any]]:
    return [{"handler": f"{prefix}{n}", "fields": RATE} for n in range(count)]


async def test_a_group_holds_at_most_the_cap_of_jobs_managed_by_code(sqlite_store: Store) -> None:
    settings = AdminSettings(glue_enabled=True, declared_jobs_max_per_group=5)
    async with api_env(sqlite_store, settings=settings) as env:
        too_many = await declare(env, *_handlers("a", 6))
        assert too_many["code"] == 500 and too_many["content"]["field"] == "declarations"
        assert "JOBRING_DECLARED_JOBS_MAX_PER_GROUP" in too_many["msg"]
        assert await env.store.jobs.in_group(env.group_a) == []
        assert (await declare(env, *_handlers("a", 3)))["code"] == 200
        # Renaming the handlers retires the old jobs, which count until they are deleted.
        renamed = await declare(env, *_handlers("b", 3))
        assert renamed["code"] == 500 and "6 jobs managed by code" in renamed["msg"], renamed
        jobs = await jobs_by_handler(env)
        assert sorted(jobs) == ["a0", "a1", "a2"] and all(j.trigger_status == 1 for j in jobs.values())
        # Within the cap (retired included), a rename works.
        assert (await declare(env, *_handlers("a", 2), *_handlers("b", 2)))["code"] == 200
        assert len(await env.store.jobs.in_group(env.group_a)) == 5


async def test_jobs_created_beyond_the_cap_by_a_concurrent_declaration_are_removed(
    sqlite_store: Store,
) -> None:
    from jobring.admin.api.management.declared import DeclarationError, DeclarationService

    settings = AdminSettings(glue_enabled=True, declared_jobs_max_per_group=2)
    async with api_env(sqlite_store, settings=settings) as env:
        assert (await declare(env, *_handlers("a", 2)))["code"] == 200
        # Another node created one more at the same instant: the last one made goes again.
        extra = await env.add_job(env.group_a, executor_handler="x", managed_by="code",
                                  declared_by_executor=1)
        service = DeclarationService(env.services)
        try:
            await service._keep_within_cap(env.group_a, [extra])
        except DeclarationError as exc:
            assert exc.field == "declarations"
        else:
            raise AssertionError("the cap was not enforced")
        assert await env.store.jobs.get(extra) is None
        assert len(await env.store.jobs.in_group(env.group_a)) == 2


async def test_retired_declared_jobs_are_deleted_after_the_grace_period(sqlite_store: Store) -> None:
    async with api_env(sqlite_store) as env:
        await declare(env, *_handlers("a", 3))
        jobs = await jobs_by_handler(env)
        console_child_parent = await env.add_job(env.group_a, executor_handler="parent",
                                                 child_jobid=str(jobs["a0"].id))
        await env.store.logs.insert(NewLog(job_group=env.group_a, job_id=jobs["a0"].id,
                                           trigger_time=at(env.clock.now_ms()), trigger_code=200))
        answer = await declare(env, {"handler": "a1", "fields": RATE}, {"handler": "a2", "fields": RATE})
        assert answer["content"]["stopped"] == [jobs["a0"].id]
        retired = await env.store.jobs.get(jobs["a0"].id)
        assert retired is not None and (retired.trigger_status, retired.declared_retired_at) == (
            0, env.clock.now_ms())
        audit = AuditLog(env.store, env.clock)
        monitor = RetiredDeclaredJobsMonitor(env.store, audit, env.clock, grace_days=7)
        env.clock.advance(7 * DAY_MS - 1)
        assert await monitor.delete_due() == 0
        # Declared again within the grace period: revived and kept (retired again right after).
        await declare(env, *_handlers("a", 3))
        revived = await env.store.jobs.get(jobs["a0"].id)
        assert revived is not None and (revived.trigger_status, revived.declared_retired_at) == (1, None)
        await declare(env, {"handler": "a1", "fields": RATE}, {"handler": "a2", "fields": RATE})
        env.clock.advance(7 * DAY_MS)
        assert await monitor.delete_due() == 1
        assert await env.store.jobs.get(jobs["a0"].id) is None
        assert (await env.store.logs.list(job_id=jobs["a0"].id)).total == 0
        parent = await env.store.jobs.get(console_child_parent)
        assert parent is not None and parent.child_jobid is None
        assert sorted(await jobs_by_handler(env)) == ["a1", "a2", "parent"]
        record = next(e for e in (await env.store.audit.list(limit=50)).items
                      if e.action == "job.declared_delete")
        assert record.actor_kind == "system" and record.target_id == str(jobs["a0"].id)


async def test_declared_alarm_targets_are_stored_and_checked_like_the_apis(sqlite_store: Store) -> None:
    async with api_env(sqlite_store) as env:
        targets = [{"kind": "webhook", "url": "https://hooks.example.com/jobs"},
                   {"kind": "email", "to": ["ops@example.com"]}]
        answer = await declare(env, {"handler": "nightly", "fields": {**RATE, "alarm_targets": targets}})
        assert answer["code"] == 200, answer
        job = (await jobs_by_handler(env))["nightly"]
        async with env.client("admin") as http:
            shown = (await http.get(f"/jobs/{job.id}")).json()
        assert shown["alarm_targets"] == targets
        for bad, field in (([{"kind": "webhook", "url": "ftp://example.com/"}], "alarm_targets.0.url"),
                           ([{"kind": "pager"}], "alarm_targets.0.kind"),
                           ("not a list", "alarm_targets")):
            refused = await declare(env, {"handler": "nightly", "fields": {**RATE, "alarm_targets": bad}})
            assert refused["code"] == 500, refused
            assert refused["content"] == {"handler": "nightly", "field": field}, refused
        stored = await env.store.jobs.get(job.id)
        assert stored is not None and stored.alarm_targets == job.alarm_targets
