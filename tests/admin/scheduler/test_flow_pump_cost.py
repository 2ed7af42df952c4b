"""Regression tests of the flow-control security review: a job's (and a group's) queue is
capped, new arrivals past it are skipped with a clear message, and the pump passes a group
that cannot move again only when something may have changed (no locked pass per poke)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from jobring.admin.store.records import HandleResult, JobInfo
from jobring.admin.trigger import flowgate
from jobring.admin.trigger.trigger import FireRequest
from jobring.core.enums import TriggerType
from jobring.core.flow.settings import FlowSettings
from tests.admin.trigger_kit import HOSTS, Env, env_fixture

env = env_fixture(HOSTS)
pytestmark = pytest.mark.timeout(20)


def _flow(**fields: object) -> str:
    text = FlowSettings(**fields).to_json()  # type: ignore[arg-type]
    assert text is not None
    return text


async def _fire(env: Env, job: JobInfo, n: int) -> list[int]:
    ids: list[int] = []
    for _ in range(n):
        ids.extend((await env.trigger.fire(FireRequest(job, TriggerType.MANUAL))).log_ids)
    return ids


async def test_arrivals_past_the_job_queue_cap_are_skipped(env: Env) -> None:
    env.trigger.flow.max_queued_per_job = 3
    job = await env.job(flow=_flow(max_concurrent_runs=1))
    ids = await _fire(env, job, 6)
    queued = [await env.store.logs.get(i) for i in ids]
    msgs = [e.trigger_msg or "" for e in queued if e is not None]
    assert sum(m.startswith("queued: ") for m in msgs) == 3
    skipped = [m for m in msgs if "queue full" in m]
    assert len(skipped) == 2 and skipped[0].startswith("skipped by flow limit queue full: job ")
    assert f"job {job.id} has 3 runs queued (at most 3)" in skipped[0]


async def test_arrivals_past_the_group_queue_cap_are_skipped(env: Env) -> None:
    env.trigger.flow.max_queued_per_group = 2
    first = await env.job(flow=_flow(max_concurrent_runs=1))
    second = await env.job(flow=_flow(max_concurrent_runs=1))
    ids = await _fire(env, first, 3) + await _fire(env, second, 3)
    msgs = [(e.trigger_msg or "") for e in [await env.store.logs.get(i) for i in ids] if e is not None]
    assert sum(m.startswith("queued: ") for m in msgs) == 2
    assert sum("queue full: group " in m for m in msgs) == 2


async def test_a_stuck_queue_costs_no_locked_pass_until_something_changes(
    env: Env, monkeypatch: pytest.MonkeyPatch
) -> None:
    job = await env.job(flow=_flow(max_concurrent_runs=1, rate_limit=1, rate_period="hour"))
    ids = await _fire(env, job, 20)
    passes = 0
    admission = env.store.flow.admission

    async def counted(*args: object, **kwargs: object) -> object:
        nonlocal passes
        passes += 1
        return await admission(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(env.store.flow, "admission", counted)
    assert await env.trigger.flow.pump_once(full=False) == 0
    assert await env.trigger.flow.pump_once(full=False) == 0
    assert passes == 0  # nothing ended, no token due: no pass under the lock
    now = datetime.fromtimestamp(env.clock.now_ms() / 1000, tz=UTC)
    await env.store.logs.record_results([HandleResult(ids[0], 200, "done", now)])
    assert await env.trigger.flow.pump_once(full=False) == 0  # the rate limit still holds them
    assert passes == 1
    assert await env.trigger.flow.pump_once(full=False) == 0 and passes == 1
    env.trigger.flow.changed(job.job_group)  # e.g. its limits were raised on this node
    await env.trigger.flow.pump_once(full=False)
    assert passes == 2
    await env.trigger.flow.pump_once()  # the safety poll passes every waiting group
    assert passes == 3


def test_the_safety_poll_is_slow() -> None:
    assert flowgate.SAFETY_POLL_MS >= 30_000
