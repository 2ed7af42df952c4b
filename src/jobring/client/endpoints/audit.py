"""The audit log (``/audit``, admin only): who did what, when, from where."""

from __future__ import annotations

from datetime import UTC, datetime

from jobring.client.call import ApiGroup, Call, Endpoint, M, get
from jobring.client.page import Page, as_page


def _instant(value: str | datetime | None) -> str | None:
    if isinstance(value, datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=UTC)
        return value.isoformat()
    return value


def list_audit(
    *,
    action: str | None = None,
    actor: str | None = None,
    actor_id: int | None = None,
    target_type: str | None = None,
    target_id: str | int | None = None,
    group: int | None = None,
    outcome: str | None = None,
    since: str | datetime | None = None,
    until: str | datetime | None = None,
    before_id: int | None = None,
    offset: int = 0,
    limit: int = 50,
) -> Call[Page]:
    """Audit records, newest first (admin only). ``action`` is an action (``job.update``) or
    a prefix (``job``); ``actor`` a username; ``outcome`` success or failure; ``since`` and
    ``until`` are instants (ISO 8601 text or datetimes, naive ones are UTC)."""
    return get(
        "/audit", as_page, action=action, actor=actor, actor_id=actor_id, target_type=target_type,
        target_id=None if target_id is None else str(target_id), group_id=group, outcome=outcome,
        since=_instant(since), until=_instant(until), before_id=before_id, offset=offset, limit=limit,
    )


class AuditApi(ApiGroup[M]):
    """The audit log of security-relevant actions (admin only)."""

    list = Endpoint(list_audit)
