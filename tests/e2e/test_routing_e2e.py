"""Routing strategies against three real pyxxl executor processes of one appname."""

from __future__ import annotations

import signal
from collections import Counter
from pathlib import Path

import pytest

from jobring.admin.store import Store
from jobring.admin.trigger.trigger import FireRequest
from jobring.core.enums import TriggerType
from tests.e2e.pyxxl_harness import Admin, running_admin

pytestmark = pytest.mark.e2e


async def fire_and_wait(admin: Admin, job_route: str, handler: str, times: int) -> list[tuple[str, str]]:
    job = await admin.job(handler, route=job_route, executor_param="x")
    done: list[tuple[str, str]] = []
    for _ in range(times):
        result = await admin.trigger.fire(FireRequest(job, TriggerType.MANUAL))
        assert result.trigger_code == 200, result.trigger_msg
        for log_id in result.log_ids:
            entry = await admin.wait_result(log_id)
            assert entry.handle_code == 200 and entry.executor_address is not None
            done.append((entry.executor_address, entry.handle_msg or ""))
    return done


async def test_routing_over_three_pyxxl_executors(sqlite_store: Store, tmp_path: Path) -> None:
    async with running_admin(sqlite_store, tmp_path) as admin:
        executors = [admin.start_executor() for _ in range(3)]
        await admin.wait_registered(*executors)
        addresses = await admin.addresses()
        assert addresses == sorted(e.address for e in executors)
        port_of = {e.address: e.port for e in executors}

        # ROUND: six fires visit each executor twice; the run happened where the log says.
        runs = await fire_and_wait(admin, "ROUND", "demo", 6)
        assert Counter(a for a, _ in runs) == dict.fromkeys(addresses, 2)
        assert all(msg.endswith(f"on {port_of[a]}") for a, msg in runs)

        # CONSISTENT_HASH: one job always lands on the same executor.
        assert len({a for a, _ in await fire_and_wait(admin, "CONSISTENT_HASH", "demo", 3)}) == 1

        # SHARDING_BROADCAST: one run per executor, shard i of 3 on the i-th address.
        shards = await fire_and_wait(admin, "SHARDING_BROADCAST", "shard", 1)
        assert sorted(shards) == [(a, f"shard {i}/3 on {port_of[a]}") for i, a in enumerate(addresses)]

        # LAST / LEAST_RECENTLY_USED behave on real executors too.
        assert {a for a, _ in await fire_and_wait(admin, "LAST", "demo", 2)} == {addresses[-1]}
        assert [a for a, _ in await fire_and_wait(admin, "LEAST_RECENTLY_USED", "demo", 3)] == addresses

        # The first executor dies without saying goodbye: still listed (its heartbeat is fresh).
        first = next(e for e in executors if e.address == addresses[0])
        await first.stop(signal.SIGKILL)
        assert await admin.addresses() == addresses
        job = await admin.job("demo", route="FIRST")
        refused = await admin.trigger.fire(FireRequest(job, TriggerType.MANUAL))
        assert refused.trigger_code == 500 and "unreachable" in refused.trigger_msg
        # FAILOVER beats each address in order and runs on the first that answers.
        failover = await fire_and_wait(admin, "FAILOVER", "demo", 2)
        assert {a for a, _ in failover} == {addresses[1]}
        # BUSYOVER: the dead one fails its idle beat too.
        assert {a for a, _ in await fire_and_wait(admin, "BUSYOVER", "demo", 1)} == {addresses[1]}
