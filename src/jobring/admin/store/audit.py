"""The audit log (``jobring_audit``): append, list with filters, batched retention delete."""

from __future__ import annotations

from dataclasses import asdict, dataclass

from sqlalchemy import ColumnElement, delete, insert, or_, select

from jobring.admin.store.base import Repository, fetch_page, new_id
from jobring.admin.store.records import Page
from jobring.admin.store.tables import audit

# Column widths of the short text columns; longer values are cut, never refused.
_WIDTHS = {
    "actor": 64,
    "actor_kind": 16,
    "source": 64,
    "action": 32,
    "target_type": 16,
    "target_id": 64,
    "outcome": 16,
}
RETENTION_BATCH = 1000


@dataclass(frozen=True, slots=True)
class NewAuditEvent:
    """An audit record to append. ``at`` is epoch ms (UTC); ``details`` is JSON text."""

    at: int
    actor: str
    actor_kind: str
    action: str
    outcome: str = "success"
    actor_id: int | None = None
    token_id: int | None = None
    source: str | None = None
    target_type: str | None = None
    target_id: str | None = None
    group_id: int | None = None
    details: str | None = None


@dataclass(frozen=True, slots=True)
class AuditEvent(NewAuditEvent):
    """A stored audit record."""

    id: int = 0


@dataclass(frozen=True, slots=True)
class AuditFilter:
    """What ``list`` selects; None means any. ``action`` matches the action itself or, as a
    dotted prefix, every action under it ("job" matches "job.create" and "job.delete")."""

    actor: str | None = None
    actor_id: int | None = None
    action: str | None = None
    target_type: str | None = None
    target_id: str | None = None
    group_id: int | None = None
    outcome: str | None = None
    since_ms: int | None = None  # inclusive
    until_ms: int | None = None  # exclusive
    before_id: int | None = None  # keyset paging: records older than this id


def _escaped(text: str) -> str:
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


def _where(f: AuditFilter) -> list[ColumnElement[bool]]:
    c = audit.c
    where: list[ColumnElement[bool]] = []
    if f.actor is not None:
        where.append(c.actor == f.actor)
    if f.actor_id is not None:
        where.append(c.actor_id == f.actor_id)
    if f.action:
        prefix = f.action.rstrip(".")
        where.append(or_(c.action == prefix, c.action.like(_escaped(prefix) + ".%", escape="\\")))
    if f.target_type is not None:
        where.append(c.target_type == f.target_type)
    if f.target_id is not None:
        where.append(c.target_id == f.target_id)
    if f.group_id is not None:
        where.append(c.group_id == f.group_id)
    if f.outcome is not None:
        where.append(c.outcome == f.outcome)
    if f.since_ms is not None:
        where.append(c.at >= f.since_ms)
    if f.until_ms is not None:
        where.append(c.at < f.until_ms)
    if f.before_id is not None:
        where.append(c.id < f.before_id)
    return where


class AuditRepository(Repository):
    """Append-only audit records; only the retention deletes them."""

    async def insert(self, event: NewAuditEvent) -> int:
        """Append one record; returns its id. Over-long short texts are cut to their column."""
        values = asdict(event)
        for name, width in _WIDTHS.items():
            value = values[name]
            if isinstance(value, str) and len(value) > width:
                values[name] = value[:width]
        async with self._db.write() as conn:
            return new_id(await conn.execute(insert(audit).values(**values)))

    async def list(
        self, where: AuditFilter | None = None, *, offset: int = 0, limit: int = 50
    ) -> Page[AuditEvent]:
        """Matching records, newest first, and how many match overall."""
        async with self._db.read() as conn:
            return await fetch_page(
                conn, audit, AuditEvent, _where(where or AuditFilter()), (audit.c.id.desc(),), offset, limit
            )

    async def delete_older_than(self, cutoff_ms: int, batch: int = RETENTION_BATCH) -> int:
        """Delete records before ``cutoff_ms`` in batches of ``batch`` rows (short transactions,
        so writers are never held up for long); returns how many were deleted."""
        deleted = 0
        while True:
            async with self._db.write() as conn:
                ids = (
                    (
                        await conn.execute(
                            select(audit.c.id).where(audit.c.at < cutoff_ms).order_by(audit.c.id).limit(batch)
                        )
                    )
                    .scalars()
                    .all()
                )
                if ids:
                    await conn.execute(delete(audit).where(audit.c.id.in_(ids)))
            deleted += len(ids)
            if len(ids) < batch:
                return deleted
