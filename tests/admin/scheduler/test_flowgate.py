"""Flow control wired into the trigger: admission between recording and sending, the pump
that starts queued runs, skip / cancel-oldest, keys, priority and rate limits (SQLite store,
executor double, manual clock)."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

import pytest

from jobring.admin.store.records import HandleResult, JobInfo
from jobring.admin.trigger.trigger import FireRequest
from jobring.core.enums import TriggerType
from jobring.core.flow.scopes import OnLimit
from jobring.core.flow.settings import FlowSettings
from jobring.core.runstate import RunState, run_state
from tests.admin.trigger_kit import HOSTS, T0, Env, env_fixture

env = env_fixture(HOSTS)
pytestmark = pytest.mark.timeout(20)


def _flow(**fields: object) -> str:
    text = FlowSettings(**fields).to_json()  # type: ignore[arg-type]
    assert text is not None
    return text


async def _state(env: Env, log_id: int) -> RunState:
    entry = await env.store.logs.get(log_id)
    assert entry is not None
    return run_state(trigger_code=entry.trigger_code, trigger_msg=entry.trigger_msg,
                     handle_code=entry.handle_code, handle_msg=entry.handle_msg,
                     planned_time=entry.planned_time, now_ms=env.clock.now_ms())


async def _finish(env: Env, *log_ids: int) -> None:
    now = datetime.fromtimestamp(env.clock.now_ms() / 1000, tz=UTC)
    await env.store.logs.record_results([HandleResult(i, 200, "done", now) for i in log_ids])


async def _fire(env: Env, job: JobInfo, n: int, param: str | None = None) -> list[int]:
    ids = []
    for _ in range(n):
        result = await env.trigger.fire(FireRequest(job, TriggerType.MANUAL, executor_param=param))
        ids.extend(result.log_ids)
    return ids


def _sent(env: Env) -> list[int]:
    return [int(c.body["logId"]) for c in env.double.runs()]


async def _settle(env: Env) -> None:
    """Wait for the dispatches a pass started in the background."""
    await env.trigger.flow._work.wait()


async def test_a_job_limit_queues_then_starts_as_runs_end(env: Env) -> None:
    job = await env.job(flow=_flow(max_concurrent_runs=2))
    ids = await _fire(env, job, 5)
    assert _sent(env) == ids[:2]
    assert [await _state(env, i) for i in ids[2:]] == [RunState.QUEUED] * 3
    entry = await env.store.logs.get(ids[2])
    assert entry is not None and entry.trigger_msg == "queued: limit reached: job:" + str(job.id)
    assert await env.trigger.flow.pump_once() == 0  # nothing ended: nothing starts
    await _finish(env, ids[0])
    assert await env.trigger.flow.pump_once() == 1
    await _settle(env)
    assert _sent(env) == ids[:3]
    assert await _state(env, ids[2]) is RunState.RUNNING
    await _finish(env, ids[1], ids[2])
    assert await env.trigger.flow.pump_once() == 2
    await _settle(env)
    assert sorted(_sent(env)) == ids
    assert await env.store.flow.waiting_groups() == []


async def test_the_fire_result_says_queued(env: Env) -> None:
    job = await env.job(flow=_flow(max_concurrent_runs=1))
    await _fire(env, job, 1)
    result = await env.trigger.fire(FireRequest(job, TriggerType.API))
    assert result.trigger_code == 200 and result.trigger_msg.startswith("queued: ")


async def test_a_group_limit_counts_every_job_of_the_group(env: Env) -> None:
    await env.store.flow.set_group_flow(env.group_id, _flow(max_concurrent_runs=1))
    env.trigger.forget_groups()
    a, b = await env.job(), await env.job()
    first = await _fire(env, a, 1)
    second = await _fire(env, b, 1)
    assert _sent(env) == first and await _state(env, second[0]) is RunState.QUEUED


async def test_skip_policy(env: Env) -> None:
    job = await env.job(flow=_flow(max_concurrent_runs=1, on_limit=OnLimit.SKIP))
    ids = await _fire(env, job, 2)
    assert _sent(env) == ids[:1]
    assert await _state(env, ids[1]) is RunState.SKIPPED
    entry = await env.store.logs.get(ids[1])
    assert entry is not None and entry.alarm_status == 1  # neither retried nor alarmed


async def test_cancel_oldest_kills_the_oldest_running_run(env: Env) -> None:
    job = await env.job(flow=_flow(max_concurrent_runs=1, on_limit=OnLimit.CANCEL_OLDEST))
    ids = await _fire(env, job, 2)
    await _settle(env)
    assert _sent(env) == ids
    assert await _state(env, ids[0]) is RunState.KILLED and await _state(env, ids[1]) is RunState.RUNNING
    kills = [c for c in env.double.calls if c.path == "kill"]
    assert [c.body["jobId"] for c in kills] == [job.id]


async def test_fair_round_robin_between_keys_and_priority(env: Env) -> None:
    await env.store.flow.set_group_flow(env.group_id, _flow(max_concurrent_runs=1))
    env.trigger.forget_groups()
    keyed = _flow(concurrency_key="{{params.tenant}}")
    job = await env.job(flow=keyed)
    urgent = await env.job(flow=_flow(priority=3))
    first = await _fire(env, job, 1, "tenant=a")
    burst = await _fire(env, job, 3, "tenant=a")
    other = await _fire(env, job, 1, "tenant=b")
    high = await _fire(env, urgent, 1)
    order = list(first)
    for _ in range(5):
        await _finish(env, order[-1])
        assert await env.trigger.flow.pump_once() == 1
        await _settle(env)
        order.append(_sent(env)[-1])
    # The high priority first, then tenant b before the rest of tenant a's burst.
    assert order == first + high + [burst[0]] + other + burst[1:]


async def test_rate_limit_per_key_refills_with_time(env: Env) -> None:
    job = await env.job(flow=_flow(concurrency_key="{{params.tenant}}", rate_limit=2))
    ids = await _fire(env, job, 4, "tenant=x")
    assert _sent(env) == ids[:2]
    entry = await env.store.logs.get(ids[2])
    assert entry is not None and (entry.trigger_msg or "").startswith("queued: rate limit: key:job:")
    assert await env.trigger.flow.pump_once() == 0
    env.clock.advance(1_000)
    assert await env.trigger.flow.pump_once() == 2
    await _settle(env)
    assert sorted(_sent(env)) == ids


async def test_a_key_that_does_not_render_fails_the_trigger(env: Env) -> None:
    job = await env.job(flow=_flow(concurrency_key="{{params.tenant}}", key_limit=1))
    result = await env.trigger.fire(FireRequest(job, TriggerType.MANUAL, executor_param="nothing"))
    assert result.trigger_code == 500 and "concurrency_key" in result.trigger_msg
    assert await _state(env, result.log_ids[0]) is RunState.FAILED


async def test_cancelling_a_queued_run(env: Env) -> None:
    job = await env.job(flow=_flow(max_concurrent_runs=1))
    ids = await _fire(env, job, 2)
    assert await env.store.flow.cancel_queued(ids[0], None, "cancelled by flow control (x)", T0) is None
    cancelled = await env.store.flow.cancel_queued(ids[1], [env.group_id + 1], "x", T0)
    assert cancelled is None  # another group's credential cannot touch it
    msg = "cancelled by flow control (x)"
    cancelled = await env.store.flow.cancel_queued(ids[1], [env.group_id], msg, T0)
    assert cancelled is not None and await _state(env, ids[1]) is RunState.KILLED
    await _finish(env, ids[0])
    assert await env.trigger.flow.pump_once() == 0
    assert _sent(env) == ids[:1]


async def test_scheduled_fires_recorded_ahead_are_admitted_at_their_instant(env: Env) -> None:
    job = await env.job(flow=_flow(max_concurrent_runs=1))
    await env.hold(job)
    batch = await env.trigger.prepare_batch([FireRequest(job, TriggerType.CRON, planned_time=T0 + 1_000),
                                             FireRequest(job, TriggerType.CRON, planned_time=T0 + 2_000)])
    ids = [i for ids in batch.log_ids for i in ids]
    env.clock.advance(2_000)
    await env.trigger.dispatch_prepared(batch, record_later=True)
    await env.trigger.flush_results()
    assert _sent(env) == ids[:1]
    assert await _state(env, ids[1]) is RunState.QUEUED


async def test_jobs_without_flow_settings_never_reach_the_gate(env: Env) -> None:
    async def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("flow control was asked")

    env.store.flow.admission = refuse  # type: ignore[method-assign,assignment]
    job = await env.job()
    ids = await _fire(env, job, 3)
    assert _sent(env) == ids


async def test_queued_broadcast_shards_start_as_their_own_shard(env: Env) -> None:
    job = await env.job(flow=_flow(max_concurrent_runs=1), executor_route_strategy="SHARDING_BROADCAST")
    ids = [i for _ in range(2)
           for i in (await env.trigger.fire(FireRequest(job, TriggerType.MANUAL))).log_ids]
    assert len(ids) == 2 * len(HOSTS) and _sent(env) == ids[:1]
    for n, log_id in enumerate(ids[:-1]):
        await _finish(env, log_id)
        assert await env.trigger.flow.pump_once() == 1
        await _settle(env)
        assert _sent(env) == ids[:n + 2]
    shards = [(c.body["broadcastIndex"], c.body["broadcastTotal"]) for c in env.double.runs()]
    assert shards == [(i, len(HOSTS)) for i in range(len(HOSTS))] * 2


async def test_a_queued_run_is_sent_with_the_logical_time_it_was_recorded_with(env: Env) -> None:
    job = await env.job(flow=_flow(max_concurrent_runs=1))
    first = await _fire(env, job, 1)
    stands_for, interval = T0 - 86_400_000, T0 - 2 * 86_400_000
    queued = await env.trigger.fire(FireRequest(job, TriggerType.MANUAL, logical_time=stands_for,
                                                data_interval_start=interval))
    assert await _state(env, queued.log_ids[0]) is RunState.QUEUED
    await _finish(env, *first)
    assert await env.trigger.flow.pump_once() == 1
    await _settle(env)
    sent = [c.body for c in env.double.runs() if c.body["logId"] == queued.log_ids[0]]
    assert len(sent) == 1
    assert (sent[0]["logicalTime"], sent[0]["dataIntervalStart"]) == (stands_for, interval)


async def test_a_refused_fire_of_a_limited_job_fails_without_a_slot(env: Env) -> None:
    job = await env.job(flow=_flow(max_concurrent_runs=1),
                        timing='{"params_template": true}', executor_param="{{ nope(")
    ids = await _fire(env, job, 1)
    assert _sent(env) == []
    entry = await env.store.logs.get(ids[0])
    assert entry is not None and entry.trigger_code == 500
    assert "params template" in (entry.trigger_msg or "")
    assert await env.store.flow.waiting_groups() == []


async def test_work_still_running_at_close_is_cancelled(env: Env) -> None:
    # A dispatch that outlasts the close must not go on after the trigger service and its
    # store are closed.
    started = asyncio.Event()

    async def hanging() -> None:
        started.set()
        await asyncio.Event().wait()

    env.trigger.flow._spawn(hanging(), "a hanging dispatch")
    (task,) = env.trigger.flow._work.tasks
    await started.wait()
    await env.trigger.flow.close(wait_s=0.01)
    await asyncio.wait({task}, timeout=5.0)
    assert task.cancelled()
