"""Session locks that prove a scheduling node alive (PostgreSQL, MariaDB/MySQL).

Each node holds a lock named after its id on a dedicated connection (not the pool): a
PostgreSQL advisory lock, a MariaDB/MySQL ``GET_LOCK`` lock. The database releases it the
moment that session ends: the process died (its socket closed), or it stayed idle past the
session's idle timeout (a paused process). Another node that obtains the lock therefore
knows the node's session is gone, and with it the only way that node raises its send fence
(:meth:`NodeLockSession.raise_fence`). SQLite has no sessions: nodes there rely on leases.

    session = await NodeLockSession.open(store.engine, "node-a", idle_timeout_ms=3_000)
    await session.acquire_own()     # False while another session holds it
    await session.others(now_ms)    # [(node_id, lock_key)] of the other announced nodes
    await session.try_lock(key)     # True: that node's session is gone (lock held by us now)
"""

from __future__ import annotations

import builtins
import hashlib
import logging
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from sqlalchemy import ColumnElement, insert, or_, select, text, update
from sqlalchemy.exc import DBAPIError, IntegrityError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine
from sqlalchemy.pool import NullPool

from jobring.admin.store.base import chunks, to_record
from jobring.admin.store.engine import Db
from jobring.admin.store.errors import StoreError, is_lock_wait
from jobring.admin.store.records import JobInfo
from jobring.admin.store.tables import job_info, scheduler_node

log = logging.getLogger(__name__)

BACKENDS = ("postgresql", "mariadb", "mysql")


def lock_key(database: str, node_id: str) -> int:
    """The node's lock key: a signed 64-bit hash of its id and the database name (MariaDB's
    lock names are server-wide: another jobring database may have a node of the same id).
    Never 0, which means none."""
    digest = hashlib.sha256(f"{database}\0{node_id}".encode()).digest()
    key = int.from_bytes(digest[:8], "big", signed=True)
    return key or 1


def lock_name(key: int) -> str:
    """The MariaDB/MySQL lock name of a key (names are limited to 64 characters)."""
    return f"jobring-node-{key & 0xFFFF_FFFF_FFFF_FFFF:016x}"


class NodeRowLocked(StoreError):
    """A node row this session writes is locked by another transaction past the session's
    lock wait: the session is fine; try again later. A node paused (not dead: its lock
    session idled out) inside a write of its own row holds that row until it resumes."""


