"""Overlap policies and catch-up windows on real admin processes (issue 24 items 3 and 4).

- Catch-up after an admin outage: the admin is stopped, the job's planned instant is a minute in
  the past when it comes back (as after a minute's outage), and the job has a 20 s window: the
  missed instants of the last 20 s fire once each (MISFIRE runs), the older ones are recorded as
  skipped runs, then the job goes on on time; every missed second is accounted for once.
- Overlap with a long-running handler: the recording executor never reports a result by itself
  (a run is in progress until the test sends its callback). ``skip`` records the fires due meanwhile
  as skipped; ``buffer_one`` keeps one waiting and starts it as soon as the run ends;
  ``terminate_other`` kills the running one on its executor and starts the new one at once."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TypeVar

import pytest

from jobring.admin.loop.overlap import TERMINATED_MSG
from jobring.admin.store import Store
from jobring.admin.store.records import LogEntry
from tests.e2e import sqlite_kit
from tests.e2e.admin_nodes import RecordingExecutor, add_manual_group, now_ms, start_admin, stop
from tests.e2e.security_kit import logged_in
from tests.e2e.sqlite_kit import report_success
from tests.e2e.waiting import eventually

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(180)]
database = sqlite_kit.database  # the shared SQLite fixture

T = TypeVar("T")
SECOND = 1_000




async def _until(what: str, check: Callable[[], Awaitable[T | None]], limit_s: float = 30.0) -> T:
    return await eventually(what, check, limit_s)




def _job(group: int, timing: dict[str, object]) -> dict[str, object]:
    return {"job_group": group, "job_desc": "policy", "executor_handler": "slow", "schedule_type": "CRON",
            "schedule_conf": "* * * * * ?", "schedule_timezone": "UTC", "timing": timing}


async def _runs(store: Store, job_id: int) -> list[LogEntry]:
    return sorted(await store.logs.for_job(job_id), key=lambda e: e.planned_time or 0)


async def _the_run_in_progress(store: Store, job_id: int) -> int:
    """The job's one run sent and accepted without a result yet. A loaded machine can make a
    send time out on the admin's side (a failed trigger, no longer in progress, though the
    executor got it): the next fire then starts, so the executor's calls are not the count."""
    runs = await _runs(store, job_id)
    accepted = [e.id for e in runs if e.trigger_code == 200 and e.handle_code == 0]
    assert len(accepted) == 1, [(e.id, e.trigger_code, e.handle_code, e.trigger_msg) for e in runs]
    return accepted[0]


