"""A "retry the failed sub-tasks" interrupted midway (its admin died) is resumed by the sweep
once it has not moved for ``retry_stall_ms`` (security review finding 5): before, the parent
stayed ``retrying`` until a user asked again. Two admins may resume it at once: the retry is
shared. A retry still moving is left alone."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import datetime

import pytest

from jobring.admin.dispatch.client import ExecutorClient
from jobring.admin.distributed import service as service_module
from jobring.admin.distributed.service import DistributedService
from jobring.admin.store import JobInfo, NewLog, Store
from jobring.admin.store.subtasks import NewSubTask, TaskUpdate
from jobring.core.clock import ManualClock
from jobring.core.distributed import Finished
from tests.store.transactions_kit import Killed, killed_at_write

NOW = datetime(2026, 3, 10, 12, 0, 0)
T0 = 1_773_144_000_000
STALL_MS = 60_000
ROWS = 7
TASKS = 40
Admins = tuple[ManualClock, DistributedService, DistributedService]


@pytest.fixture
async def admins(sqlite_store: Store) -> AsyncIterator[Admins]:
    sqlite_store.db.bulk_rows = ROWS
    clock = ManualClock(T0)
    made = [DistributedService(sqlite_store, ExecutorClient(access_token="tok"), clock, node_id=n,
                               retry_stall_ms=STALL_MS) for n in ("a", "b")]
    try:
        yield clock, made[0], made[1]
    finally:
        for service in made:
            await service.stop()


async def _interrupted_retry(store: Store, nth_write: int) -> int:
    """A map run whose TASKS sub-tasks failed, and a retry of them killed at its Nth write."""
    job = await store.jobs.create(JobInfo(job_group=3, job_desc="m", executor_handler="root"))
    run = await store.logs.insert(NewLog(job_group=3, job_id=job, trigger_time=NOW, trigger_code=200))
    await store.distributed.add_map_call(run, "r", [NewSubTask(f"r/0.{i}", "leaf", "map", str(i))
                                                    for i in range(TASKS)], None, T0)
    await store.distributed.root_finished([(run, True, None)], T0)
    claimed = await store.distributed.claim(run, [("http://a/", TASKS)], T0)
    await store.distributed.apply([TaskUpdate(t.id, Finished(t.attempt, False)) for t in claimed], T0)
    await _killed_retry(store, run, nth_write)
    return run


async def _killed_retry(store: Store, run: int, nth_write: int) -> None:
    with killed_at_write(store, nth_write), pytest.raises(Killed):
        await store.distributed.retry_failed(run, T0)


async def _state(store: Store, run: int) -> tuple[str, int, int]:
    parent = await store.distributed.get(run)
    assert parent is not None
    return parent.phase, parent.attempt, parent.failed


async def test_a_retry_stopped_midway_is_resumed_once_it_has_not_moved_for_a_while(
    sqlite_store: Store, admins: Admins
) -> None:
    clock, a, b = admins
    run = await _interrupted_retry(sqlite_store, 3)  # the parent marked, one part put back
    assert await _state(sqlite_store, run) == ("retrying", 2, TASKS - ROWS)
    # First seen by both admins: it may be under way.
    assert await asyncio.gather(a.resume_stalled_retries(), b.resume_stalled_retries()) == [[], []]
    clock.advance(STALL_MS - 1)
    assert await a.resume_stalled_retries() == []
    clock.advance(1)
    # Both admins see it stalled: both resume it, at once, and share the work.
    assert await asyncio.gather(a.resume_stalled_retries(), b.resume_stalled_retries()) == [[run], [run]]
    await a.stop()
    await b.stop()
    assert await _state(sqlite_store, run) == ("mapping", 2, 0)
    rows = await sqlite_store.distributed.page(run, limit=500)
    assert sorted(r.status for r in rows) == ["pending"] * TASKS
    clock.advance(STALL_MS)
    assert await a.resume_stalled_retries() == []  # done: nothing is retrying


async def test_a_retry_that_moves_is_not_resumed(
    sqlite_store: Store, admins: Admins
) -> None:
    clock, a, _ = admins
    run = await _interrupted_retry(sqlite_store, 3)
    assert await a.resume_stalled_retries() == []
    clock.advance(STALL_MS // 2)
    await _killed_retry(sqlite_store, run, 3)  # another request put a part back meanwhile
    assert await _state(sqlite_store, run) == ("retrying", 2, TASKS - 2 * ROWS)
    assert await a.resume_stalled_retries() == []
    clock.advance(STALL_MS - 1)  # moved STALL_MS / 2 ago, then not since
    assert await a.resume_stalled_retries() == []
    clock.advance(1)
    assert await a.resume_stalled_retries() == [run]
    await a.stop()
    assert await _state(sqlite_store, run) == ("mapping", 2, 0)


async def test_every_stalled_retry_is_seen_past_the_first_page(
    sqlite_store: Store, admins: Admins, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(service_module, "RETRYING_PAGE", 2)
    clock, a, _ = admins
    runs = [await _interrupted_retry(sqlite_store, 3) for _ in range(3)]
    assert await a.resume_stalled_retries() == []
    clock.advance(STALL_MS)
    assert sorted(await a.resume_stalled_retries()) == runs  # the third is on a second page
    await a.stop()
    assert [await _state(sqlite_store, run) for run in runs] == [("mapping", 2, 0)] * 3