class NodeLockSession:
    """One node's dedicated lock session. Not safe for concurrent use: callers serialize."""

    def __init__(self, engine: AsyncEngine, conn: AsyncConnection, backend: str, node_id: str) -> None:
        self._engine = engine
        self._conn = conn
        self._backend = backend
        self.node_id = node_id
        self.key = lock_key(engine.url.database or "", node_id)

    @classmethod
    async def open(cls, engine: AsyncEngine, node_id: str, *, idle_timeout_ms: int,
                   lock_wait_ms: int = 1_000) -> NodeLockSession:
        """Connect a new session (outside ``engine``'s pool) that the server closes after
        ``idle_timeout_ms`` without a statement, and whose statements wait at most
        ``lock_wait_ms`` for a row lock (MariaDB/MySQL: whole seconds, at least 1)."""
        backend = Db(engine).backend
        if backend not in BACKENDS:
            raise ValueError(f"no session locks on {backend}")
        own = create_async_engine(engine.url, poolclass=NullPool)
        try:
            conn = await own.connect()
            await conn.execution_options(isolation_level="AUTOCOMMIT")
            # A statement the node gave up on (its round trip timed out) goes on waiting on the
            # server, which notices the closed connection only once it ends: while it waits for
            # a row lock, the abandoned session keeps this node's lock, and the node cannot take
            # it again (MariaDB waits 50 s by default; aiomysql does not cancel on the server).
            wait_s = max(1, lock_wait_ms // 1000)  # rounded down: shorter than the caller's wait
            if backend == "postgresql":
                await conn.execute(text(f"SET lock_timeout = {int(lock_wait_ms)}"))
                version = int((await conn.execute(text("SHOW server_version_num"))).scalar_one())
                if version >= 140_000:
                    await conn.execute(text(f"SET idle_session_timeout = {int(idle_timeout_ms)}"))
                else:
                    # A paused node keeps its lock: its jobs wait for its leases (as without).
                    log.warning("PostgreSQL before 14 has no idle_session_timeout: the jobs of a "
                                "paused (not dead) admin node are taken over when its leases end")
            else:
                idle_s = max(1, -(-idle_timeout_ms // 1000))
                await conn.execute(text(f"SET SESSION wait_timeout = {idle_s}, innodb_lock_wait_timeout"
                                        f" = {wait_s}, lock_wait_timeout = {wait_s}"))
        except BaseException:
            await own.dispose()
            raise
        return cls(own, conn, backend, node_id)

    async def close(self) -> None:
        """End the session (the server releases its locks)."""
        try:
            await self._conn.close()
        finally:
            await self._engine.dispose()

    async def _scalar(self, sql: str, **params: Any) -> Any:
        return (await self._conn.execute(text(sql), params)).scalar()

    async def try_lock(self, key: int) -> bool:
        """Take the lock without waiting; False while another session holds it. (On
        PostgreSQL a session re-takes its own locks: do not try one this session holds.)"""
        if self._backend == "postgresql":
            return bool(await self._scalar("SELECT pg_try_advisory_lock(:k)", k=key))
        return bool(await self._scalar("SELECT GET_LOCK(:n, 0)", n=lock_name(key)) == 1)

    async def unlock(self, key: int) -> None:
        """Release a lock this session holds."""
        if self._backend == "postgresql":
            await self._scalar("SELECT pg_advisory_unlock(:k)", k=key)
        else:
            await self._scalar("SELECT RELEASE_LOCK(:n)", n=lock_name(key))

    async def acquire_own(self, now_ms: int) -> bool:
        """Take this node's lock and publish its key in the node row; False while another
        session (a previous process with the same id, or a node taking it over) holds it."""
        if not await self.try_lock(self.key):
            return False
        await self._publish(now_ms)
        return True

    async def others(self, now_ms: int) -> builtins.list[tuple[str, int]]:
        """The other nodes announced alive at ``now_ms`` that hold a session lock (a round
        trip on this session: it also keeps it from going idle). Publishes this node's key
        again if its row lost it."""
        node, key = scheduler_node.c.node_id, scheduler_node.c.lock_key
        stmt = select(node, key).where(
            or_(node == self.node_id, (key != 0) & (scheduler_node.c.alive_until >= now_ms)))
        rows = (await self._conn.execute(stmt)).all()
        if not any(r.node_id == self.node_id and r.lock_key == self.key for r in rows):
            await self._publish(now_ms)
        return [(r.node_id, int(r.lock_key)) for r in rows if r.node_id != self.node_id and r.lock_key]

    async def raise_fence(self, fence_ms: int) -> None:
        """Let this node send fires planned up to ``fence_ms`` (never lowered). Through this
        session only: once it is gone, the node's fence cannot rise any more."""
        await self._write({"send_fence": fence_ms}, scheduler_node.c.send_fence < fence_ms)

    async def _publish(self, now_ms: int) -> None:
        # A new row says "alive now": the nodes' cleanup (forget) deletes rows that are
        # neither alive nor fencing, and would take this one before the first heartbeat.
        await self._write({"lock_key": self.key}, scheduler_node.c.lock_key != self.key,
                          on_insert={"alive_until": now_ms})

    async def _write(self, values: dict[str, int], unless_so: ColumnElement[bool],
                     on_insert: dict[str, int] | None = None) -> None:
        """Set columns of this node's row, creating it when missing (the node's heartbeat
        may create it at the same time)."""
        row = scheduler_node.c.node_id == self.node_id
        for _ in range(3):
            stmt = update(scheduler_node).where(row, unless_so).values(values)
            if (await self._conn.execute(stmt)).rowcount:
                return
            if (await self._conn.execute(select(scheduler_node.c.node_id).where(row))).first() is not None:
                return  # already so
            try:
                await self._conn.execute(insert(scheduler_node).values(
                    {"node_id": self.node_id, **(on_insert or {}), **values}))
                return
            except IntegrityError:
                continue  # created meanwhile: update it
        raise RuntimeError(f"could not write the row of scheduler node {self.node_id}")

    async def mark_gone(self, node_ids: Sequence[str]) -> None:
        """Record that these nodes (whose locks this session holds) are dead: they no longer
        count as live nodes and nobody tries their locks again. Their fences stay. Raises
        :class:`NodeRowLocked` when another transaction holds one of their rows."""
        try:
            for part in chunks(sorted(node_ids)):
                await self._conn.execute(update(scheduler_node).where(scheduler_node.c.node_id.in_(part))
                                         .values(alive_until=0, lock_key=0))
        except DBAPIError as exc:
            if is_lock_wait(exc):
                raise NodeRowLocked(f"the row of a node among {sorted(node_ids)} is locked by another "
                                    "transaction") from exc
            raise


async def claim_owned_by(
    db: Db, node_id: str, owners: Sequence[str], now_ms: int, window_end_ms: int, lease_ms: int, limit: int,
) -> builtins.list[JobInfo]:
    """Lease to ``node_id`` the running jobs still leased to ``owners`` (dead nodes), whatever
    their leases' end and their next instant (the claimant releases those due after
    ``window_end_ms``: nobody would try a dead node's lock again to take them)."""
    if not owners or limit <= 0:
        return []
    caps = await db.capabilities()
    until = now_ms + lease_ms
    stmt = (select(job_info)
            .where(job_info.c.trigger_status == 1, or_(*(job_info.c.lease_owner == o for o in owners)))
            .order_by(job_info.c.trigger_next_time).limit(limit))
    if caps.backend != "sqlite":
        stmt = stmt.with_for_update(skip_locked=caps.skip_locked)
    async with db.write(read_committed=True) as conn:
        rows = (await conn.execute(stmt)).all()
        for part in chunks([r.id for r in rows]):
            await conn.execute(update(job_info).where(job_info.c.id.in_(part))
                               .values(lease_owner=node_id, lease_until=until))
    return [replace(to_record(JobInfo, r), lease_owner=node_id, lease_until=until) for r in rows]