# An admin restarted on the clock (its catch-up is judged within a second of its start): a
# loaded machine makes it slow to catch up.
@pytest.mark.quiet
async def test_catch_up_after_an_admin_outage(database: tuple[str, Store], tmp_path: Path) -> None:
    url, store = database
    executor = RecordingExecutor()
    await executor.start()
    group = await add_manual_group(store, executor.address)
    node = await start_admin(url, "catch-up-a", tmp_path)
    try:
        async with logged_in(node) as http:
            r = await http.post("/jobs", json=_job(group, {"catch_up": {"window_seconds": 20}}))
            assert r.status_code == 201, r.text
            job = r.json()
            assert job["timing"]["catch_up"] == {"window_seconds": 20, "mode": "each", "limit": 100}
        assert await stop(node) == 0
        # The job was running when the admin went down a minute ago: its planned instant is a
        # minute old when the admin comes back.
        down_from = (now_ms() // SECOND - 60) * SECOND
        await store.jobs.set_status(job["id"], 1, down_from)
        before: set[int | None] = set()
        sent_before = len(executor.calls)
        node = await start_admin(url, "catch-up-b", tmp_path)
        back = now_ms()

        async def on_time_again() -> list[LogEntry] | None:
            # The catch-up's runs are recorded apart from the on-time fires: under load the
            # first on-time run can be written before them, so wait for all three kinds.
            runs = [e for e in await _runs(store, job["id"]) if e.planned_time not in before]
            on_time = any(e.trigger_type == "CRON" and (e.planned_time or 0) > back for e in runs)
            caught_up = any(e.trigger_type == "MISFIRE" for e in runs)
            skipped = any((e.trigger_msg or "").startswith("skipped by catch-up") for e in runs)
            return runs if on_time and caught_up and skipped else None

        runs = await _until("the job on time again", on_time_again)
        caught = [e.planned_time or 0 for e in runs if e.trigger_type == "MISFIRE"]
        skipped = [e for e in runs if (e.trigger_msg or "").startswith("skipped by catch-up")]
        assert caught and skipped
        # The missed instants within the window fired once each; the older ones were skipped.
        assert max(caught) - min(caught) <= 20 * SECOND and min(caught) >= back - 21 * SECOND
        assert max(e.planned_time or 0 for e in skipped) < min(caught)
        assert all("older than the catch-up window" in (e.trigger_msg or "") for e in skipped)
        # Every second from the outage on is accounted for once: skipped, caught up, or fired.
        planned = sorted(e.planned_time or 0 for e in runs if (e.planned_time or 0) >= down_from)
        assert planned == list(range(down_from, planned[-1] + 1, SECOND))
        received = {c.log_id for c in executor.calls[sent_before:]}
        assert received >= {e.id for e in runs if e.trigger_type == "MISFIRE"}
    finally:
        await stop(node)
        await executor.stop()


async def test_overlap_policies_with_a_long_running_handler(
    database: tuple[str, Store], tmp_path: Path
) -> None:
    url, store = database
    executor = RecordingExecutor()
    await executor.start()
    group = await add_manual_group(store, executor.address)
    node = await start_admin(url, "overlap-a", tmp_path)
    try:
        async with logged_in(node) as http:
            jobs = {}
            for policy in ("skip", "buffer_one", "terminate_other"):
                r = await http.post("/jobs", json=_job(group, {"overlap": policy}))
                assert r.status_code == 201 and r.json()["timing"]["overlap"] == policy, r.text
                jobs[policy] = r.json()["id"]
                assert (await http.post(f"/jobs/{jobs[policy]}/start")).status_code == 200

            def calls(policy: str) -> list[int]:
                return [c.log_id for c in executor.calls if c.job_id == jobs[policy]]

            async def skipped(policy: str, at_least: int) -> list[LogEntry] | None:
                runs = [e for e in await _runs(store, jobs[policy])
                        if (e.trigger_msg or "").startswith("skipped by overlap")]
                return runs if len(runs) >= at_least else None

            # skip: the first run goes on; the fires due meanwhile are recorded as skipped.
            await _until("skip: 3 fires skipped", lambda: skipped("skip", 3))
            skip_run = await _the_run_in_progress(store, jobs["skip"])
            assert skip_run in calls("skip")
            await report_success(node.base_url, skip_run)
            await _until("skip: a run after the first ended",
                         lambda: asyncio.sleep(0, [c for c in calls("skip") if c > skip_run] or None))

            # buffer_one: one fire waits (the later ones are skipped) and starts once the run ends.
            await _until("buffer_one: later fires skipped", lambda: skipped("buffer_one", 2))
            buffered_run = await _the_run_in_progress(store, jobs["buffer_one"])
            waiting = await store.overlap.waiting(jobs["buffer_one"])
            assert len(waiting) == 1
            await report_success(node.base_url, buffered_run)
            later = await _until("buffer_one: the waiting fire started", lambda: asyncio.sleep(
                0, [c for c in calls("buffer_one") if c > buffered_run] or None))
            second = await store.logs.get(later[0])
            assert second is not None and second.planned_time == waiting[0].planned_time
            (call,) = [c for c in executor.calls if c.log_id == second.id]
            assert call.logical_time == waiting[0].planned_time  # it stands for its instant

            # terminate_other: each fire ends the run before it (recorded failed) and starts at once.
            await _until("terminate_other: 3 runs",
                         lambda: asyncio.sleep(0, calls("terminate_other")[2:] or None))
            first = await store.logs.get(calls("terminate_other")[0])
            assert first is not None and first.handle_code == 500 and first.handle_msg == TERMINATED_MSG
            assert len(await store.overlap.in_progress(jobs["terminate_other"])) <= 2
    finally:
        await stop(node)
        await executor.stop()
