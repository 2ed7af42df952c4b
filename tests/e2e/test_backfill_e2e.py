"""Backfills on a real admin process: 30 daily instants with a parallelism cap of 3 run as 30
runs, oldest first, each carrying its logical time and data interval (and its params rendered
from them); never more than 3 are in progress; the backfill reports its progress and ends done.

The executor is the recording one: the test ends runs itself with callbacks, one at a time, so
the cap is checked without timing: run k+3 may only arrive after run k's callback was sent."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TypeVar

import pytest

from jobring.admin.store import Store
from tests.e2e import sqlite_kit
from tests.e2e.admin_nodes import RecordingExecutor, add_manual_group, start_admin, stop
from tests.e2e.security_kit import logged_in
from tests.e2e.sqlite_kit import report_success
from tests.e2e.waiting import eventually

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(180)]
database = sqlite_kit.database  # the shared SQLite fixture

T = TypeVar("T")
FIRST_DAY = datetime(2026, 3, 1, 2, 0, tzinfo=UTC)
DAYS = 30
CAP = 3




async def _until(what: str, check: Callable[[], Awaitable[T | None]], limit_s: float = 30.0) -> T:
    return await eventually(what, check, limit_s)




async def test_a_backfill_of_30_days_with_cap_3_runs_in_order_with_logical_dates(
    database: tuple[str, Store], tmp_path: Path
) -> None:
    url, store = database
    executor = RecordingExecutor()
    await executor.start()
    group = await add_manual_group(store, executor.address)
    node = await start_admin(url, "backfill-a", tmp_path)
    try:
        async with logged_in(node) as http:
            r = await http.post("/jobs", json={
                "job_group": group, "job_desc": "daily report", "executor_handler": "report",
                "schedule_type": "CRON", "schedule_conf": "0 2 * * *", "schedule_timezone": "UTC",
                "executor_param": 'day={{ logical_date | fmt("%Y%m%d") }} '
                                  'from={{ data_interval_start | fmt("%d") }}',
                "timing": {"params_template": True},
            })
            assert r.status_code == 201, r.text
            job = r.json()
            assert job["timing"]["params_template"] is True
            span = {"start": FIRST_DAY.isoformat(), "end": (FIRST_DAY + timedelta(days=DAYS - 1)).isoformat()}
            dry = await http.post(f"/jobs/{job['id']}/backfill",
                                  json={**span, "parallelism": CAP, "dry_run": True})
            assert dry.status_code == 200, dry.text
            expected = [int((FIRST_DAY + timedelta(days=i)).timestamp() * 1000) for i in range(DAYS)]
            assert [i["logical"] for i in dry.json()["instants"]] == expected
            assert dry.json()["instants"][0]["interval_start"] == expected[0] - 86_400_000
            assert (await http.get(f"/jobs/{job['id']}/backfills")).json() == []  # nothing started

            refused = await http.post(f"/jobs/{job['id']}/backfill", json={**span, "parallelism": 65})
            assert refused.status_code == 422 and refused.json()["field"] == "parallelism", refused.text

            r = await http.post(f"/jobs/{job['id']}/backfill", json={**span, "parallelism": CAP})
            assert r.status_code == 201, r.text
            backfill = r.json()
            assert (backfill["status"], backfill["total"], backfill["parallelism"]) == ("running", DAYS, CAP)

            for done in range(DAYS):
                want = min(done + CAP, DAYS)

                async def arrived(want: int = want) -> int | None:
                    return len(executor.calls) if len(executor.calls) >= want else None

                await _until(f"{want} runs dispatched", arrived)
                assert len(executor.calls) <= done + CAP, "more runs in progress than the cap"
                if done == 1:
                    progress = (await http.get(f"/backfills/{backfill['id']}")).json()
                    assert progress["running"] == CAP and progress["succeeded"] == 1, progress
                await report_success(node.base_url, executor.calls[done].log_id)

            calls = executor.calls
            assert [c.logical_time for c in calls] == expected  # oldest first, each once
            assert [c.data_interval_start for c in calls] == [e - 86_400_000 for e in expected]
            assert calls[0].params == "day=20260301 from=28" and calls[-1].params == "day=20260330 from=29"

            async def done_status() -> dict[str, object] | None:
                got = (await http.get(f"/backfills/{backfill['id']}")).json()
                return got if got["status"] == "done" else None

            final = await _until("the backfill done", done_status)
            assert (final["succeeded"], final["failed"], final["running"]) == (DAYS, 0, 0), final
            runs = (await http.get("/runs", params={"job_id": job["id"], "limit": 100})).json()
            assert {r["trigger_type"] for r in runs["items"]} == {"BACKFILL"}
            assert len(runs["items"]) == DAYS
    finally:
        await stop(node)
        await executor.stop()


async def test_a_cancelled_backfill_starts_nothing_more(database: tuple[str, Store], tmp_path: Path) -> None:
    url, store = database
    executor = RecordingExecutor()
    await executor.start()
    group = await add_manual_group(store, executor.address)
    node = await start_admin(url, "backfill-b", tmp_path)
    try:
        async with logged_in(node) as http:
            r = await http.post("/jobs", json={
                "job_group": group, "job_desc": "hourly", "executor_handler": "h",
                "schedule_type": "FIX_RATE", "schedule_conf": "3600"})
            job = r.json()
            r = await http.post(f"/jobs/{job['id']}/backfill", json={
                "dates": ["2026-03-01"], "order": "newest_first", "parallelism": 2})
            assert r.status_code == 201, r.text
            backfill = r.json()
            assert backfill["total"] == 24 and backfill["order"] == "newest_first"

            async def two() -> int | None:
                return len(executor.calls) if len(executor.calls) >= 2 else None

            await _until("2 runs dispatched", two)
            newest = int(datetime(2026, 3, 1, 23, tzinfo=UTC).timestamp() * 1000)
            assert [c.logical_time for c in executor.calls] == [newest, newest - 3_600_000]
            cancelled = await http.delete(f"/backfills/{backfill['id']}")
            assert cancelled.status_code == 200 and cancelled.json()["status"] == "cancelled", cancelled.text
            again = await http.delete(f"/backfills/{backfill['id']}")
            assert again.status_code == 409, again.text
            for call in list(executor.calls):
                await report_success(node.base_url, call.log_id)

            async def ended() -> dict[str, object] | None:
                got = (await http.get(f"/backfills/{backfill['id']}")).json()
                return got if got["running"] == 0 and got["succeeded"] == 2 else None

            await _until("the started runs ended", ended)
            # Ended runs leave room under the cap; a cancelled backfill uses none of it.
            [listed] = (await http.get(f"/jobs/{job['id']}/backfills")).json()
            assert listed["status"] == "cancelled" and listed["started"] == 2 and len(executor.calls) == 2
    finally:
        await stop(node)
        await executor.stop()
