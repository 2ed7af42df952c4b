from __future__ import annotations

import asyncio
from dataclasses import replace
from datetime import UTC, datetime

import pytest

from jobring.admin.store import Store
from jobring.admin.store.records import JobGroup
from jobring.admin.trigger import groups
from jobring.admin.trigger.trigger import FireRequest, PreparedBatch, TriggerRejected
from jobring.core.enums import TriggerType
from jobring.protocol.models import ReturnT, TriggerParam
from tests.admin.executor_double import blocking_answer
from tests.admin.trigger_kit import HOSTS, T0, Env, env_fixture, make_env

env = env_fixture(HOSTS)


async def test_fire_inserts_log_then_calls_run_and_records_answer(env: Env) -> None:
    job = await env.job(executor_param="p1", executor_timeout=7, executor_block_strategy="DISCARD_LATER",
                        glue_updatetime=datetime(2026, 1, 2, 3, 4, 5))
    result = await env.trigger.fire(FireRequest(job, TriggerType.MANUAL))
    assert not result.duplicate and result.trigger_code == 200 and len(result.log_ids) == 1
    (call,) = env.double.runs()
    assert call.address == env.double.address(0)
    assert call.headers["XXL-JOB-ACCESS-TOKEN"] == "tok"
    body = call.body
    assert body["jobId"] == job.id and body["logId"] == result.log_ids[0]
    assert body["executorHandler"] == "demoJobHandler" and body["executorParams"] == "p1"
    assert body["executorBlockStrategy"] == "DISCARD_LATER" and body["executorTimeout"] == 7
    assert body["logDateTime"] == T0 and body["glueType"] == "BEAN"
    assert body["glueUpdatetime"] == int(datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC).timestamp() * 1000)
    assert (body["broadcastIndex"], body["broadcastTotal"]) == (0, 1)
    entry = await env.store.logs.get(result.log_ids[0])
    assert entry is not None
    assert entry.executor_address == env.double.address(0) and entry.trigger_code == 200
    assert entry.handle_code == 0 and entry.trigger_type == "MANUAL" and entry.admin_node == "node-a"
    assert entry.dispatch_time == T0 and entry.executor_param == "p1"
    msg = entry.trigger_msg or ""
    for fragment in ("Manual trigger", "node-a", "Route strategy: FIRST", "Block strategy: DISCARD_LATER",
                     "Timeout: 7", "Fail retry count: 0", f"address: {env.double.address(0)}", "code: 200"):
        assert fragment in msg
    assert "msg:" not in msg  # the executor's success has no message: no "msg: None"


async def test_param_and_retry_count_overrides(env: Env) -> None:
    job = await env.job(executor_param="default", executor_fail_retry_count=3)
    req = FireRequest(job, TriggerType.API, executor_param="over", fail_retry_count=1)
    result = await env.trigger.fire(req)
    entry = await env.store.logs.get(result.log_ids[0])
    assert entry is not None and entry.executor_param == "over" and entry.executor_fail_retry_count == 1
    assert env.double.runs()[0].body["executorParams"] == "over"


async def test_no_address_fails_and_is_recorded(sqlite_store: Store) -> None:
    env = await make_env(sqlite_store, [])
    try:
        job = await env.job()
        result = await env.trigger.fire(FireRequest(job, TriggerType.CRON, planned_time=T0))
    finally:
        await env.trigger.close()
    assert result.trigger_code == 500 and env.double.calls == []
    entry = await sqlite_store.logs.get(result.log_ids[0])
    assert entry is not None and entry.trigger_code == 500 and entry.executor_address is None
    assert "registry address is empty" in (entry.trigger_msg or "")
    assert entry.planned_time == T0


async def test_executor_refusal_and_unreachable_are_recorded(env: Env) -> None:
    async def refuse(body: dict[str, object]) -> ReturnT:
        return ReturnT.fail("job handler [x] not found.")

    env.double.answer(env.double.address(0), "run", refuse)
    job = await env.job()
    refused = await env.trigger.fire(FireRequest(job, TriggerType.MANUAL))
    env.double.down.add(HOSTS[0])
    unreachable = await env.trigger.fire(FireRequest(job, TriggerType.MANUAL))
    a = await env.store.logs.get(refused.log_ids[0])
    b = await env.store.logs.get(unreachable.log_ids[0])
    assert a is not None and a.trigger_code == 500 and "job handler [x] not found." in (a.trigger_msg or "")
    assert b is not None and b.trigger_code == 500 and "unreachable" in (b.trigger_msg or "")


