"""Contract tests of ``store.nodes`` (scheduler liveness, send fences) and ``store.fires``
(scheduled fires recorded ahead) on every backend."""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta

import pytest

from jobring.admin.store import JobGroup, JobInfo, NewLog, RecordedFire, Store, TriggerResult
from jobring.admin.store.nodes import SchedulerNodeRepository
from tests.store.transactions_kit import PausedBeforeCommit

NOW = datetime(2026, 3, 10, 12, 0, 0)


async def test_nodes_announce_count_fence_and_forget(store: Store) -> None:
    await store.nodes.announce("a", 10_000)
    await store.nodes.announce("b", 10_000)
    await store.nodes.announce("a", 10_000)  # same values again: still one row
    assert await store.nodes.live_count(9_000) == 2
    await store.nodes.announce("b", 0)  # b leaves
    assert await store.nodes.live_count(9_000) == 1
    assert await store.nodes.send_fences(["a", "b", "c"]) == {"a": 0, "b": 0}
    await store.nodes.raise_fence("a", 5_000)
    await store.nodes.raise_fence("a", 4_000)  # a fence never moves back
    await store.nodes.raise_fence("c", 7_000)  # a node's first write may be its fence
    assert await store.nodes.send_fences(["a", "c"]) == {"a": 5_000, "c": 7_000}
    await store.nodes.announce("a", 12_000)
    assert await store.nodes.send_fences(["a"]) == {"a": 5_000}  # announcing keeps the fence
    assert await store.nodes.forget(5_000) == 1  # b (left); c's fence is newer
    assert await store.nodes.forget(8_000) == 1  # c (never announced, fence older)
    assert await store.nodes.send_fences(["a", "b", "c"]) == {"a": 5_000}


async def test_a_node_paused_while_forgetting_old_nodes_holds_up_no_live_nodes_writes(store: Store) -> None:
    # Its cleanup's DELETE scanned every node row on MariaDB and kept them locked until it
    # committed: the other nodes' heartbeats and fences waited for a paused node to resume.
    if store.backend == "sqlite":
        pytest.skip("SQLite has one writer at a time: a paused write holds every other one by design")
    await store.nodes.announce("left-long-ago", 0)
    await store.nodes.announce("node-a", 10_000)
    await store.nodes.announce("node-b", 10_000)
    paused = PausedBeforeCommit(store.engine)
    node_a = asyncio.create_task(SchedulerNodeRepository(paused).forget(5_000))
    try:
        await asyncio.wait_for(paused.inside.wait(), 10)
        await asyncio.wait_for(store.nodes.announce("node-b", 20_000), 10)
        await asyncio.wait_for(store.nodes.raise_fence("node-b", 15_000), 10)
        await asyncio.wait_for(store.nodes.announce("node-c", 20_000), 10)  # a new node's first row
    finally:
        paused.resume.set()
    assert await asyncio.wait_for(node_a, 10) == 1
    assert await store.nodes.send_fences(["left-long-ago", "node-a", "node-b", "node-c"]) == {
        "node-a": 0, "node-b": 15_000, "node-c": 0}


async def test_concurrent_first_writes_of_one_node_make_one_row(store: Store) -> None:
    for n in range(6):  # the races differ run to run: a few rounds
        node = f"n{n}"
        await asyncio.gather(store.nodes.announce(node, 10_000), store.nodes.raise_fence(node, 3_000),
                             store.nodes.announce(node, 10_000), store.nodes.raise_fence(node, 2_000))
        assert await store.nodes.send_fences([node]) == {node: 3_000}
    assert await store.nodes.live_count(1) == 6


async def _fires(store: Store, planned: list[int], node: str | None) -> tuple[int, list[int]]:
    group = await store.groups.create(JobGroup(app_name=f"fires-{node}", title="Fires"), NOW)
    job = await store.jobs.create(JobInfo(job_group=group, job_desc="j", executor_handler="h"))
    rows = [NewLog(group, job, NOW, executor_handler="h", trigger_type="CRON", planned_time=p,
                   admin_node=node) for p in planned]
    ids = await store.logs.insert_fires(rows)
    assert None not in ids
    return job, [i for i in ids if i is not None]


def _sent(log_id: int) -> TriggerResult:
    return TriggerResult(log_id, "http://e:1/", 200, "ok", dispatch_time=1_001)


async def test_unconfirmed_fires_withdraw_and_fail(store: Store) -> None:
    job, ids = await _fires(store, [1_000, 2_000, 3_000, 4_000], "a")
    other, other_ids = await _fires(store, [1_000], "b")
    await store.logs.update_trigger_results([_sent(ids[0])])
    found = await store.fires.recorded_since({job: 2_000, other: 0}, "b")
    assert found == \
        [RecordedFire(ids[i], job, p, "a", False) for i, p in ((1, 2_000), (2, 3_000), (3, 4_000))]
    everything = await store.fires.recorded_since({job: 0}, "b")
    assert [f.confirmed for f in everything] == [True, False, False, False]
    assert await store.fires.recorded_since({job: 0}, "a") == []  # a's own fires are not "other"
    # Withdrawing removes unconfirmed fires of jobs the caller holds; a sent fire stays.
    assert await store.fires.withdraw([ids[0], ids[3]], holder="a") == 0  # not leased to a
    await store.jobs.set_status(job, 1, 500)
    assert [j.id for j in await store.jobs.claim_due("a", 100, 1_000, 60_000, 10)] == [job]
    assert await store.fires.withdraw([ids[0], ids[3]], holder="b") == 0
    assert await store.fires.withdraw([ids[0], ids[3]], holder="a") == 1
    assert await store.logs.get(ids[0]) is not None and await store.logs.get(ids[3]) is None
    # The instant is free again.
    again = await store.logs.insert_fires([NewLog(1, job, NOW, executor_handler="h", planned_time=4_000)])
    assert again[0] is not None
    assert await store.fires.fail_unconfirmed([ids[0], ids[1], other_ids[0]], "lost") == 2
    failed = await store.logs.get(ids[1])
    assert failed is not None and (failed.trigger_code, failed.trigger_msg) == (500, "lost")
    sent = await store.logs.get(ids[0])
    assert sent is not None and sent.trigger_code == 200


async def test_undispatched_before(store: Store) -> None:
    _, ids = await _fires(store, [1_000, 2_000], "a")
    await store.logs.update_trigger_results([_sent(ids[0])])
    assert await store.fires.undispatched_before(NOW - timedelta(seconds=1)) == []
    assert await store.fires.undispatched_before(NOW) == [ids[1]]
