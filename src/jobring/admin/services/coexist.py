"""Is XXL-JOB's Java admin still scheduling on this database? Checked before jobring schedules.

Two admins firing from one database fire every job twice. XXL-JOB's scheduler takes the
``schedule_lock`` row (``SELECT ... FOR UPDATE``) around each pre-read and writes a run row
for each fire without a jobring node name; either sign, seen lately, means it is alive.
jobring leases jobs and fires them from memory, so taking the same row lock around its own
claims would not stop a double fire: jobring refuses to schedule until told to take over.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta

from sqlalchemy import func, select, text
from sqlalchemy.exc import DBAPIError

from jobring.admin.store import Store
from jobring.admin.store.errors import is_lock_wait
from jobring.admin.store.tables import SCHEDULE_LOCK, job_lock, job_log
from jobring.errors import JobringError

log = logging.getLogger(__name__)

RECENT_MINUTES = 10


class JavaAdminAlive(JobringError):
    """Another (XXL-JOB) admin schedules on this database; the message says how to proceed."""


async def java_admin_signs(store: Store, now_ms: int, legacy_log_id_max: int) -> list[str]:
    """Reasons to believe a Java admin is scheduling on the database right now (empty: none)."""
    signs: list[str] = []
    since = datetime.fromtimestamp(now_ms / 1000, UTC).replace(tzinfo=None) - timedelta(
        minutes=RECENT_MINUTES
    )
    async with store.db.read() as conn:
        foreign = (
            await conn.execute(
                select(func.count())
                .select_from(job_log)
                .where(
                    job_log.c.admin_node.is_(None),
                    job_log.c.id > legacy_log_id_max,
                    job_log.c.trigger_time >= since,
                )
            )
        ).scalar_one()
    if foreign:
        signs.append(
            f"{foreign} run(s) of the last {RECENT_MINUTES} minutes were written by an admin "
            "that is not jobring"
        )
    if store.db.engine.dialect.name == "mysql" and await _lock_is_held(store):
        signs.append("xxl_job_lock 'schedule_lock' is held by another connection right now")
    return signs


# jobring nodes probe one at a time: two nodes starting together would otherwise each find the
# row locked by the other's probe and take it for a Java admin.
_PROBE_GATE = "jobring_coexist_probe"
_PROBE_GATE_WAIT_S = 10


async def _lock_is_held(store: Store) -> bool:
    try:
        async with store.db.engine.connect() as conn:
            gate = text("SELECT GET_LOCK(:name, :wait)")
            if (await conn.execute(gate, {"name": _PROBE_GATE, "wait": _PROBE_GATE_WAIT_S})).scalar() != 1:
                log.warning("another jobring node probed for %d s; probing anyway", _PROBE_GATE_WAIT_S)
            await conn.commit()
            try:
                stmt = select(job_lock.c.lock_name).where(job_lock.c.lock_name == SCHEDULE_LOCK)
                try:
                    await conn.execute(stmt.with_for_update(nowait=True))
                finally:
                    await conn.rollback()  # frees the row before the next node may probe
            finally:
                await conn.execute(text("SELECT RELEASE_LOCK(:name)"), {"name": _PROBE_GATE})
                await conn.commit()
    except DBAPIError as exc:
        if is_lock_wait(exc):  # the NOWAIT found the row locked
            return True
        # MySQL 5.7 has no NOWAIT: only the run-based sign is available there.
        log.warning("cannot probe XXL-JOB's schedule_lock (%s); judging by recent runs only", exc.orig)
    return False


async def refuse_if_java_admin_alive(
    store: Store, now_ms: int, legacy_log_id_max: int, *, takeover: bool
) -> None:
    """Raise JavaAdminAlive when a Java admin seems to schedule here, unless ``takeover``."""
    signs = await java_admin_signs(store, now_ms, legacy_log_id_max)
    if not signs:
        return
    if takeover:
        log.warning(
            "another admin seems to schedule on this database (%s); taking over as told "
            "(JOBRING_TAKEOVER): stop XXL-JOB's admin now or every job fires twice",
            "; ".join(signs),
        )
        return
    raise JavaAdminAlive(
        "refusing to schedule: XXL-JOB's admin seems to be scheduling on this database ("
        + "; ".join(signs)
        + "). Stop it (see docs/migrating-from-xxl-job.md), then start jobring with "
        "--takeover (JOBRING_TAKEOVER=true) once"
    )


class ForeignRunWatch:
    """While jobring schedules: an error line each time runs appear that no jobring node wrote
    (XXL-JOB's admin was started again on this database, so jobs fire twice)."""

    def __init__(self, store: Store) -> None:
        self._store = store
        self._seen_id: int | None = None

    async def check(self) -> int:
        """How many foreign runs appeared since the last check (the first check only looks)."""
        async with self._store.db.read() as conn:
            if self._seen_id is None:
                self._seen_id = int(
                    (await conn.execute(select(func.coalesce(func.max(job_log.c.id), 0)))).scalar_one()
                )
                return 0
            rows = (
                await conn.execute(
                    select(func.count(), func.max(job_log.c.id)).where(
                        job_log.c.admin_node.is_(None), job_log.c.id > self._seen_id
                    )
                )
            ).one()
        count, newest = int(rows[0]), rows[1]
        if count:
            self._seen_id = int(newest)
            log.error(
                "%d run(s) were just written by an admin that is not jobring: XXL-JOB's admin is "
                "scheduling on this database too, and every job fires twice; stop it",
                count,
            )
        return count