async def test_planned_fire_is_dispatched_once_in_a_batch_and_across_nodes(env: Env) -> None:
    job = await env.job()
    other = await env.job()
    first = await env.trigger.fire_batch([
        FireRequest(job, TriggerType.CRON, planned_time=T0),
        FireRequest(job, TriggerType.CRON, planned_time=T0),
        FireRequest(other, TriggerType.CRON, planned_time=T0),
    ])
    assert [r.duplicate for r in first] == [False, True, False]
    node_b = env.service("node-b")
    try:
        second = await node_b.fire_batch([FireRequest(job, TriggerType.CRON, planned_time=T0),
                                          FireRequest(job, TriggerType.CRON, planned_time=T0 + 1000)])
    finally:
        await node_b.close()
    assert [r.duplicate for r in second] == [True, False]
    assert len(env.double.runs()) == 3
    assert [e.planned_time for e in await env.store.logs.for_job(job.id)] == [T0, T0 + 1000]


async def test_concurrent_nodes_fire_each_planned_instant_once(env: Env) -> None:
    jobs = [await env.job() for _ in range(5)]
    nodes = [env.service(f"node-{i}") for i in range(3)]
    try:
        reqs = [FireRequest(j, TriggerType.CRON, planned_time=T0 + k * 1000) for j in jobs for k in range(4)]
        results = await asyncio.gather(*(n.fire_batch(reqs) for n in nodes))
    finally:
        for n in nodes:
            await n.close()
    fired = sum(not r.duplicate for per_node in results for r in per_node)
    assert fired == len(reqs) == len(env.double.runs())


async def test_broadcast_one_log_per_address_with_shard_params(env: Env) -> None:
    job = await env.job(executor_route_strategy="SHARDING_BROADCAST")
    result = await env.trigger.fire(FireRequest(job, TriggerType.CRON, planned_time=T0))
    assert len(result.log_ids) == 3 and result.trigger_code == 200
    runs = env.double.runs()
    shards = sorted((c.address, c.body["broadcastIndex"], c.body["broadcastTotal"]) for c in runs)
    assert shards == [(env.double.address(i), i, 3) for i in range(3)]
    entries = await env.store.logs.for_job(job.id)
    assert sorted((e.executor_sharding_param, e.executor_address) for e in entries) == [
        (f"{i}/3", env.double.address(i)) for i in range(3)]
    assert "SHARDING_BROADCAST(1/3)" in (entries[1].trigger_msg or "")
    # The same planned broadcast again is a duplicate as a whole.
    again = await env.trigger.fire(FireRequest(job, TriggerType.CRON, planned_time=T0))
    assert again.duplicate and len(env.double.runs()) == 3
    assert len(await env.store.logs.for_job(job.id)) == 3


async def test_retry_of_one_shard_runs_only_that_shard(env: Env) -> None:
    job = await env.job(executor_route_strategy="SHARDING_BROADCAST")
    result = await env.trigger.fire(FireRequest(job, TriggerType.RETRY, sharding=(2, 3)))
    assert len(result.log_ids) == 1
    (call,) = env.double.runs()
    assert call.address == env.double.address(2) and call.body["broadcastIndex"] == 2


async def test_manual_address_override_must_be_registered(env: Env) -> None:
    job = await env.job()
    chosen = [env.double.address(2)]
    ok = await env.trigger.fire(FireRequest(job, TriggerType.MANUAL, address_override=chosen))
    assert env.double.runs()[0].address == env.double.address(2)
    entry = await env.store.logs.get(ok.log_ids[0])
    assert entry is not None and "Executor registry type: manual" in (entry.trigger_msg or "")
    with pytest.raises(TriggerRejected, match="not registered"):
        await env.trigger.fire(FireRequest(job, TriggerType.MANUAL, address_override=["http://169.254.169.254/"]))
    with pytest.raises(TriggerRejected, match="manual"):
        await env.trigger.fire(FireRequest(job, TriggerType.API, address_override=[env.double.address(0)]))
    assert len(await env.store.logs.for_job(job.id)) == 1  # rejected requests wrote nothing


async def test_failover_skips_dead_executor(env: Env) -> None:
    env.double.down.add(HOSTS[0])
    job = await env.job(executor_route_strategy="FAILOVER")
    result = await env.trigger.fire(FireRequest(job, TriggerType.MANUAL))
    assert result.trigger_code == 200
    assert [c.address for c in env.double.runs()] == [env.double.address(1)]
    entry = await env.store.logs.get(result.log_ids[0])
    assert entry is not None and entry.executor_address == env.double.address(1)
    assert "beat: address=http://10.0.0.1:9999/ code=500" in (entry.trigger_msg or "")


