"""A run's identity on an executor is (logId, logDateTime). The admin asks executors which runs
they received (unsure fires, a dead admin's work) and kills broker runs by the candidates it
derives from the stored row (``run_candidates``), and sends an unsure fire again with
``sent_time_ms``: every path that sends a run must send a ``logDateTime`` those reproduce from
the row as stored, or a received run reads as lost and is sent, and run, twice."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from jobring.admin.store.records import HandleResult
from jobring.admin.trigger.fires import run_candidates, sent_time_ms
from jobring.admin.trigger.trigger import FireRequest
from jobring.core.enums import TriggerType
from jobring.core.flow.settings import FlowSettings
from tests.admin.trigger_kit import HOSTS, T0, Env, env_fixture

env = env_fixture(HOSTS)
pytestmark = pytest.mark.timeout(20)


async def _sent_matches_row(env: Env, log_id: int) -> int:
    (run,) = [c for c in env.double.runs() if c.body["logId"] == log_id]
    sent = int(run.body["logDateTime"])
    row = await env.store.logs.get(log_id)
    assert row is not None
    assert (log_id, sent) in run_candidates(row), (sent, row.trigger_time, row.planned_time)
    assert sent_time_ms(row) == sent
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
