"""The run state rules, and their SQL twin kept equal on every backend."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from sqlalchemy import update

from jobring.admin.store import JobGroup, JobInfo, NewLog, Store
from jobring.admin.store.log_conditions import state_condition
from jobring.admin.store.tables import job_log
from jobring.core import runstate
from jobring.core.runstate import RunState, duration_ms, run_state
from jobring.executor import jobworker, worker

NOW_MS = 1_773_144_000_000
FIRE = "Trigger type: Cron\n>>>>>>>>>>> Trigger Job <<<<<<<<<<<\naddress: http://e/\ncode: 500\nmsg: "

# (trigger_code, trigger_msg, handle_code, handle_msg, planned_time) -> state
CASES: list[tuple[int, str | None, int, str | None, int | None, RunState]] = [
    (0, None, 0, None, NOW_MS + 2_000, RunState.SCHEDULED),
    (0, None, 0, None, NOW_MS, RunState.DISPATCHING),
    (0, None, 0, None, None, RunState.DISPATCHING),
    (200, "ok", 0, None, NOW_MS - 5, RunState.RUNNING),
    (200, "ok", 200, None, NOW_MS - 5, RunState.SUCCESS),
    (0, None, 200, "early callback", None, RunState.SUCCESS),
    (200, "ok", 500, "ValueError: bad input", None, RunState.FAILED),
    (200, "ok", 500, None, None, RunState.FAILED),
    (200, "ok", 502, jobworker.MSG_TIMEOUT, None, RunState.TIMED_OUT),
    (200, "ok", 500, worker.REASON_KILL + jobworker.SUFFIX_RUNNING, None, RunState.KILLED),
    (200, "ok", 500, jobworker.REASON_COVER_EARLY + jobworker.SUFFIX_QUEUED, None, RunState.KILLED),
    (200, "ok", 500, "killed by user (admin)", None, RunState.KILLED),
    (200, "ok", 500, runstate.LOST_RESULT_MSG, None, RunState.LOST),
    (200, "ok", 500, runstate.LOST_PREFIX + " executor http://e/ gone (no heartbeat)", None, RunState.LOST),
    (500, runstate.LOST_DISPATCH_PREFIX + "; marked as failed\n\n>>> Fail retry", 0, None, 5, RunState.LOST),
    (500, FIRE + worker.MSG_DISCARD_LATER, 0, None, NOW_MS - 5, RunState.SKIPPED),
    (500, runstate.CALENDAR_SKIP_PREFIX + "'cn': dates[0]", 0, None, NOW_MS - 5, RunState.SKIPPED),
    (500, FIRE + "connection refused", 0, None, NOW_MS - 5, RunState.FAILED),
    (500, None, 0, None, None, RunState.FAILED),
    (404, "not found", 0, None, None, RunState.FAILED),
    (0, runstate.QUEUED_PREFIX + "job:7 full", 0, None, None, RunState.QUEUED),
    (0, runstate.QUEUED_PREFIX + "job:7 full", 0, None, NOW_MS + 9_000, RunState.QUEUED),
    (500, runstate.FLOW_SKIP_PREFIX + "job:7 (2 of 2 running)", 0, None, None, RunState.SKIPPED),
    (0, runstate.QUEUED_PREFIX + "job:7 full", 500, runstate.FLOW_CANCEL_PREFIX + " (alice)", None,
     RunState.KILLED),
    (200, "ok", 500, runstate.FLOW_CANCEL_PREFIX + ": replaced by run 9", None, RunState.KILLED),
]


@pytest.mark.parametrize("case", CASES, ids=[f"{c[-1].value}-{i}" for i, c in enumerate(CASES)])
def test_run_state(case: tuple[int, str | None, int, str | None, int | None, RunState]) -> None:
    trigger_code, trigger_msg, handle_code, handle_msg, planned, expected = case
    got = run_state(trigger_code=trigger_code, trigger_msg=trigger_msg, handle_code=handle_code,
                    handle_msg=handle_msg, planned_time=planned, now_ms=NOW_MS)
    assert got is expected


def test_every_state_is_covered_and_final_flags() -> None:
    assert {c[-1] for c in CASES} == set(RunState)
    waiting = {RunState.SCHEDULED, RunState.QUEUED, RunState.DISPATCHING, RunState.RUNNING}
    assert {s for s in RunState if not s.is_final} == waiting
    assert {s for s in RunState if s.is_active} == {RunState.DISPATCHING, RunState.RUNNING}


def test_markers_match_the_writers_and_hold_no_like_wildcards() -> None:
    from jobring.admin.api.management import runs
    from jobring.admin.loop.timed import skip_message
    from jobring.admin.monitors import monitors
    from jobring.core.timing import SkipKind, SkippedFire, SkipReason

    assert runstate.LOST_RESULT_MSG == monitors.MSG_RESULT_LOST
    assert monitors.lost_message("http://e/", 90).startswith(runstate.LOST_PREFIX)
    assert runstate.KILL_REASON == worker.REASON_KILL
    assert monitors.MSG_DISPATCH_LOST.startswith(runstate.LOST_DISPATCH_PREFIX)
    assert runstate.DISCARD_MARK == worker.MSG_DISCARD_LATER
    skip = SkippedFire(0, SkipReason(SkipKind.CALENDAR, "calendar 'x': dates[0]", "x"))
    assert skip_message(skip).startswith(runstate.CALENDAR_SKIP_PREFIX)
    assert runstate.KILLED_SUFFIXES == (jobworker.SUFFIX_RUNNING, jobworker.SUFFIX_QUEUED)
    assert runs.KILLED_BY_USER == runstate.KILLED_BY_USER
    markers = (runstate.LOST_RESULT_MSG, runstate.LOST_DISPATCH_PREFIX, runstate.DISCARD_MARK,
               runstate.LOST_PREFIX, runstate.CALENDAR_SKIP_PREFIX,
               runstate.KILLED_BY_USER, *runstate.KILLED_SUFFIXES, runstate.QUEUED_PREFIX,
               runstate.FLOW_SKIP_PREFIX, runstate.FLOW_CANCEL_PREFIX)
    assert not any("%" in m or "_" in m for m in markers)


def test_killed_by_user() -> None:
    assert runstate.killed_by_user("killed by user (admin): stopped")
    assert runstate.killed_by_user(worker.REASON_KILL + jobworker.SUFFIX_QUEUED)
    assert not runstate.killed_by_user(jobworker.REASON_COVER_EARLY + jobworker.SUFFIX_RUNNING)
    assert not runstate.killed_by_user(jobworker.REASON_STOPPING + jobworker.SUFFIX_RUNNING)
    assert not runstate.killed_by_user(None)
    assert runstate.killed_by_user(runstate.FLOW_CANCEL_PREFIX + ": replaced by run 9")


def test_duration() -> None:
    assert duration_ms(started_ms=1_000, finished_ms=3_500) == 2_500
    assert duration_ms(started_ms=1_500, finished_ms=1_000) == 0  # the finish has whole seconds
    assert duration_ms(started_ms=1_000, finished_ms=None) is None
    assert duration_ms(started_ms=None, finished_ms=1_000) is None


async def test_sql_states_equal_the_rules(store: Store) -> None:
    now = datetime(2026, 3, 10, 12, 0, 0)
    group = await store.groups.create(JobGroup(app_name="state-app", title="States"), now)
    job = await store.jobs.create(JobInfo(job_group=group, job_desc="j", executor_handler="h"))
    expected: dict[int, RunState] = {}
    for i, (trigger_code, trigger_msg, handle_code, handle_msg, planned, state) in enumerate(CASES):
        log_id = await store.logs.insert(NewLog(
            group, job, datetime.fromtimestamp(NOW_MS / 1000, tz=UTC), trigger_code=trigger_code,
            trigger_msg=trigger_msg, handle_code=handle_code,
            planned_time=None if planned is None else planned + i,  # unique per job
        ))
        if handle_msg is not None:
            async with store.db.write() as conn:
                stmt = update(job_log).where(job_log.c.id == log_id).values(handle_msg=handle_msg)
                await conn.execute(stmt)
        expected[log_id] = state
    for state in RunState:
        page = await store.logs.list(job_id=job, states=[state], now_ms=NOW_MS + len(CASES), limit=100)
        assert {e.id for e in page.items} == {i for i, s in expected.items() if s is state}, state
    listed = await store.logs.list(job_id=job, states=set(RunState) - {RunState.SCHEDULED},
                                   now_ms=NOW_MS + len(CASES), limit=100)
    assert {e.id for e in listed.items} == {i for i, s in expected.items() if s is not RunState.SCHEDULED}
    ended = {RunState.SUCCESS, RunState.FAILED, RunState.KILLED, RunState.TIMED_OUT, RunState.LOST}
    some = await store.logs.list(job_id=job, states=ended, now_ms=NOW_MS + len(CASES), limit=100)
    assert {e.id for e in some.items} == {i for i, s in expected.items() if s in ended}
    every = await store.logs.list(job_id=job, states=list(RunState), now_ms=NOW_MS, limit=100)
    assert every.total == len(CASES)
    assert (await store.logs.list(job_id=job, states=[], now_ms=NOW_MS)).total == 0
    assert state_condition(RunState.SCHEDULED, NOW_MS) is not None
