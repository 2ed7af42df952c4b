"""The audit trail: who did which security-relevant action, when, from where, and what changed.

Endpoints record an action with one call once it has happened::

    await services.audit.job_event(principal, AuditAction.JOB_UPDATE, new, before=old)

Edits keep only the fields that changed (before/after); secrets are never stored: passwords,
tokens, hashes, alarm signing secrets and the credential parts of webhook URLs are masked at
any depth (:mod:`jobring.core.masking`, the same walk as the API's answers; a JSON column
such as ``alarm_targets`` is walked as data), and GLUE sources kept only as their sha256
and length. The record is written
right after the change; a failed write is retried when transient and otherwise logged as
an error with the whole record, never dropped silently.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import asdict, dataclass
from enum import StrEnum
from typing import Any

import orjson
from starlette.types import ASGIApp, Receive, Scope, Send

from jobring.admin.security.principal import AuthMethod, Principal
from jobring.admin.security.roles import Role
from jobring.admin.store import Store
from jobring.admin.store.audit import NewAuditEvent
from jobring.admin.store.errors import is_transient
from jobring.admin.store.records import JobGroup, JobInfo, RevokedAccess, User
from jobring.admin.trigger.trigger import FireResult
from jobring.core.clock import Clock
from jobring.core.masking import MASK, masked

log = logging.getLogger(__name__)

REDACTED = MASK  # what a secret is recorded as
WRITE_ATTEMPTS = 3
RETRY_BASE_S = 0.05
MAX_DETAILS_CHARS = 1_000_000  # MEDIUMTEXT holds 16 MiB; this keeps a record readable


class AuditAction(StrEnum):
    """What was done; dotted so that a prefix ("job") selects a family."""

    LOGIN = "auth.login"
    LOGIN_FAILED = "auth.login_failed"
    LOGOUT = "auth.logout"
    PASSWORD_CHANGE = "auth.password_change"
    TOKEN_CREATE = "token.create"
    TOKEN_REVOKE = "token.revoke"
    USER_CREATE = "user.create"
    USER_UPDATE = "user.update"
    USER_DELETE = "user.delete"
    USER_PASSWORD_RESET = "user.password_reset"
    USER_ACCESS_REVOKE = "user.access_revoke"  # a change ended the user's sessions and API tokens
    GROUP_CREATE = "group.create"
    GROUP_UPDATE = "group.update"
    GROUP_DELETE = "group.delete"
    GROUP_TOKEN_ROTATE = "group.token_rotate"
    GROUP_ADDRESS_DISABLE = "group.address_disable"
    GROUP_ADDRESS_ENABLE = "group.address_enable"
    GROUP_FLOW = "group.flow"  # the group's flow control set
    JOB_CREATE = "job.create"
    JOB_UPDATE = "job.update"
    JOB_DELETE = "job.delete"
    JOB_START = "job.start"
    JOB_STOP = "job.stop"
    JOB_TRIGGER = "job.trigger"
    JOB_TRIGGER_AT = "job.trigger_at"  # a delayed run asked for
    JOB_DELAYED_CANCEL = "job.delayed_cancel"
    JOB_BACKFILL = "job.backfill"  # a backfill started
    JOB_BACKFILL_CANCEL = "job.backfill_cancel"
    JOB_DECLARED_STOP = "job.declared_stop"  # its executor no longer declares it
    JOB_DECLARED_DELETE = "job.declared_delete"  # not declared for the grace period: deleted
    CALENDAR_CREATE = "calendar.create"
    CALENDAR_UPDATE = "calendar.update"
    CALENDAR_DELETE = "calendar.delete"
    GLUE_SAVE = "glue.save"
    GLUE_RESTORE = "glue.restore"
    RUN_KILL = "run.kill"
    RUN_CANCEL = "run.cancel"  # a queued run cancelled
    RUN_RETRY_FAILED = "run.retry_failed"
    WORKFLOW_CREATE = "workflow.create"
    WORKFLOW_UPDATE = "workflow.update"
    WORKFLOW_DELETE = "workflow.delete"
    WORKFLOW_TRIGGER = "workflow.trigger"
    WORKFLOW_RUN_STOP = "workflow.run_stop"
    WORKFLOW_RUN_RETRY = "workflow.run_retry"
    WORKFLOW_RUN_MARK = "workflow.run_mark_succeeded"
    WORKFLOW_RUN_RERUN = "workflow.run_rerun_from"
    WORKFLOW_SCHEDULE = "workflow.schedule"
    RUNS_CLEAR = "runs.clear"
    SETTINGS_CHANGE = "settings.change"
    SECRET_READ = "settings.secret_read"


class ActorKind(StrEnum):
    """Which credential the actor used."""

    SESSION = "session"
    API_TOKEN = "api_token"
    EXECUTOR = "executor"  # an executor access token (XXL-JOB 3.x job-management calls)
    SYSTEM = "system"  # the admin itself (first start, monitors)
    ANONYMOUS = "anonymous"  # not authenticated (a login attempt)


class Outcome(StrEnum):
    SUCCESS = "success"
    FAILURE = "failure"

    @classmethod
    def of_code(cls, code: int) -> Outcome:
        """From an XXL-JOB result code (200 is success)."""
        return cls.SUCCESS if code == 200 else cls.FAILURE


@dataclass(frozen=True, slots=True)
class Actor:
    """Who acted: a user (with the username as it was then), a credential, or the system."""

    name: str
    kind: ActorKind
    user_id: int | None = None
    token_id: int | None = None

    @classmethod
    def of(cls, principal: Principal) -> Actor:
        kind = ActorKind.SESSION if principal.method is AuthMethod.SESSION else ActorKind.API_TOKEN
        return cls(principal.user.username, kind, principal.user.id, principal.token_id)

    @classmethod
    def user(cls, user: User, kind: ActorKind = ActorKind.SESSION) -> Actor:
        return cls(user.username, kind, user.id)


SYSTEM = Actor("system", ActorKind.SYSTEM)
EXECUTOR_TOKEN = Actor("executor access token", ActorKind.EXECUTOR)

# -- where the request came from --------------------------------------------------------------

_source: ContextVar[str | None] = ContextVar("jobring_audit_source", default=None)


def client_address(scope: Mapping[str, Any]) -> str | None:
    """The request's client address as the server saw it (a trusted proxy's forwarded
    address once the server has applied it)."""
    client = scope.get("client")
    return str(client[0]) if client else None


@contextmanager
def request_source(address: str | None) -> Iterator[None]:
    """Within this block, audit records name ``address`` as their source."""
    reset = _source.set(address)
    try:
        yield
    finally:
        _source.reset(reset)


class SourceCapture:
    """ASGI middleware: every audit record made while handling a request gets its address."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        with request_source(client_address(scope)):
            await self.app(scope, receive, send)


