"""Contract tests of ``store.subtasks`` on every backend: map calls stored once, claims,
results and losses applied once per attempt, the join (failure tolerance, reduce exactly
once), retry of the failed sub-tasks only, keyset pages, the group guard, and retention."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest

from jobring.admin.store import GroupGuard, HandleResult, JobInfo, NewLog, Store
from jobring.admin.store.errors import Conflict, NotFound
from jobring.admin.store.subtasks import NewSubTask, TaskUpdate
from jobring.core.distributed import Finished, JoinError, Lost, MapLimitError

NOW = datetime(2026, 3, 10, 12, 0, 0)
T0 = 1_773_144_000_000


async def _run(store: Store, *, group: int = 3, tolerance: str | None = None, retries: int = 0) -> int:
    job = await store.jobs.create(
        JobInfo(
            job_group=group,
            job_desc="m",
            executor_handler="root",
            failure_tolerance=tolerance,
            executor_fail_retry_count=retries,
        )
    )
    return await store.logs.insert(
        NewLog(job_group=group, job_id=job, trigger_time=NOW, trigger_code=200, executor_param="p")
    )


def _tasks(n: int, call: int = 0, parent: str = "r") -> list[NewSubTask]:
    return [NewSubTask(f"{parent}/{call}.{i}", "leaf", "map", str(i)) for i in range(n)]


async def _finish(store: Store, run: int, ok: bool = True) -> list[int]:
    """Claim and finish every pending sub-task of the run; returns the ended parents."""
    ended: list[int] = []
    while claimed := await store.distributed.claim(run, [("http://a/", 50), ("http://b/", 50)], T0):
        _, done = await store.distributed.apply(
            [
                TaskUpdate(
                    t.id, Finished(t.attempt, ok), f'{{"n":{t.item}}}' if ok else None, None if ok else "no"
                )
                for t in claimed
            ],
            T0 + 1,
        )
        ended += [p.run_id for p in done]
    return ended


async def test_map_reduce_joins_once_and_reduces_once(store: Store) -> None:
    run = await _run(store)
    assert await store.distributed.add_map_call(run, "r", _tasks(5), "sum", T0) == (5, 5)
    # The same call again (the root task dispatched again) creates nothing.
    assert await store.distributed.add_map_call(run, "r", _tasks(5), "sum", T0) == (0, 5)
    claimed = await store.distributed.claim(run, [("http://a/", 2), ("http://b/", 2)], T0)
    assert [(t.executor_address, t.attempt) for t in claimed] == [("http://a/", 1), ("http://b/", 1)] * 2
    assert await store.distributed.load(3) == {"http://a/": 2, "http://b/": 2}
    parent = await store.distributed.get(run)
    assert parent is not None and (parent.total, parent.running, parent.phase) == (5, 4, "mapping")
    # A result for another attempt, or twice, changes nothing.
    first = claimed[0]
    assert (await store.distributed.apply([TaskUpdate(first.id, Finished(7, True))], T0))[0] == 0
    assert (await store.distributed.apply([TaskUpdate(first.id, Finished(1, True), "1")], T0))[0] == 1
    assert (await store.distributed.apply([TaskUpdate(first.id, Finished(1, True), "1")], T0))[0] == 0
    await store.distributed.apply([TaskUpdate(t.id, Finished(1, True), t.item) for t in claimed[1:]], T0)
    assert await _finish(store, run) == []  # the root task is still running: no join yet
    taken, ended = await store.distributed.root_finished([(run, True, None)], T0)
    assert taken == {run} and ended == []  # joined: map-reduce goes to reducing
    parent = await store.distributed.get(run)
    assert parent is not None and (parent.phase, parent.succeeded, parent.running) == ("reducing", 5, 0)
    assert [r[1] for r in await store.distributed.results(run)] == [f"r/0.{i}" for i in range(5)]
    # The reduce task exists once whatever repeats; its result ends the parent.
    assert (await store.distributed.root_finished([(run, True, None)], T0))[1] == []
    reduce = await store.distributed.claim(run, [("http://a/", 10)], T0)
    assert [(t.kind, t.task_name, t.key) for t in reduce] == [("reduce", "sum", f"reduce:{run}:1")]
    _, ended_now = await store.distributed.apply([TaskUpdate(reduce[0].id, Finished(1, True), "15")], T0)
    assert [(p.run_id, p.phase, p.result) for p in ended_now] == [(run, "succeeded", "15")]
    assert [p.run_id for p in await store.distributed.unrecorded()] == [run]
    await store.distributed.mark_recorded([run], {run: 1})
    assert await store.distributed.unrecorded() == []
    with pytest.raises(Conflict):
        await store.distributed.add_map_call(run, "r", _tasks(1, call=1), None, T0)


async def test_failure_tolerance_retries_and_retry_failed(store: Store) -> None:
    run = await _run(store, tolerance="1", retries=1)
    await store.distributed.add_map_call(run, "r", _tasks(3), None, T0)
    await store.distributed.root_finished([(run, True, None)], T0)
    claimed = await store.distributed.claim(run, [("http://a/", 3)], T0)
    # One fails twice (its retry used), one is lost once and then succeeds, one succeeds.
    await store.distributed.apply(
        [
            TaskUpdate(claimed[0].id, Finished(1, False), message="boom"),
            TaskUpdate(claimed[1].id, Lost(1)),
            TaskUpdate(claimed[2].id, Finished(1, True), "2"),
        ],
        T0,
    )
    again = await store.distributed.claim(run, [("http://b/", 5)], T0)
    assert sorted((t.id, t.attempt) for t in again) == sorted([(claimed[0].id, 2), (claimed[1].id, 2)])
    _, ended = await store.distributed.apply(
        [
            TaskUpdate(claimed[0].id, Finished(2, False), message="boom"),
            TaskUpdate(claimed[1].id, Finished(2, True)),
        ],
        T0,
    )
    assert [(p.phase, p.succeeded, p.failed) for p in ended] == [("succeeded", 2, 1)]  # 1 failure allowed
    failed = await store.distributed.page(run, status="failed")
    assert [(t.id, t.message, t.failures) for t in failed] == [(claimed[0].id, "boom", 2)]
    # Keyset pages by id.
    first = await store.distributed.page(run, limit=2)
    rest = await store.distributed.page(run, after_id=first[-1].id, limit=2)
    assert [t.task_key for t in first + rest] == ["r/0.0", "r/0.1", "r/0.2"]
    await store.logs.record_results([HandleResult(run, 200, "done", NOW)])
    assert await store.distributed.retry_failed(run, T0) == (1, [])
    parent = await store.distributed.get(run)
    assert parent is not None and (parent.phase, parent.attempt, parent.failed) == ("mapping", 2, 0)
    log = await store.logs.get(run)
    assert log is not None and log.handle_code == 0  # open again: the new join records it
    assert await _finish(store, run) == [run]
    with pytest.raises(JoinError):
        await store.distributed.retry_failed(run, T0)  # nothing failed


async def test_a_failed_root_cancels_the_rest(store: Store) -> None:
    run = await _run(store)
    await store.distributed.add_map_call(run, "r", _tasks(4), None, T0)
    await store.distributed.claim(run, [("http://a/", 2)], T0)
    _, ended = await store.distributed.root_finished([(run, False, "root broke")], T0)
    assert [(p.phase, p.failed, p.running) for p in ended] == [("failed", 4, 0)]
    parent = await store.distributed.get(run)
    assert parent is not None and (parent.failed, parent.running, parent.root_msg) == (4, 0, "root broke")
    assert {t.status for t in await store.distributed.page(run)} == {"cancelled"}


async def test_shards_guard_and_retention(store: Store) -> None:
    run = await _run(store, group=5)
    assert await store.distributed.start_sharded(run, 1, 5, "shard", 64, "p", "1%", 0, T0)
    assert not await store.distributed.start_sharded(run, 1, 5, "shard", 64, "p", "1%", 0, T0)
    tasks = await store.distributed.page(run, limit=100)
    assert [(t.shard_index, t.shard_total) for t in tasks] == [(i, 64) for i in range(64)]
    other = GroupGuard(only=frozenset({6}))
    with pytest.raises(NotFound):
        await store.distributed.add_map_call(run, "r", _tasks(1), None, T0, guard=other)
    claimed = await store.distributed.claim(run, [("http://a/", 1)], T0)
    # Another group's token changes nothing and reads nothing.
    assert (await store.distributed.apply([TaskUpdate(claimed[0].id, Finished(1, True))], T0, guard=other))[
        0
    ] == 0
    assert (await store.distributed.root_finished([(run, True, None)], T0, guard=other))[0] == set()
    # Retention: the run's sub-tasks go with it.
    await store.logs.delete_older_than(NOW + timedelta(seconds=1))
    assert await store.distributed.get(run) is None and await store.distributed.page(run) == []


async def test_limits_and_parents_of_nested_maps(store: Store) -> None:
    run = await _run(store)
    await store.distributed.add_map_call(run, "r", _tasks(1), None, T0)
    with pytest.raises(Conflict):  # its parent sub-task is not running
        await store.distributed.add_map_call(run, "r/0.0", _tasks(1, parent="r/0.0"), None, T0)
    await store.distributed.claim(run, [("http://a/", 1)], T0)
    assert await store.distributed.add_map_call(run, "r/0.0", _tasks(2, parent="r/0.0"), None, T0) == (2, 3)
    with pytest.raises(NotFound):
        await store.distributed.add_map_call(run + 100, "r", _tasks(1), None, T0)
    assert MapLimitError  # the item limits are checked before the store (core.distributed.plan_map)


async def test_claims_and_results_split_into_short_writes(store: Store) -> None:
    # SQLite splits them (Db.bulk_rows, 250 there); here every backend, in writes of 7 rows.
    store.db.bulk_rows = 7
    run = await _run(store)
    await store.distributed.add_map_call(run, "r", _tasks(40), "sum", T0)
    await store.distributed.root_finished([(run, True, None)], T0)
    claimed = await store.distributed.claim(run, [("http://a/", 10), ("http://b/", 4), ("http://c/", 30)], T0)
    assert len(claimed) == 40 and len({t.id for t in claimed}) == 40
    per = {a: sum(t.executor_address == a for t in claimed) for a in ("http://a/", "http://b/", "http://c/")}
    assert per == {"http://a/": 10, "http://b/": 4, "http://c/": 26}  # no executor past its room
    assert [t.executor_address for t in claimed[:3]] == ["http://a/", "http://b/", "http://c/"]
    # A batch with an event twice and one of another attempt: each row changes once.
    updates = [TaskUpdate(t.id, Finished(1, True), "1") for t in claimed]
    updates += [TaskUpdate(claimed[0].id, Finished(1, True), "1"),
                TaskUpdate(claimed[1].id, Finished(2, True))]
    changed, ended = await store.distributed.apply(updates, T0 + 1)
    assert (changed, ended) == (40, [])
    parent = await store.distributed.get(run)
    assert parent is not None and (parent.succeeded, parent.running, parent.phase) == (40, 0, "reducing")
    assert await store.distributed.counts(run) == {"succeeded": 40, "pending": 1}  # the reduce, once
