"""A schedule declared with a workflow in executor code (``workflows[].schedule`` of
``api/jobring/declareJobs``): checked by the API's schedule rules (refusals naming
``schedule.<field>``, nothing of the workflow written), stored managed by code and read-only in
the API, left as planned while the declaration is unchanged, replaced when it changes, removed
when the code drops it, and fired by the admin's workflow scheduler."""

from __future__ import annotations

from typing import Any

from jobring.admin.monitors.workflow_schedules import WorkflowScheduler
from jobring.admin.store import Store
from jobring.admin.store.workflow_schedules import WorkflowSchedule
from tests.admin.api.test_api_workflows import _driver
from tests.admin.api.test_declared_workflows import NIGHTLY, declare
from tests.admin.api_harness import api_env

CRON = {"schedule_type": "CRON", "schedule_conf": "0 0 2 * * ?", "schedule_timezone": "Asia/Shanghai",
        "overlap": "queue_one", "params": {"day": "today"}}
HOUR_MS = 3_600_000


def _with(schedule: dict[str, Any] | None) -> dict[str, Any]:
    return NIGHTLY if schedule is None else {**NIGHTLY, "schedule": schedule}


async def test_a_declared_schedule_follows_the_code(sqlite_store: Store) -> None:
    async with api_env(sqlite_store) as env, env.client("admin") as http:
        _driver(env)
        answer = await declare(env, [_with(CRON)])
        assert answer["code"] == 200, answer
        (wid,) = answer["content"]["workflows"]["created"]
        assert answer["content"]["workflows"]["schedules"] == [wid]
        shown = (await http.get(f"/workflows/{wid}/schedule")).json()
        fields = ("schedule_type", "schedule_timezone", "enabled", "managed_by")
        assert [shown[f] for f in fields] == ["CRON", "Asia/Shanghai", True, "code"]
        assert shown["overlap"] == "queue_one" and shown["params"] == {"day": "today"}
        planned = shown["next_fire_at"]
        assert planned == env.clock.now_ms() + 18 * HOUR_MS  # 02:00 in Shanghai is 18:00 UTC
        (listed,) = (await http.get("/workflows")).json()["items"]
        assert listed["schedule"] == {"schedule_type": "CRON", "schedule_conf": "0 0 2 * * ?",
                                      "schedule_timezone": "Asia/Shanghai", "enabled": True,
                                      "next_fire_at": planned, "managed_by": "code"}
        # Read-only in the API: the code is where it changes.
        refused = await http.put(f"/workflows/{wid}/schedule", json={"schedule_type": "NONE"})
        assert refused.status_code == 409 and refused.json()["field"] == "managed_by", refused.text

        # The same declaration at a later start leaves the planned instant alone.
        env.clock.advance(HOUR_MS)
        again = await declare(env, [_with(CRON)])
        assert again["content"]["workflows"]["schedules"] == []
        assert (await http.get(f"/workflows/{wid}/schedule")).json()["next_fire_at"] == planned

        # Changed in the code: replaced, planned again, audited.
        rate = {"schedule_type": "FIX_RATE", "schedule_conf": "600", "enabled": True}
        assert (await declare(env, [_with(rate)]))["content"]["workflows"]["schedules"] == [wid]
        shown = (await http.get(f"/workflows/{wid}/schedule")).json()
        assert [shown[f] for f in ("schedule_type", "schedule_conf", "overlap")] == ["FIX_RATE", "600",
                                                                                 "skip"]
        assert shown["next_fire_at"] == env.clock.now_ms() + 600_000
        audit = (await http.get("/audit", params={"action": "workflow.schedule"})).json()["items"]
        assert len(audit) == 2 and audit[0]["actor"] == "executor:app-a"

        # Dropped from the code: removed; the workflow runs only when triggered.
        assert (await declare(env, [_with(None)]))["content"]["workflows"]["schedules"] == [wid]
        assert (await http.get(f"/workflows/{wid}/schedule")).json()["schedule_type"] == "NONE"
        assert (await http.get("/workflows")).json()["items"][0]["schedule"] is None

        # A schedule then set in the console is the console's: a declaration without one keeps it.
        put = await http.put(f"/workflows/{wid}/schedule", json={**rate, "schedule_conf": "60"})
        assert put.status_code == 200 and put.json()["managed_by"] is None, put.text
        assert (await declare(env, [_with(None)]))["content"]["workflows"]["schedules"] == []
        assert (await http.get(f"/workflows/{wid}/schedule")).json()["schedule_conf"] == "60"

        # Declared again, then the workflow detached: its schedule stays, editable again.
        await declare(env, [_with(CRON)])
        assert (await declare(env, []))["content"]["workflows"]["detached"] == [wid]
        shown = (await http.get(f"/workflows/{wid}/schedule")).json()
        assert (shown["schedule_type"], shown["managed_by"]) == ("CRON", None)
        assert (await http.put(f"/workflows/{wid}/schedule", json=rate)).status_code == 200