# -- what changed, without secrets ------------------------------------------------------------


def source_digest(source: str | None) -> dict[str, Any] | None:
    """A GLUE source as its sha256 and length: scripts may embed credentials."""
    if source is None:
        return None
    data = source.encode("utf-8", "surrogatepass")
    return {"sha256": hashlib.sha256(data).hexdigest(), "length": len(source)}


def _digested(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {str(k): source_digest(v) if str(k) == "glue_source" and (v is None or isinstance(v, str))
                else _digested(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_digested(item) for item in value]
    return value


def redact(value: Any) -> Any:
    """``value`` with every secret masked at any depth (secret-named keys and the credential
    parts of URLs, by :func:`jobring.core.masking.masked`) and GLUE sources digested."""
    return masked(_digested(value))


def changes(before: Mapping[str, Any], after: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """The fields whose value differs: ``{name: {"before": b, "after": a}}``, redacted. The
    comparison is of the real values, so a changed secret is listed (masked both sides,
    with ``"secret_changed": true``)."""
    out: dict[str, dict[str, Any]] = {}
    for key in dict.fromkeys([*before, *after]):
        if before.get(key) == after.get(key):
            continue
        old, new = redact({key: before.get(key)})[key], redact({key: after.get(key)})[key]
        out[key] = {"before": old, "after": new}
        if old == new:
            out[key]["secret_changed"] = True
    return out


# Volatile or scheduler-owned job fields: not what a person edits.
_JOB_SKIPPED = frozenset(
    {"id", "add_time", "update_time", "glue_updatetime", "trigger_status", "trigger_last_time",
     "trigger_next_time", "lease_owner", "lease_until", "declared_spec"}
)


def _structured(text: Any) -> Any:
    """A JSON column as data, so that the secrets inside it are masked like any other;
    text that does not parse is kept only as a mask (it may hold anything)."""
    if not isinstance(text, str):
        return text
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        return MASK


def job_snapshot(job: JobInfo) -> dict[str, Any]:
    snapshot = {k: v for k, v in asdict(job).items() if k not in _JOB_SKIPPED}
    snapshot["alarm_targets"] = _structured(snapshot["alarm_targets"])
    return snapshot


def user_snapshot(user: User) -> dict[str, Any]:
    try:
        role = Role(user.role).label
    except ValueError:
        role = str(user.role)
    return {
        "username": user.username,
        "role": role,
        "group_ids": user.permitted_group_ids,
        "glue_permission": user.glue_permission,
        "must_change_password": user.must_change_password,
    }


def group_snapshot(group: JobGroup) -> dict[str, Any]:
    return {
        "app_name": group.app_name,
        "title": group.title,
        "address_type": group.address_type,
        "addresses": group.addresses,
    }


def _pair(
    action: AuditAction, current: dict[str, Any], previous: dict[str, Any] | None, snapshot: bool
) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
    """(before, after) for :meth:`AuditLog.record`: both for an edit, one whole snapshot
    for a creation or deletion, none otherwise."""
    if previous is not None:
        return previous, current
    if not snapshot:
        return None, None
    return (current, None) if action.value.endswith("delete") else (None, current)


def _encoded(body: dict[str, Any]) -> str:
    """``body`` as JSON; an oversized or unencodable one is replaced by a note saying so."""
    try:
        text = orjson.dumps(body, default=str).decode()
    except (TypeError, ValueError) as exc:  # orjson.JSONEncodeError is a TypeError
        return orjson.dumps({"unrecorded": f"details not encodable: {exc}"}).decode()
    if len(text) > MAX_DETAILS_CHARS:
        return orjson.dumps({"unrecorded": f"details of {len(text)} characters", "keys": list(body)}).decode()
    return text


# -- recording --------------------------------------------------------------------------------


class AuditLog:
    """Writes audit records; shared by the management API and the XXL-JOB 3.x aliases."""

    def __init__(self, store: Store, clock: Clock) -> None:
        self._store = store
        self._clock = clock

    async def record(
        self,
        actor: Actor | Principal,
        action: AuditAction,
        *,
        target_type: str | None = None,
        target_id: object = None,
        group_id: int | None = None,
        outcome: Outcome = Outcome.SUCCESS,
        before: Mapping[str, Any] | None = None,
        after: Mapping[str, Any] | None = None,
        details: Mapping[str, Any] | None = None,
    ) -> None:
        """Record one action. ``before`` and ``after`` together keep only the changed fields;
        alone they are kept whole (a creation, a deletion). Never raises (but cancellation)."""
        who = actor if isinstance(actor, Actor) else Actor.of(actor)
        body: dict[str, Any] = {}
        if before is not None and after is not None:
            body["changes"] = changes(before, after)
        elif after is not None:
            body["after"] = redact(after)
        elif before is not None:
            body["before"] = redact(before)
        if details:
            body.update(redact(details))
        event = NewAuditEvent(
            at=self._clock.now_ms(),
            actor=who.name,
            actor_kind=who.kind.value,
            action=action.value,
            outcome=outcome.value,
            actor_id=who.user_id,
            token_id=who.token_id,
            source=_source.get(),
            target_type=target_type,
            target_id=None if target_id is None else str(target_id),
            group_id=group_id,
            details=_encoded(body) if body else None,
        )
        await self._write(event)

    async def access_revoked(
        self, actor: Actor | Principal, user_id: int, revoked: RevokedAccess, reason: str
    ) -> None:
        """Record that ``reason`` (e.g. "password_reset") ended the user's sessions and tokens."""
        await self.record(
            actor, AuditAction.USER_ACCESS_REVOKE, target_type="user", target_id=user_id,
            details={"reason": reason, "sessions": revoked.sessions, "tokens": revoked.tokens},
        )

    async def _write(self, event: NewAuditEvent) -> None:
        for attempt in range(1, WRITE_ATTEMPTS + 1):
            try:
                await self._store.audit.insert(event)
                return
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                if attempt < WRITE_ATTEMPTS and is_transient(exc):
                    delay = RETRY_BASE_S * 4 ** (attempt - 1)
                    log.warning("audit write failed (%s); retry %d in %.2f s", exc, attempt, delay)
                    await asyncio.sleep(delay)
                    continue
                # The action itself has happened; keep the record in the log at least.
                log.error("audit record NOT stored (%r): %s", exc, orjson.dumps(asdict(event)).decode())
                return

    async def job_event(
        self,
        actor: Actor | Principal,
        action: AuditAction,
        job: JobInfo,
        *,
        before: JobInfo | None = None,
        snapshot: bool = False,
        outcome: Outcome = Outcome.SUCCESS,
        **details: Any,
    ) -> None:
        """An action on ``job``: with ``before`` the changed fields; with ``snapshot`` the whole
        job (as "before" for a deletion, "after" otherwise)."""
        previous = None if before is None else job_snapshot(before)
        old, new = _pair(action, job_snapshot(job), previous, snapshot)
        await self.record(
            actor, action, target_type="job", target_id=job.id, group_id=job.job_group, outcome=outcome,
            before=old, after=new, details=details,
        )

    async def user_event(
        self, actor: Actor | Principal, action: AuditAction, user: User, *, before: User | None = None,
        snapshot: bool = False,
    ) -> None:
        """An action on ``user`` (see :meth:`job_event`)."""
        previous = None if before is None else user_snapshot(before)
        old, new = _pair(action, user_snapshot(user), previous, snapshot)
        await self.record(actor, action, target_type="user", target_id=user.id, before=old, after=new)

    async def group_event(
        self, actor: Actor | Principal, action: AuditAction, group: JobGroup, *,
        before: JobGroup | None = None, snapshot: bool = False,
    ) -> None:
        """An action on an executor group (see :meth:`job_event`)."""
        old, new = _pair(
            action, group_snapshot(group), None if before is None else group_snapshot(before), snapshot
        )
        await self.record(
            actor, action, target_type="group", target_id=group.id, group_id=group.id, before=old, after=new
        )

    async def glue_event(
        self, actor: Actor | Principal, action: AuditAction, job: JobInfo, *, before: JobInfo, **details: Any
    ) -> None:
        """A GLUE source saved or restored: the old and new source as digests, and the remark."""
        await self.record(
            actor, action, target_type="job", target_id=job.id, group_id=job.job_group,
            before={"glue_type": before.glue_type, "glue_source": before.glue_source},
            after={"glue_type": job.glue_type, "glue_source": job.glue_source},
            details={"glue_remark": job.glue_remark, **details},
        )

    async def trigger_event(
        self, actor: Actor | Principal, job: JobInfo, result: FireResult, executor_param: str | None,
        addresses: list[str] | None,
    ) -> None:
        """A manual or API trigger and what came of it."""
        await self.job_event(
            actor, AuditAction.JOB_TRIGGER, job, outcome=Outcome.of_code(result.trigger_code),
            executor_param=executor_param, addresses=addresses, log_ids=result.log_ids,
        )

    async def login_failed(self, username: str, user: User | None) -> None:
        """A refused login: the name tried (and the user's id when it exists)."""
        actor = Actor(username, ActorKind.ANONYMOUS, user.id if user else None)
        await self.record(actor, AuditAction.LOGIN_FAILED, outcome=Outcome.FAILURE)
