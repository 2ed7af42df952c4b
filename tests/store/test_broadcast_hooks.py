"""Contract tests of a broadcast with pre/post hooks in ``store.subtasks`` on every backend: the
pre hook runs alone first, then each executor's part on that executor only (with the pre
hook's result as its item), then the post hook once, whatever the parts' outcome; a failed
pre hook fails the run with no part and no post hook; a part lost with its executor fails
(it is not moved); "retry failed" after a failed pre hook runs the pre hook again."""

from __future__ import annotations

import json
from datetime import datetime

from jobring.admin.store import JobInfo, NewLog, Store
from jobring.admin.store.subtasks import ClaimedTask, Orphan, TaskUpdate
from jobring.core.distributed import CancelRequested, Finished, Lost

NOW = datetime(2026, 3, 10, 12, 0, 0)
T0 = 1_773_144_000_000
A, B, C = "http://a/", "http://b/", "http://c/"
ALL = [(A, 10), (B, 10), (C, 10)]


async def _broadcast(store: Store, *, pre: str | None = "snap", post: str | None = "report",
                     tolerance: str | None = None) -> int:
    job = await store.jobs.create(JobInfo(job_group=3, job_desc="b", executor_handler="part",
                                          executor_route_strategy="SHARDING_BROADCAST",
                                          broadcast_pre=pre, broadcast_post=post,
                                          failure_tolerance=tolerance))
    run = await store.logs.insert(NewLog(job_group=3, job_id=job, trigger_time=NOW, trigger_code=200))
    assert await store.distributed.start_broadcast(run, job, 3, "part", [A, B, C], (pre, post), "p",
                                                   tolerance, 0, T0)
    assert not await store.distributed.start_broadcast(run, job, 3, "part", [A, B, C], (pre, post), "p",
                                                       tolerance, 0, T0)  # once
    return run


async def _claim(store: Store, run: int, slots: list[tuple[str, int]] = ALL) -> list[ClaimedTask]:
    parent = await store.distributed.get(run)
    assert parent is not None
    return await store.distributed.claim(run, slots, T0, parts=parent.phase != "pre")


async def test_pre_then_every_executor_then_post_once(store: Store) -> None:
    run = await _broadcast(store)
    parent = await store.distributed.get(run)
    assert parent is not None and (parent.kind, parent.phase, parent.total, parent.pre_task) == (
        "bcast", "pre", 3, "snap")
    pre = await _claim(store, run)
    assert [(t.kind, t.task_name) for t in pre] == [("pre", "snap")]  # the parts wait for it
    assert await _claim(store, run) == []
    _, ended = await store.distributed.apply([TaskUpdate(pre[0].id, Finished(1, True), '{"snapshot":7}')], T0)
    assert ended == []
    # Each part goes to its own executor (never another), with the pre hook's result as item.
    assert await _claim(store, run, [(A, 10)]) != []
    parts = await _claim(store, run)
    every = [*await store.distributed.page(run)]
    placed = {t.task_key: t.executor_address for t in every if t.kind == "part"}
    assert placed == {"b/0": A, "b/1": B, "b/2": C}
    assert sorted(t.executor_address for t in parts) == [B, C]
    assert {t.item for t in every if t.kind == "part"} == {'{"snapshot":7}'}
    shards = sorted((t.shard_index, t.shard_total) for t in every if t.kind == "part")
    assert shards == [(0, 3), (1, 3), (2, 3)]
    running = [t for t in await store.distributed.page(run, status="running") if t.kind == "part"]
    _, ended = await store.distributed.apply(
        [TaskUpdate(t.id, Finished(t.attempt, True), str(t.shard_index)) for t in running], T0)
    assert ended == []
    post = await _claim(store, run)
    assert [(t.kind, t.task_name) for t in post] == [("reduce", "report")]
    assert json.loads(post[0].item or "") == {"total": 3, "succeeded": 3, "failed": 0}
    assert sorted(r[2] or "" for r in await store.distributed.results(run)) == ["0", "1", "2"]  # parts only
    _, ended = await store.distributed.apply([TaskUpdate(post[0].id, Finished(1, True), '"ok"')], T0)
    assert [(p.phase, p.succeeded, p.result) for p in ended] == [("succeeded", 3, '"ok"')]
    assert await _claim(store, run) == []


