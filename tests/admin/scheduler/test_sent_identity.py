"""A run's identity on an executor is (logId, logDateTime). The admin asks executors which runs
they received (unsure fires, a dead admin's work) and kills broker runs by the candidates it
derives from the stored row (``run_candidates``), and sends an unsure fire again with
``sent_time_ms``: every path that sends a run must send a ``logDateTime`` those reproduce from
the row as stored, or a received run reads as lost and is sent, and run, twice."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime
from zoneinfo import ZoneInfo

import pytest

from jobring.admin.store import Store
from jobring.admin.store.records import HandleResult, LogEntry, NewLog
from jobring.admin.store.zones import from_database, to_database
from jobring.admin.trigger.fires import run_candidates, sent_time_ms
from jobring.admin.trigger.trigger import FireRequest
from jobring.core.enums import TriggerType
from jobring.core.flow.settings import FlowSettings
from tests.admin.api_harness import api_env
from tests.admin.trigger_kit import HOSTS, T0, Env, env_fixture

env = env_fixture(HOSTS)
pytestmark = pytest.mark.timeout(20)


async def _sent_matches_row(env: Env, log_id: int) -> int:
    (run,) = [c for c in env.double.runs() if c.body["logId"] == log_id]
    sent = int(run.body["logDateTime"])
    row = await env.store.logs.get(log_id)
    assert row is not None
    assert row.sent_time == sent
    assert run_candidates(row)[0] == (log_id, sent)  # the recorded instant is asked about first
    # A row without it (recorded before the column, or by an XXL-JOB admin): from the rest.
    older = dataclasses.replace(row, sent_time=None)
    assert (log_id, sent) in run_candidates(older), (sent, row.trigger_time, row.planned_time)
    assert sent_time_ms(older) == sent
    return sent


@pytest.mark.parametrize("late_ms", [0, 5, 999, 1_000, 1_450, 3_999, 61_001])
async def test_a_late_scheduled_fire_keeps_an_identity_its_row_reproduces(env: Env, late_ms: int) -> None:
    job = await env.job()
    planned = T0 + 2_000
    env.clock.set(planned + late_ms)
    (result,) = await env.trigger.fire_batch([FireRequest(job, TriggerType.CRON, planned_time=planned)])
    sent = await _sent_matches_row(env, result.log_ids[0])
    assert sent <= planned + late_ms  # never stamped later than it was sent


@pytest.mark.parametrize("at_ms", [0, 1, 123, 999])
async def test_a_manual_fire_keeps_an_identity_its_row_reproduces(env: Env, at_ms: int) -> None:
    job = await env.job()
    env.clock.set(T0 + 7_000 + at_ms)
    result = await env.trigger.fire(FireRequest(job, TriggerType.MANUAL))
    await _sent_matches_row(env, result.log_ids[0])


async def test_a_run_queued_by_flow_control_keeps_an_identity_its_row_reproduces(env: Env) -> None:
    flow = FlowSettings(max_concurrent_runs=1).to_json()
    job = await env.job(flow=flow)
    first = await env.trigger.fire(FireRequest(job, TriggerType.CRON, planned_time=T0))
    queued = await env.trigger.fire(FireRequest(job, TriggerType.CRON, planned_time=T0 + 1_000))
    assert len(env.double.runs()) == 1
    env.clock.set(T0 + 4_321)  # admitted seconds after its instant, mid-second
    done = datetime.fromtimestamp(env.clock.now_ms() / 1000, tz=UTC)
    await env.store.logs.record_results([HandleResult(first.log_ids[0], 200, "done", done)])
    assert await env.trigger.flow.pump_once() == 1
    await env.trigger.flow._work.wait()  # noqa: SLF001 (the dispatch the pass started)
    await _sent_matches_row(env, first.log_ids[0])
    await _sent_matches_row(env, queued.log_ids[0])


async def test_each_shard_of_a_broadcast_keeps_the_instant_it_was_sent_with(env: Env) -> None:
    """Only the first shard's row carries the planned instant (the fire's unique identity); a
    column that rounds milliseconds (MySQL) moves the others' trigger time to the next second,
    at midnight to the next day's log folder."""
    job = await env.job(executor_route_strategy="SHARDING_BROADCAST")
    planned = T0 + 2_999
    env.clock.set(planned - 300)  # recorded ahead, sent with its planned instant
    (result,) = await env.trigger.fire_batch([FireRequest(job, TriggerType.CRON, planned_time=planned)])
    assert len(result.log_ids) == len(HOSTS)
    for log_id in result.log_ids:
        (run,) = [c for c in env.double.runs() if c.body["logId"] == log_id]
        row = await env.store.logs.get(log_id)
        assert row is not None and row.sent_time == run.body["logDateTime"] == planned
        assert sent_time_ms(row) == planned


