"""/audit: the audit log of security-relevant actions (admin only), newest first."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any

import orjson
from fastapi import APIRouter, Query
from pydantic import BaseModel, Field

from jobring.admin.api.management.deps import Admin, Services
from jobring.admin.api.management.errors import ERROR_RESPONSES, ApiError
from jobring.admin.api.management.models import MAX_INT32, MAX_INT64, PageOut, Text
from jobring.admin.services.audit import ActorKind, Outcome
from jobring.admin.store.audit import AuditEvent, AuditFilter

router = APIRouter(tags=["audit"], responses=ERROR_RESPONSES)


class AuditOut(BaseModel):
    id: int
    at: datetime = Field(description="when, UTC")
    actor: str = Field(description="the username as it was then, or the credential's name")
    actor_id: int | None = Field(description="the user's id, when the actor is a user")
    actor_kind: ActorKind
    token_id: int | None = Field(description="the API token used, if any")
    source: str | None = Field(description="the client's address")
    action: str = Field(description="e.g. auth.login_failed, job.update")
    target_type: str | None
    target_id: str | None
    group_id: int | None
    outcome: Outcome
    details: dict[str, Any] | None = Field(
        description="e.g. changes: {field: {before, after}} for edits; secrets are never included"
    )

    @classmethod
    def of(cls, event: AuditEvent) -> AuditOut:
        details = orjson.loads(event.details) if event.details else None
        return cls(
            id=event.id,
            at=datetime.fromtimestamp(event.at / 1000, tz=UTC),
            actor=event.actor,
            actor_id=event.actor_id,
            actor_kind=ActorKind(event.actor_kind),
            token_id=event.token_id,
            source=event.source,
            action=event.action,
            target_type=event.target_type,
            target_id=event.target_id,
            group_id=event.group_id,
            outcome=Outcome(event.outcome),
            details=details if isinstance(details, dict) or details is None else {"value": details},
        )


def _epoch_ms(name: str, value: datetime | None) -> int | None:
    if value is None:
        return None
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)  # instants without an offset are UTC
    try:
        return int(value.timestamp() * 1000)
    except (OverflowError, OSError, ValueError):
        raise ApiError(422, f"{name}: out of range", name) from None


@router.get("/audit", response_model=PageOut[AuditOut], summary="The audit log, newest first (admin)")
async def list_audit(
    services: Services,
    principal: Admin,
    action: Annotated[
        Text | None, Query(max_length=32, description="an action (job.update) or a prefix (job)")
    ] = None,
    actor: Annotated[Text | None, Query(max_length=64, description="username (exact)")] = None,
    actor_id: Annotated[int | None, Query(ge=1, le=MAX_INT32)] = None,
    target_type: Annotated[Text | None, Query(max_length=16, description="job, user, group, ...")] = None,
    target_id: Annotated[Text | None, Query(max_length=64)] = None,
    group_id: Annotated[int | None, Query(ge=1, le=MAX_INT32)] = None,
    outcome: Outcome | None = None,
    since: Annotated[datetime | None, Query(description="ISO 8601; from this instant on")] = None,
    until: Annotated[datetime | None, Query(description="ISO 8601; before this instant")] = None,
    before_id: Annotated[int | None, Query(ge=1, le=MAX_INT64, description="keyset paging")] = None,
    offset: Annotated[int, Query(ge=0, le=MAX_INT32)] = 0,
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
) -> PageOut[AuditOut]:
    where = AuditFilter(
        actor=actor,
        actor_id=actor_id,
        action=action,
        target_type=target_type,
        target_id=target_id,
        group_id=group_id,
        outcome=outcome.value if outcome else None,
        since_ms=_epoch_ms("since", since),
        until_ms=_epoch_ms("until", until),
        before_id=before_id,
    )
    page = await services.store.audit.list(where, offset=offset, limit=limit)
    return PageOut[AuditOut](
        items=[AuditOut.of(e) for e in page.items], total=page.total, offset=offset, limit=limit
    )