async def test_refusals_name_the_schedule_field_and_write_nothing(sqlite_store: Store) -> None:
    async with api_env(sqlite_store) as env, env.client("admin") as http:
        _driver(env)
        cases: list[tuple[dict[str, Any], str]] = [
            ({**CRON, "schedule_conf": "0 0 25 * * ?"}, "schedule.schedule_conf"),
            ({**CRON, "schedule_timezone": "Mars/Olympus"}, "schedule.schedule_timezone"),
            ({"schedule_type": "FIX_RATE", "schedule_conf": "soon"}, "schedule.schedule_conf"),
            ({"schedule_type": "ONCE", "schedule_conf": "2020-01-01T00:00:00"}, "schedule.schedule_conf"),
            ({"schedule_type": "NONE"}, "schedule.enabled"),
            ({**CRON, "overlap": "sometimes"}, "schedule.overlap"),
            ({**CRON, "enabled": "yes"}, "schedule.enabled"),
            ({**CRON, "cron": "0 0 2 * * ?"}, "schedule.cron"),
            ({"schedule_conf": "60"}, "schedule.schedule_type"),
            ({**CRON, "params": {"blob": "x" * 70_000}}, "schedule.params"),
        ]
        for schedule, field in cases:
            answer = await declare(env, [_with(schedule)])
            assert answer["code"] == 500, answer
            assert answer["content"] == {"workflow": "nightly", "field": field}, answer
            assert field in answer["msg"], answer
        assert (await http.get("/workflows")).json()["total"] == 0
        bad = await declare(env, [{**NIGHTLY, "schedule": "daily"}])
        assert bad["content"]["field"] == "schedule", bad


async def test_a_console_edit_racing_a_declaration_never_overwrites_the_declared_schedule(
    sqlite_store: Store,
) -> None:
    # The console's check reads the schedule before it writes: a declaration stored in between
    # (read here as "no schedule yet") must still be refused inside the write.
    async with api_env(sqlite_store) as env, env.client("admin") as http:
        _driver(env)
        (wid,) = (await declare(env, [_with(CRON)]))["content"]["workflows"]["created"]
        schedules = env.store.workflow_schedules
        real_get = schedules.get

        async def read_before_the_declaration(workflow_id: int) -> WorkflowSchedule | None:
            schedules.get = real_get  # type: ignore[method-assign]  # once: the API's first read
            return None

        schedules.get = read_before_the_declaration  # type: ignore[method-assign]
        rate = {"schedule_type": "FIX_RATE", "schedule_conf": "1", "enabled": True}
        refused = await http.put(f"/workflows/{wid}/schedule", json=rate)
        assert refused.status_code == 409 and refused.json()["field"] == "managed_by", refused.text
        kept = await real_get(wid)
        assert kept is not None and (kept.schedule_type, kept.managed_by) == ("CRON", "code")


async def test_an_unknown_schedule_key_is_named_on_one_short_line(sqlite_store: Store) -> None:
    # The refusal is logged and echoed: an executor's key must not forge log lines or flood them.
    async with api_env(sqlite_store) as env:
        _driver(env)
        key = "x\nWARNING forged line " * 5_000
        answer = await declare(env, [_with({**CRON, key: 1})])
        assert answer["code"] == 500, answer
        field = answer["content"]["field"]
        assert field.startswith("schedule.") and "\n" not in field and len(field) <= 80, field
        assert "\n" not in answer["msg"] and len(answer["msg"]) < 300, answer["msg"]


async def test_a_declared_schedule_is_fired_by_the_admin(sqlite_store: Store) -> None:
    async with api_env(sqlite_store) as env:
        _driver(env)
        assert env.services.workflows is not None
        rate = {"schedule_type": "FIX_RATE", "schedule_conf": "60", "params": {"from": "code"}}
        (wid,) = (await declare(env, [_with(rate)]))["content"]["workflows"]["created"]
        scheduler = WorkflowScheduler(env.store, env.services.workflows, env.clock, default_zone="UTC")
        await scheduler.tick()
        assert await env.store.workflows.running_run_ids(wid) == []
        env.clock.advance(60_000)
        await scheduler.tick()
        (run_id,) = await env.store.workflows.running_run_ids(wid)
        run = await env.store.workflows.get_run(run_id)
        assert run is not None and run.triggered_by == "schedule"
        shown = await env.store.workflow_schedules.get(wid)
        assert shown is not None and shown.next_fire_at == env.clock.now_ms() + 60_000