async def test_busyover_uses_idle_beat(env: Env) -> None:
    async def busy(body: dict[str, object]) -> ReturnT:
        return ReturnT.fail("job thread is running or has trigger queue.")

    env.double.answer(env.double.address(0), "idleBeat", busy)
    env.double.answer(env.double.address(1), "idleBeat", busy)
    job = await env.job(executor_route_strategy="BUSYOVER")
    await env.trigger.fire(FireRequest(job, TriggerType.MANUAL))
    assert [c.address for c in env.double.runs()] == [env.double.address(2)]
    assert [c.body for c in env.double.calls if c.path == "idleBeat"][0] == {"jobId": job.id}


async def test_unknown_route_strategy_fails_the_trigger(env: Env) -> None:
    job = await env.job(executor_route_strategy="NOPE")
    result = await env.trigger.fire(FireRequest(job, TriggerType.MANUAL))
    assert result.trigger_code == 500 and "unknown route strategy" in result.trigger_msg
    assert env.double.runs() == []


async def test_slow_lane_keeps_slow_job_from_delaying_others(sqlite_store: Store) -> None:
    env = await make_env(sqlite_store, HOSTS[:2])
    slow_trigger = env.service("node-a", fast_pool=1, slow_pool=1)
    try:
        slow_job = await env.job()  # FIRST -> HOSTS[0]
        fast_job = await env.job(executor_route_strategy="LAST")  # -> HOSTS[1]
        for _ in range(11):
            slow_trigger.lanes.record(slow_job.id, 600)
        assert slow_trigger.lanes.is_slow(slow_job.id)
        release, started = asyncio.Event(), asyncio.Event()
        env.double.answer(env.double.address(0), "run", blocking_answer(release, started))
        slow_fire = asyncio.create_task(slow_trigger.fire(FireRequest(slow_job, TriggerType.MANUAL)))
        await asyncio.wait_for(started.wait(), 5)
        # The fast lane (size 1) is free although the slow executor holds its call open.
        fast = await asyncio.wait_for(slow_trigger.fire(FireRequest(fast_job, TriggerType.MANUAL)), 5)
        assert fast.trigger_code == 200 and not slow_fire.done()
        release.set()
        assert (await asyncio.wait_for(slow_fire, 5)).trigger_code == 200
    finally:
        await slow_trigger.close()
        await env.trigger.close()


async def test_close_waits_for_in_flight_dispatch(env: Env) -> None:
    release, started = asyncio.Event(), asyncio.Event()
    env.double.answer(env.double.address(0), "run", blocking_answer(release, started))
    job = await env.job()
    fire = asyncio.create_task(env.trigger.fire(FireRequest(job, TriggerType.MANUAL)))
    await asyncio.wait_for(started.wait(), 5)
    closing = asyncio.create_task(env.trigger.close())
    await asyncio.sleep(0)
    assert not closing.done()
    release.set()
    await asyncio.wait_for(closing, 5)
    assert fire.done() and (await fire).trigger_code == 200
    with pytest.raises(RuntimeError, match="closed"):
        await env.trigger.fire(FireRequest(job, TriggerType.MANUAL))


@pytest.mark.parametrize(("error", "failing", "reads", "sent"), [
    (ConnectionError("database went away"), 9, 3, False),  # transient: tried twice more
    (ConnectionError("connection reset"), 1, 2, True),  # a connection a restart dropped
    (ValueError("a bug"), 9, 1, False),  # not transient: not tried again
])
async def test_a_group_read_failing_after_recording_is_tried_again_if_transient_else_fails_visibly(
    env: Env, monkeypatch: pytest.MonkeyPatch, error: Exception, failing: int, reads: int, sent: bool
) -> None:
    job = await env.job()
    real, calls = env.store.groups.get, 0

    async def get(group_id: int) -> JobGroup | None:
        nonlocal calls
        calls += 1
        if calls <= failing:
            raise error
        return await real(group_id)

    monkeypatch.setattr(env.store.groups, "get", get)
    monkeypatch.setattr(groups, "_READ_PAUSES_S", (0, 0))
    (result,) = await env.trigger.fire_batch([FireRequest(job, TriggerType.CRON, planned_time=T0)])
    assert calls == reads and len(env.double.runs()) == int(sent)
    if sent:
        assert result.trigger_code == 200
        return
    # Recorded (so no other node fires it again) and failed with the reason, never silently lost.
    assert result.trigger_code == 500
    entry = await env.store.logs.get(result.log_ids[0])
    assert entry is not None and entry.trigger_code == 500
    # The error's class only: a database error's text (its SQL and parameters) is not shown.
    message = entry.trigger_msg or ""
    assert f"could not read the executor group: {type(error).__name__}" in message
    assert str(error) not in message


