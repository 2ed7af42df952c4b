"""Contract tests of ``store.node_locks`` (session locks proving a node alive) on PostgreSQL
and MariaDB: held while the session lives, free once it ends or stays idle too long."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

import pytest
from sqlalchemy import update
from sqlalchemy.exc import DBAPIError

from jobring.admin.store import JobInfo, Store
from jobring.admin.store.node_locks import NodeLockSession, NodeRowLocked, claim_owned_by, lock_key, lock_name
from jobring.admin.store.tables import scheduler_node

pytestmark = pytest.mark.timeout(60)


def _servers_only(store: Store) -> None:
    if store.backend == "sqlite":
        pytest.skip("SQLite has no session locks (takeover waits for the leases)")


@asynccontextmanager
async def _session(store: Store, node_id: str, idle_ms: int = 30_000) -> AsyncIterator[NodeLockSession]:
    session = await NodeLockSession.open(store.engine, node_id, idle_timeout_ms=idle_ms)
    try:
        yield session
    finally:
        await session.close()


async def _eventually(check: Callable[[], object], limit_s: float = 15.0) -> None:
    deadline = time.monotonic() + limit_s
    while True:
        result = check()
        if asyncio.iscoroutine(result):
            result = await result
        if result:
            return
        assert time.monotonic() < deadline, "condition not met in time"
        await asyncio.sleep(0.1)


def test_lock_keys_differ_per_node_and_database() -> None:
    assert lock_key("db", "a") != lock_key("db", "b")
    assert lock_key("db1", "a") != lock_key("db2", "a")
    assert lock_key("db", "a") == lock_key("db", "a") != 0
    assert len(lock_name(lock_key("db", "a" * 64))) <= 64


async def test_lock_is_held_while_the_session_lives_and_free_after(store: Store) -> None:
    _servers_only(store)
    async with _session(store, "watcher") as watcher:
        assert await watcher.acquire_own(1_000)
        a = await NodeLockSession.open(store.engine, "node-a", idle_timeout_ms=30_000)
        try:
            assert await a.acquire_own(1_000)
            # A second process with the same id cannot take it.
            async with _session(store, "node-a") as twin:
                assert not await twin.acquire_own(1_000)
            await store.nodes.announce("node-a", 10_000)
            await store.nodes.announce("watcher", 10_000)
            assert await watcher.others(5_000) == [("node-a", a.key)]
            assert await a.others(5_000) == [("watcher", watcher.key)]
            assert await watcher.others(20_000) == []  # announced until 10 000 only
            assert not await watcher.try_lock(a.key)
        finally:
            await a.close()
        # The session is gone: the lock is free (MariaDB frees a closed connection's locks a
        # moment after close() returns), and whoever takes it holds it.
        await _eventually(lambda: watcher.try_lock(a.key))
        async with _session(store, "node-a") as restarted:
            assert not await restarted.acquire_own(1_000)
            await watcher.unlock(a.key)
            assert await restarted.acquire_own(1_000)


async def test_fence_through_the_session_and_dead_nodes_marked_gone(store: Store) -> None:
    _servers_only(store)
    await store.nodes.announce("node-a", 10_000)
    async with _session(store, "node-a") as a, _session(store, "node-b") as b:
        assert await a.acquire_own(1_000) and await b.acquire_own(1_000)
        await a.raise_fence(4_000)
        await a.raise_fence(3_000)  # never lowered
        assert await store.nodes.send_fences(["node-a"]) == {"node-a": 4_000}
        await b.mark_gone(["node-a"])
        assert await b.others(5_000) == []
        assert await store.nodes.live_count(5_000) == 0  # node-b never announced itself
        assert await store.nodes.send_fences(["node-a"]) == {"node-a": 4_000}  # the fence stays


async def test_a_lost_node_row_is_written_again(store: Store) -> None:
    _servers_only(store)
    async with _session(store, "node-a") as a, _session(store, "watcher") as watcher:
        assert await a.acquire_own(1_000)
        # Another node's cleanup deletes rows neither alive nor fencing since long ago; a
        # new row says "alive" from the moment it is created, so it is kept.
        assert await store.nodes.forget(500) == 0
        assert await store.nodes.forget(2_000) == 1  # (a week later)
        await a.others(1_000)  # the next ping notices and publishes the key again
        await store.nodes.announce("node-a", 10_000)
        assert await watcher.others(5_000) == [("node-a", a.key)]
        assert await store.nodes.forget(2_000) == 0
        await store.nodes.forget(20_000)
        await a.raise_fence(3_000)  # the fence is written even with the row gone
        assert await store.nodes.send_fences(["node-a"]) == {"node-a": 3_000}


async def test_a_statement_waiting_for_a_row_lock_fails_and_leaves_the_lock_free(store: Store) -> None:
    # A node whose lock session blocks behind another transaction gives up on the statement
    # and closes the session; the server must not keep that session (and this node's lock)
    # for as long as the other transaction lasts: the node could not take its lock again.
    _servers_only(store)
    await store.nodes.announce("node-a", 10_000)
    async with store.engine.connect() as blocker, _session(store, "watcher") as watcher:
        await blocker.begin()
        await blocker.execute(update(scheduler_node).where(scheduler_node.c.node_id == "node-a")
                              .values(alive_until=20_000))
        a = await NodeLockSession.open(store.engine, "node-a", idle_timeout_ms=30_000, lock_wait_ms=1_000)
        try:
            assert await a.try_lock(a.key)
            started = time.monotonic()
            with pytest.raises(DBAPIError):  # the server's lock wait timeout, not ours
                await asyncio.wait_for(a.raise_fence(5_000), 10)
            assert time.monotonic() - started < 5
            assert not await watcher.try_lock(a.key)  # the session lives on: it holds the lock
        finally:
            await a.close()
        await _eventually(lambda: watcher.try_lock(a.key), limit_s=3)  # the blocker still open
        await blocker.rollback()


async def test_marking_a_node_gone_whose_row_is_locked_elsewhere_says_so_and_keeps_the_session(
        store: Store) -> None:
    _servers_only(store)
    await store.nodes.announce("node-a", 10_000)
    async with store.engine.connect() as paused, _session(store, "node-b") as b:  # 1 s lock wait
        # node-a stopped inside its heartbeat's write, before the commit.
        await paused.begin()
        await paused.execute(update(scheduler_node).where(scheduler_node.c.node_id == "node-a")
                             .values(alive_until=11_000))
        with pytest.raises(NodeRowLocked):
            await asyncio.wait_for(b.mark_gone(["node-a"]), 10)
        assert await b.acquire_own(1_000)  # the session still answers
        await paused.commit()
        await b.mark_gone(["node-a"])
    assert await store.nodes.live_count(2_000) == 0  # node-a gone (node-b never announced)


async def test_idle_session_loses_its_lock(store: Store) -> None:
    _servers_only(store)
    async with _session(store, "watcher") as watcher:
        a = await NodeLockSession.open(store.engine, "node-a", idle_timeout_ms=1_000)
        try:
            assert await a.acquire_own(1_000)
            assert not await watcher.try_lock(a.key)
            # Idle past its timeout (a paused process): the server ends the session.
            await _eventually(lambda: watcher.try_lock(a.key))
            with pytest.raises(Exception):  # noqa: B017,PT011 (driver-specific errors)
                await a.others(0)
        finally:
            await a.close()


async def test_pinged_session_keeps_its_lock_past_the_idle_timeout(store: Store) -> None:
    _servers_only(store)
    async with _session(store, "watcher") as watcher, _session(store, "node-a", idle_ms=1_000) as a:
        assert await a.acquire_own(1_000)
        started = time.monotonic()
        while time.monotonic() - started < 2.5:  # pings well inside the timeout
            await a.others(0)
            await asyncio.sleep(0.2)
        assert not await watcher.try_lock(a.key)


async def test_jobs_of_a_dead_owner_are_claimed_before_their_leases_end(store: Store) -> None:
    _servers_only(store)
    ids = [await store.jobs.create(JobInfo(job_group=1, job_desc="j", schedule_type="FIX_RATE",
                                           schedule_conf="1", trigger_status=1, trigger_next_time=1_000 + i))
           for i in range(3)]
    assert len(await store.jobs.claim_due("dead", 1, 5_000, 60_000, 2)) == 2
    assert len(await store.jobs.claim_due("alive", 1, 5_000, 60_000, 5)) == 1
    taken = await claim_owned_by(store.db, "me", ["dead"], 500, 5_000, 10_000, 100)
    assert sorted(j.id for j in taken) == ids[:2]
    assert all(j.lease_owner == "me" and j.lease_until == 10_500 for j in taken)
    owners = {j.id: j.lease_owner for j in (await store.jobs.get_many(ids)).values()}
    assert owners == {ids[0]: "me", ids[1]: "me", ids[2]: "alive"}
    assert await claim_owned_by(store.db, "me", [], 500, 5_000, 10_000, 100) == []


async def test_a_dead_owners_jobs_are_claimed_whatever_their_next_instant(store: Store) -> None:
    # Nobody tries a dead node's lock again once it is taken over: its jobs due after the
    # claim window must come along now (the claimant releases them), not wait for the lease.
    _servers_only(store)
    near = await store.jobs.create(JobInfo(job_group=1, job_desc="near", schedule_type="FIX_RATE",
                                           schedule_conf="1", trigger_status=1, trigger_next_time=1_000))
    far = await store.jobs.create(JobInfo(job_group=1, job_desc="far", schedule_type="FIX_RATE",
                                          schedule_conf="60", trigger_status=1, trigger_next_time=1_000))
    assert len(await store.jobs.claim_due("dead", 1, 5_000, 60_000, 10)) == 2
    assert await store.jobs.advance("dead", [(far, 1_000, 500_000)]) == 1
    taken = await claim_owned_by(store.db, "me", ["dead"], 500, 5_000, 10_000, 100)
    assert sorted(j.id for j in taken) == sorted([near, far])
