"""A job with a holiday calendar, on a real admin process: the holiday's instant is recorded
as a skipped run naming the calendar (nothing is sent), and the next day's instant fires.

The admin's clock is shifted with its test-only JOBRING_CLOCK_OFFSET_MS (admin/runtime/app.py) to a
few seconds before each midnight: one admin run before the holiday's midnight, a second
(restarted as after a day) before the next midnight."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from jobring.admin.store import Store
from jobring.admin.store.tables import job_log
from jobring.core.runstate import RunState, run_state
from tests.e2e import sqlite_kit
from tests.e2e.admin_nodes import RecordingExecutor, add_manual_group, now_ms, start_admin, stop
from tests.e2e.security_kit import logged_in

pytestmark = [pytest.mark.e2e, pytest.mark.timing, pytest.mark.timeout(180)]
database = sqlite_kit.database  # the shared SQLite fixture

HOLIDAY = datetime(2030, 1, 2, tzinfo=UTC)
HOLIDAY_MS = int(HOLIDAY.timestamp() * 1000)
NEXT_DAY_MS = HOLIDAY_MS + 86_400_000
LEAD_MS = 10_000  # the admin starts this long before the midnight it is to see




async def _rows(store: Store, job_id: int) -> list[Any]:
    async with store.engine.connect() as conn:
        stmt = (
            select(
                job_log.c.planned_time,
                job_log.c.trigger_code,
                job_log.c.trigger_msg,
                job_log.c.handle_code,
                job_log.c.alarm_status,
            )
            .where(job_log.c.job_id == job_id)
            .order_by(job_log.c.planned_time)
        )
        return list((await conn.execute(stmt)).all())


async def _until(check: Callable[[], Any], limit_s: float, what: str) -> Any:
    deadline = time.monotonic() + limit_s
    while True:
        result = await check()
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"not in {limit_s} s: {what}")
        await asyncio.sleep(0.2)


def _offset_to(target_ms: int) -> dict[str, str]:
    return {"JOBRING_CLOCK_OFFSET_MS": str(target_ms - now_ms())}


async def test_a_holiday_is_skipped_and_recorded_and_the_next_day_fires(
    database: tuple[str, Store], tmp_path: Path
) -> None:
    url, store = database
    executor = RecordingExecutor()
    await executor.start()
    group = await add_manual_group(store, executor.address)
    node = await start_admin(url, "cal-a", tmp_path, env=_offset_to(HOLIDAY_MS - LEAD_MS))
    try:
        async with logged_in(node) as http:
            r = await http.post("/calendars", json={"name": "holidays", "dates": ["2030-01-02"]})
            assert r.status_code == 201, r.text
            r = await http.post(
                "/jobs",
                json={
                    "job_group": group,
                    "job_desc": "daily",
                    "executor_handler": "hello",
                    "schedule_type": "CRON",
                    "schedule_conf": "0 0 * * *",
                    "schedule_timezone": "UTC",
                    "timing": {"calendars": ["holidays"]},
                },
            )
            assert r.status_code == 201, r.text
            job = r.json()
            assert job["schedule_conf"] == "0 0 0 * * ?"  # a Unix expression, stored as Quartz
            started = (await http.post(f"/jobs/{job['id']}/start")).json()
            # The holiday's midnight is the job's next instant: it is to be recorded as skipped.
            assert started["trigger_next_time"] == HOLIDAY_MS, started
            preview = (
                await http.post(
                    "/schedules/preview",
                    json={
                        "schedule_type": "CRON",
                        "schedule_conf": "0 0 0 * * ?",
                        "timezone": "UTC",
                        "count": 1,
                        "job_id": job["id"],
                    },
                )
            ).json()
            assert preview["times"] == [NEXT_DAY_MS]
            assert [e["instant"] for e in preview["excluded"]] == [HOLIDAY_MS]

            async def skipped() -> list[Any]:
                return [r for r in await _rows(store, job["id"]) if r.planned_time == HOLIDAY_MS]

            [row] = await _until(skipped, LEAD_MS / 1000 + 20, "the holiday recorded as skipped")
            assert row.trigger_msg == "skipped by calendar 'holidays': dates[0] (2030-01-02)"
            state = run_state(
                trigger_code=row.trigger_code,
                handle_code=row.handle_code,
                now_ms=now_ms(),
                trigger_msg=row.trigger_msg,
                planned_time=row.planned_time,
            )
            assert state is RunState.SKIPPED and row.alarm_status == 1
            runs = (await http.get("/runs", params={"job_id": job["id"], "state": "skipped"})).json()
            assert [r["planned_time"] for r in runs["items"]] == [HOLIDAY_MS], runs

            async def advanced() -> bool:
                stored = await store.jobs.get(job["id"])
                return stored is not None and stored.trigger_next_time == NEXT_DAY_MS

            await _until(advanced, 10, "trigger_next_time moved past the holiday")
        assert executor.calls == []  # nothing was sent for the holiday
    finally:
        await stop(node)
    # A day later (the admin restarted with its clock before the next midnight): that one fires.
    node = await start_admin(url, "cal-b", tmp_path, env=_offset_to(NEXT_DAY_MS - LEAD_MS))
    try:

        # Sent, and its answer recorded (the executor has the call a moment before the admin
        # writes the trigger's code).
        async def sent() -> bool:
            rows = await _rows(store, job["id"])
            return bool(executor.calls) and any(r.trigger_code == 200 for r in rows)

        await _until(sent, LEAD_MS / 1000 + 20, "the next day's fire sent")
        rows = await _rows(store, job["id"])
        assert [(r.planned_time, r.trigger_code) for r in rows] == [(HOLIDAY_MS, 500), (NEXT_DAY_MS, 200)]
        assert [c.job_id for c in executor.calls] == [job["id"]]
    finally:
        await stop(node)
        await executor.stop()