async def test_log_insert_failure_raises_and_records_nothing(
    env: Env, monkeypatch: pytest.MonkeyPatch
) -> None:
    job = await env.job()

    async def broken(rows: object) -> None:
        raise ConnectionError("database went away")

    monkeypatch.setattr(env.store.logs, "insert_fires", broken)
    with pytest.raises(ConnectionError):
        await env.trigger.fire_batch([FireRequest(job, TriggerType.CRON, planned_time=T0)])
    assert env.double.runs() == []


async def test_missing_group_is_named_in_the_trigger_message(env: Env) -> None:
    job = await env.job(job_group=424242)
    result = await env.trigger.fire(FireRequest(job, TriggerType.MANUAL))
    assert result.trigger_code == 500 and "executor group 424242 not found" in result.trigger_msg


async def test_prepared_fires_are_recorded_ahead_and_sent_only_at_dispatch(env: Env) -> None:
    job = await env.job()
    batch = await env.trigger.prepare_batch([FireRequest(job, TriggerType.CRON, planned_time=T0 + 2000)])
    assert batch.duplicates == [False] and env.double.runs() == []
    (log_id,) = batch.log_ids[0]
    entry = await env.store.logs.get(log_id)
    assert entry is not None and entry.trigger_code == 0 and entry.planned_time == T0 + 2000
    # Another node trying the same instant meanwhile sees it recorded.
    node_b = env.service("node-b")
    try:
        (dup,) = await node_b.fire_batch([FireRequest(job, TriggerType.CRON, planned_time=T0 + 2000)])
    finally:
        await node_b.close()
    assert dup.duplicate
    env.clock.set(T0 + 2000)
    (result,) = await env.trigger.dispatch_prepared(batch)
    assert result.log_ids == [log_id] and result.trigger_code == 200
    (run,) = env.double.runs()
    assert run.body["logId"] == log_id and run.body["logDateTime"] == T0 + 2000
    entry = await env.store.logs.get(log_id)
    assert entry is not None and entry.trigger_code == 200 and entry.dispatch_time == T0 + 2000
    with pytest.raises(RuntimeError, match="already dispatched"):
        await env.trigger.dispatch_prepared(batch)


async def test_cancelled_prepared_fires_free_their_instants(env: Env) -> None:
    job = await env.job(executor_route_strategy="SHARDING_BROADCAST")
    batch = await env.trigger.prepare_batch([FireRequest(job, TriggerType.CRON, planned_time=T0)])
    assert len(batch.log_ids[0]) == 3
    await env.hold(job)
    assert await env.trigger.cancel_prepared(batch) == 3
    assert await env.store.logs.for_job(job.id) == [] and env.double.runs() == []
    with pytest.raises(RuntimeError, match="already cancelled"):
        await env.trigger.dispatch_prepared(batch)
    (again,) = await env.trigger.fire_batch([FireRequest(job, TriggerType.CRON, planned_time=T0)])
    assert not again.duplicate and len(env.double.runs()) == 3


async def test_prepared_fires_sent_with_results_recorded_later_in_one_flush(env: Env) -> None:
    # The timed flush is pushed out of the test's way (a loaded machine can take longer than
    # the default 100 ms between the send and the checks): only flush_results writes here.
    trigger = env.service(env.trigger.node_id, result_flush_ms=600_000)
    try:
        jobs = [await env.job() for _ in range(3)]
        batch = await trigger.prepare_batch(
            [FireRequest(j, TriggerType.CRON, planned_time=T0 + 1000) for j in jobs])
        parts = batch.split()
        env.clock.set(T0 + 1000)
        results = await trigger.dispatch_prepared(PreparedBatch.merge(parts[:2]), record_later=True)
        assert [r.trigger_code for r in results] == [200, 200] and len(env.double.runs()) == 2
        ids = [r.log_ids[0] for r in results]
        for log_id in ids:  # sent, not yet recorded
            entry = await env.store.logs.get(log_id)
            assert entry is not None and entry.trigger_code == 0 and entry.dispatch_time is None
        assert await trigger.flush_results() == 2
        for log_id in ids:
            entry = await env.store.logs.get(log_id)
            assert entry is not None and entry.trigger_code == 200 and entry.dispatch_time == T0 + 1000
        # The third was never sent: withdrawing it frees its instant; a used-up part cannot be reused.
        await env.hold(*jobs)
        assert await trigger.cancel_prepared(parts[2]) == 1
        assert await env.store.logs.for_job(jobs[2].id) == []
        with pytest.raises(RuntimeError, match="already merged"):
            await trigger.dispatch_prepared(parts[0])
    finally:
        await trigger.close()