def test_a_run_sent_in_a_database_zones_repeated_hour_is_still_recognised() -> None:
    """DST ends: 01:30 UTC is 02:30 in Berlin a second time, read back as its first occurrence
    (00:30 UTC), an hour early."""
    berlin = ZoneInfo("Europe/Berlin")
    sent = int(datetime(2026, 10, 25, 1, 30, tzinfo=UTC).timestamp() * 1000)
    wall = to_database(datetime.fromtimestamp(sent / 1000, tz=UTC), berlin)
    stored = from_database(wall.replace(fold=0), berlin)  # a DATETIME column keeps no fold
    assert _ms(stored) == sent - 3_600_000
    for planned in (sent, None):
        row = _row(stored, planned)
        assert (row.id, sent) in run_candidates(row)
        # With the instant recorded as sent, exactly, even without a planned one (a manual
        # run, a workflow node's, a late fire): asked about, read and resent by that alone.
        recorded = dataclasses.replace(row, sent_time=sent)
        assert run_candidates(recorded)[0] == (row.id, sent) and sent_time_ms(recorded) == sent
    assert sent_time_ms(_row(stored, sent)) == sent
    assert sent_time_ms(_row(stored, None)) == sent - 3_600_000  # the weakness the column ends


def test_a_run_an_earlier_admin_started_from_the_queue_is_still_recognised() -> None:
    """A rolling upgrade: an admin of an earlier version starts a queued run with the second it
    starts in (its new trigger time) and leaves the recorded sent_time as it was."""
    recorded_at = int(datetime(2026, 11, 30, 1, 0, 0, tzinfo=UTC).timestamp() * 1000)
    started = datetime(2026, 11, 30, 1, 0, 7)  # naive UTC, as the column reads back
    row = dataclasses.replace(_row(started, None), sent_time=recorded_at)
    assert run_candidates(row)[0] == (7, recorded_at)
    assert (7, _ms(started)) in run_candidates(row)


def _row(trigger_time: datetime, planned: int | None) -> LogEntry:
    fields: dict[str, object] = {f.name: None for f in dataclasses.fields(LogEntry)}
    fields.update(id=7, job_group=1, job_id=1, executor_fail_retry_count=0, trigger_code=0, handle_code=0,
                  trigger_time=trigger_time, planned_time=planned)
    return LogEntry(**fields)  # type: ignore[arg-type]


def _ms(value: datetime) -> int:
    return int(value.replace(tzinfo=UTC).timestamp() * 1000)


async def test_the_consoles_log_read_asks_with_the_instant_the_run_was_sent_with(sqlite_store: Store) -> None:
    """A run planned at 23:59:59.800 and sent late by half a second was sent with its planned
    instant (filed under that day by an XXL-JOB executor); its row keeps 00:00:00 of the next
    day. The log is asked for with what was sent."""
    async with api_env(sqlite_store) as env, env.client("op_in") as http:
        job = await env.add_job(env.group_a)
        planned = int(datetime(2026, 11, 29, 23, 59, 59, 800_000, tzinfo=UTC).timestamp() * 1000)
        (run,) = await sqlite_store.logs.insert_fires([NewLog(
            job_group=env.group_a, job_id=job,
            trigger_time=datetime.fromtimestamp((planned + 200) / 1000, tz=UTC),
            executor_handler="demo", executor_address=env.double.address(0), trigger_code=200,
            trigger_type="CRON", planned_time=planned)])
        assert run is not None
        answer = await http.get(f"/runs/{run}/log")
        assert answer.status_code == 200, answer.text
        call = env.double.calls[-1]
        assert call.path == "log" and call.body["logId"] == run and call.body["logDateTim"] == planned