async def test_a_failed_pre_hook_fails_the_run_without_parts_or_post(store: Store) -> None:
    run = await _broadcast(store)
    pre = await _claim(store, run)
    failed = TaskUpdate(pre[0].id, Finished(1, False), message="no disk")
    _, ended = await store.distributed.apply([failed], T0)
    assert [(p.phase, p.root_state, p.root_msg, p.failed) for p in ended] == [
        ("failed", "failed", "pre hook failed: no disk", 3)]
    assert await _claim(store, run) == []
    # "Retry failed" runs the pre hook again, then the parts.
    assert (await store.distributed.retry_failed(run, T0))[0] == 4
    parent = await store.distributed.get(run)
    assert parent is not None and (parent.phase, parent.failed) == ("pre", 0)
    again = await _claim(store, run)
    assert [(t.kind, t.attempt) for t in again] == [("pre", 2)]
    await store.distributed.apply([TaskUpdate(again[0].id, Finished(2, True))], T0)
    assert sorted(t.executor_address for t in await _claim(store, run)) == [A, B, C]


async def test_a_lost_part_fails_and_the_post_hook_still_runs(store: Store) -> None:
    run = await _broadcast(store, pre=None)
    parts = await _claim(store, run)
    by_address = {t.executor_address: t for t in parts}
    await store.distributed.apply([TaskUpdate(by_address[C].id, Lost(1))], T0)
    assert await _claim(store, run) == []  # not moved to another executor
    await store.distributed.apply([TaskUpdate(by_address[a].id, Finished(1, True), "1") for a in (A, B)], T0)
    post = await _claim(store, run)
    assert json.loads(post[0].item or "") == {"total": 3, "succeeded": 2, "failed": 1}
    _, ended = await store.distributed.apply([TaskUpdate(post[0].id, Finished(1, True), "2")], T0)
    assert [(p.phase, p.failed, p.result) for p in ended] == [("failed", 1, "2")]  # none allowed


async def test_a_failure_tolerance_and_a_failed_post_hook(store: Store) -> None:
    run = await _broadcast(store, pre=None, tolerance="1")
    parts = await _claim(store, run)
    await store.distributed.apply([TaskUpdate(parts[0].id, CancelRequested(), message="gone")], T0)
    await store.distributed.apply([TaskUpdate(t.id, Finished(1, True), "1") for t in parts[1:]], T0)
    post = await _claim(store, run)
    _, ended = await store.distributed.apply([TaskUpdate(post[0].id, Finished(1, False), message="x")], T0)
    assert [(p.phase, p.root_msg) for p in ended] == [("failed", "x")]  # the post hook failed
    ok = await _broadcast(store, pre=None, post=None, tolerance="1")
    parts = await _claim(store, ok)
    await store.distributed.apply([TaskUpdate(parts[0].id, Finished(1, False), message="bad")], T0)
    _, ended = await store.distributed.apply([TaskUpdate(t.id, Finished(1, True)) for t in parts[1:]], T0)
    assert [(p.phase, p.failed) for p in ended] == [("succeeded", 1)]  # 1 allowed, no post hook


async def test_sub_tasks_a_dead_admin_node_claimed(store: Store) -> None:
    run = await _broadcast(store, pre=None, post=None)
    await store.nodes.announce("alive", T0 + 10_000)
    await store.nodes.announce("dead", T0 - 1)
    mine = await store.distributed.claim(run, [(A, 1)], T0, node="alive")
    theirs = await store.distributed.claim(run, [(B, 1), (C, 1)], T0, node="dead")
    assert [t.executor_address for t in mine + theirs] == [A, B, C]
    assert await store.distributed.claimed_by_dead_nodes(T0, "alive") == [
        Orphan(t.id, run, 3, 1, "dead", t.executor_address) for t in theirs]
    assert await store.distributed.claimed_by_dead_nodes(T0, "dead") == []  # never its own
    # One ended before the node died: only the running one is left to take back.
    await store.distributed.apply([TaskUpdate(theirs[0].id, Finished(1, True))], T0)
    orphans = await store.distributed.claimed_by_dead_nodes(T0, "alive")
    assert [o.id for o in orphans] == [theirs[1].id]
    # Its executor holds it: taken over by the node that asked, once, as that attempt only.
    stale = Orphan(theirs[1].id, run, 3, 2, "dead", C)
    assert await store.distributed.adopt([stale], "alive") == 0
    assert await store.distributed.adopt(orphans, "alive") == 1
    assert await store.distributed.adopt(orphans, "alive") == 0  # no longer the dead node's
    assert await store.distributed.claimed_by_dead_nodes(T0, "alive") == []
    rows = {r.id: r for r in await store.distributed.page(run)}
    assert (rows[theirs[1].id].status, rows[theirs[1].id].dispatched_by) == ("running", "alive")