async def test_prepared_fires_beyond_the_free_lane_slots_wait_and_all_go_out(env: Env) -> None:
    trigger = env.service("node-b", fast_pool=1)
    try:
        jobs = [await env.job(executor_route_strategy=s) for s in ("FIRST", "ROUND", "SHARDING_BROADCAST")]
        batch = await trigger.prepare_batch([FireRequest(j, TriggerType.CRON, planned_time=T0) for j in jobs])
        results = await trigger.dispatch_prepared(batch, record_later=True)
        assert [r.trigger_code for r in results] == [200, 200, 200]
        assert len(env.double.runs()) == 2 + len(HOSTS)
        assert await trigger.flush_results() == 2 + len(HOSTS)
    finally:
        await trigger.close()


async def test_scheduled_fires_read_the_group_through_a_short_cache(env: Env) -> None:
    job = await env.job()
    await env.trigger.fire_batch([FireRequest(job, TriggerType.CRON, planned_time=T0)])
    group = await env.store.groups.get(env.group_id)
    assert group is not None
    await env.store.groups.update(replace(group, address_list=env.double.address(1)), datetime.now(UTC))
    # Within the cache time scheduled fires still use the addresses read before; a manual
    # fire reads the group again.
    env.clock.set(T0 + 500)
    await env.trigger.fire_batch([FireRequest(job, TriggerType.CRON, planned_time=T0 + 500)])
    await env.trigger.fire(FireRequest(job, TriggerType.MANUAL))
    env.clock.set(T0 + 1_500)
    await env.trigger.fire_batch([FireRequest(job, TriggerType.CRON, planned_time=T0 + 1_500)])
    assert [c.address for c in env.double.runs()] == [
        env.double.address(0), env.double.address(0), env.double.address(1), env.double.address(1)]


async def test_workflow_node_fires_read_the_group_through_the_same_short_cache(env: Env) -> None:
    # A workflow node starts right after its parent's result: the group's two reads are not
    # on that path. An edit on another admin reaches it as it reaches scheduled fires.
    job = await env.job()
    await env.trigger.fire(FireRequest(job, TriggerType.WORKFLOW))
    group = await env.store.groups.get(env.group_id)
    assert group is not None
    await env.store.groups.update(replace(group, address_list=env.double.address(1)), datetime.now(UTC))
    env.clock.set(T0 + 500)
    await env.trigger.fire(FireRequest(job, TriggerType.WORKFLOW))
    await env.trigger.fire(FireRequest(job, TriggerType.API))  # read fresh
    env.clock.set(T0 + 1_500)
    await env.trigger.fire(FireRequest(job, TriggerType.WORKFLOW))
    assert [c.address for c in env.double.runs()] == [
        env.double.address(0), env.double.address(0), env.double.address(1), env.double.address(1)]


async def test_prepared_fires_send_the_same_run_body_as_a_fire_at_once(env: Env) -> None:
    job = await env.job(executor_param="p1", executor_timeout=7)
    (first,) = await env.trigger.fire_batch([FireRequest(job, TriggerType.CRON, planned_time=T0)])
    sent: list[PreparedBatch] = []
    edited = replace(job, executor_param="p2", glue_updatetime=datetime(2026, 1, 2, 3, 4, 5))
    for n, version in enumerate((job, job, edited), start=1):
        sent.append(await env.trigger.prepare_batch(
            [FireRequest(version, TriggerType.CRON, planned_time=T0 + n * 1000)]))
    for batch in sent:
        await env.trigger.dispatch_prepared(batch, record_later=True)
    bodies = [call.body for call in env.double.runs()]
    assert len(bodies) == 4
    expected = [TriggerParam.decode(bodies[0]).to_dict()]
    for n, (log_ids, version) in enumerate(zip((b.log_ids[0] for b in sent), (job, job, edited),
                                               strict=True), start=1):
        expected.append({**expected[0], "logId": log_ids[0], "logDateTime": T0 + n * 1000,
                         "logicalTime": T0 + n * 1000,  # a scheduled fire stands for its instant
                         "executorParams": version.executor_param,
                         "glueUpdatetime": 0 if version.glue_updatetime is None
                         else int(version.glue_updatetime.replace(tzinfo=UTC).timestamp() * 1000)})
    assert expected[0]["logId"] == first.log_ids[0] and expected[0]["executorTimeout"] == 7
    assert expected[0]["logicalTime"] == T0
    assert [TriggerParam.decode(body).to_dict() for body in bodies] == expected
    await env.trigger.flush_results()
