"""The cross-node guarantees on every database backend: one dispatch per planned fire, one
retry and one alarm per failed run, however many admin nodes try at once."""

from __future__ import annotations

import asyncio

from jobring.admin.alarms import Alarmer, AlarmOutcome
from jobring.admin.store import Store
from jobring.admin.trigger.trigger import FireRequest
from jobring.core.enums import TriggerType
from tests.admin.scheduler.test_monitors import FakeChannel, add_log, fail_tick
from tests.admin.trigger_kit import HOSTS, T0, make_env


async def test_nodes_racing_on_the_same_fires_dispatch_each_once(store: Store) -> None:
    env = await make_env(store, HOSTS)
    jobs = [await env.job(executor_route_strategy=r) for r in ("FIRST", "ROUND", "SHARDING_BROADCAST")]
    nodes = [env.service(f"node-{i}") for i in range(3)]
    try:
        reqs = [FireRequest(j, TriggerType.CRON, planned_time=T0 + k * 1000) for j in jobs for k in range(5)]
        results = await asyncio.gather(*(n.fire_batch(reqs) for n in nodes))
    finally:
        for n in (*nodes, env.trigger):
            await n.close()
    assert sum(not r.duplicate for per_node in results for r in per_node) == len(reqs)
    # Two single-address jobs x 5 instants + the broadcast job x 5 instants x 3 shards.
    assert len(env.double.runs()) == 2 * 5 + 5 * 3
    for job in jobs:
        planned = [e.planned_time for e in await store.logs.for_job(job.id) if e.planned_time is not None]
        assert sorted(planned) == [T0 + k * 1000 for k in range(5)]


async def test_fail_monitors_on_several_nodes_retry_and_alarm_once(store: Store) -> None:
    env = await make_env(store, HOSTS)
    job = await env.job(alarm_on="every_failure")
    for _ in range(4):
        await add_log(store, job.id, group=env.group_id, handle_code=500, retry=1)
    channel = FakeChannel(AlarmOutcome.SENT)
    nodes = [env.service(f"node-{i}") for i in range(3)]
    try:
        await asyncio.gather(*(fail_tick(env, Alarmer([channel]), n) for n in nodes))
    finally:
        for n in (*nodes, env.trigger):
            await n.close()
    assert len(channel.sent) == 4 and len(env.double.runs()) == 4
