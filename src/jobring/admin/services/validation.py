"""Validation of what the management API and the XXL-JOB 3.x aliases write.

Everything is checked before anything is written, and every problem names its field.
Pure checks (``check_job``) need no I/O; reference checks (``check_job_references``) read
the store: the group exists, child jobs exist and form no cycle.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from jobring.admin.store import Store
from jobring.admin.store.records import JobInfo
from jobring.core.addresses import AddressPolicy, AddressRefused, check_executor_address
from jobring.core.cron import CronParseError, to_quartz
from jobring.core.distributed import MAX_SHARDS, FailureTolerance, check_hooks
from jobring.core.enums import BlockStrategy, GlueType, MisfireStrategy, RouteStrategy, ScheduleType
from jobring.core.fielderror import FieldError as CoreFieldError
from jobring.core.schedule import parse_schedule
from jobring.core.text import one_line_problem
from jobring.errors import Conflict, Invalid, NotFound

# Column widths of xxl_job_info / xxl_job_group / xxl_job_user (tables.py).
JOB_LIMITS = {
    "job_desc": 255,
    "author": 64,
    "alarm_email": 255,
    "schedule_conf": 128,
    "executor_handler": 255,
    "executor_param": 512,
    "glue_remark": 128,
    "child_jobid": 255,
    "schedule_timezone": 64,
}
MAX_EXECUTOR_TIMEOUT_S = 7 * 24 * 3600
MAX_RETRY_COUNT = 100
# Job fields that hold one line (names, addresses, a cron expression): a line break in one
# would reach e-mail headers and logs. Parameters and GLUE remarks may span lines.
ONE_LINE_JOB_FIELDS = frozenset({
    "job_desc", "author", "alarm_email", "schedule_conf", "executor_handler", "child_jobid",
    "schedule_timezone",
})
MAX_CHILD_DEPTH = 1000
# Matched with fullmatch: "$" would also match before a final line break ("admin\n").
APP_NAME_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:\-]{0,63}")
USERNAME_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.@\-]{0,49}")
HANDLER_PATTERN = re.compile(r"\S(.*\S)?")


class FieldError(CoreFieldError):
    """A value the caller sent that cannot be accepted; ``field`` names it (the message is
    not prefixed again when it starts with the field's name)."""

    def __init__(self, field: str, message: str) -> None:
        Invalid.__init__(self, message if message.startswith(field) else f"{field}: {message}", field)
        self.field = field


class MissingReference(FieldError, NotFound):
    """A well-formed id naming something that does not exist (a NotFound, not merely invalid:
    no schema can tell which ids exist)."""


class ConflictingValue(FieldError, Conflict):
    """A value that conflicts with what is stored, e.g. child jobs forming a cycle."""


def text_problem(value: str) -> str | None:
    """Why ``value`` cannot be stored as text: control characters (other than tab and line
    breaks; PostgreSQL refuses NUL) or lone surrogates (not encodable as UTF-8)."""
    for ch in value:
        code = ord(ch)
        if code < 32 and ch not in "\t\r\n":
            return "must not contain control characters"
        if 0xD800 <= code <= 0xDFFF:
            return "must be valid Unicode (no lone surrogates)"
    return None


def check_text(
    field: str, value: str | None, max_len: int, *, required: bool = False, one_line: bool = False
) -> None:
    """Length within the column, no NUL or other control characters except tab/newline (with
    ``one_line``: none at all, see :mod:`jobring.core.text`)."""
    if value is None or value == "":
        if required:
            raise FieldError(field, "must not be empty")
        return
    if len(value) > max_len:
        raise FieldError(field, f"must have at most {max_len} characters, got {len(value)}")
    problem = (one_line_problem(value) if one_line else None) or text_problem(value)
    if problem:
        raise FieldError(field, problem)
    if required and not value.strip():
        raise FieldError(field, "must not be blank")


_INT64 = 2**63
_JSON_DEPTH = 64


def _scalar_problem(item: Any) -> str | None:
    if isinstance(item, bool) or item is None:
        return None
    if isinstance(item, int):
        return None if -_INT64 <= item < _INT64 else "integers must fit in 64 bits (±2^63)"
    if isinstance(item, float):
        return None if math.isfinite(item) else "numbers must be finite"
    if isinstance(item, str):  # control characters are fine: JSON escapes them
        surrogate = any(0xD800 <= ord(ch) <= 0xDFFF for ch in item)
        return "must be valid Unicode (no lone surrogates)" if surrogate else None
    return f"unsupported value of type {type(item).__name__}"


def _json_problem(item: Any, depth: int) -> str | None:
    if depth > _JSON_DEPTH:
        return f"must be nested at most {_JSON_DEPTH} levels deep"
    if isinstance(item, dict):
        pairs = [(str(k), v) for k, v in item.items()]
        return next((p for k, v in pairs if (p := _scalar_problem(k) or _json_problem(v, depth + 1))), None)
    if isinstance(item, list | tuple):
        return next((p for v in item if (p := _json_problem(v, depth + 1))), None)
    return _scalar_problem(item)


def check_json_value(field: str, value: Any) -> None:
    """A JSON value the store can keep and give back (its serializer, orjson, refuses the
    rest): integers within 64 bits, finite numbers, valid Unicode, at most 64 levels deep."""
    problem = _json_problem(value, 0)
    if problem:
        raise FieldError(field, problem)


def check_timezone(field: str, tz: str | None) -> None:
    if tz is None:
        return
    try:
        ZoneInfo(tz)
    except (ZoneInfoNotFoundError, ValueError, OSError):
        raise FieldError(
            field, f"unknown time zone {tz!r} (expected an IANA name such as Europe/Paris)"
        ) from None


def _check_enum(field: str, value: str | None, allowed: Iterable[str], *, required: bool = True) -> None:
    names = list(allowed)
    if value is None:
        if required:
            raise FieldError(field, f"is required (one of {', '.join(names)})")
        return
    if value not in names:
        raise FieldError(field, f"unknown value {value!r} (expected one of {', '.join(names)})")


def parse_child_ids(field: str, text: str | None) -> list[int]:
    """``child_jobid`` as a list of distinct positive ids; FieldError on anything else."""
    ids: list[int] = []
    for part in (text or "").split(","):
        item = part.strip()
        if not item:
            continue
        if not item.isdigit() or not item.isascii() or int(item) <= 0 or len(item) > 10:
            raise FieldError(field, f"{item!r} is not a job id")
        if int(item) not in ids:
            ids.append(int(item))
    return ids


def quartz_conf(schedule_type: str | None, conf: str | None) -> str | None:
    """A CRON job's expression as stored: a Unix 5-field expression (or @daily ...) becomes its
    Quartz form with a seconds field (``*/5 * * * *`` -> ``0 */5 * * * ?``); a Quartz one is
    kept. FieldError on ``schedule_conf`` with a suggestion for the usual 6/7-field mistakes."""
    if schedule_type != ScheduleType.CRON.value or conf is None or not conf.strip():
        return conf
    try:
        return to_quartz(conf)
    except CronParseError as exc:
        raise FieldError("schedule_conf", str(exc)) from None


def check_schedule(schedule_type: str, conf: str | None, tz: str, field_prefix: str = "") -> None:
    """The schedule parses (cron syntax, fix-rate range) in the zone it will run in."""
    _check_enum(field_prefix + "schedule_type", schedule_type, [t.value for t in ScheduleType])
    check_timezone(field_prefix + "schedule_timezone", tz)
    try:
        parse_schedule(schedule_type, conf, tz)
    except ValueError as exc:
        # The schedule's messages start with the field they are about ("schedule_conf: ...").
        text = str(exc)
        name, sep, _rest = text.partition(": ")
        field = (
            {"time_zone": "schedule_timezone"}.get(name, name)
            if sep and name.isidentifier()
            else "schedule_conf"
        )
        raise FieldError(field_prefix + field, text) from None


def check_job(job: JobInfo, default_tz: str) -> None:
    """Every field of ``job`` on its own (no store access)."""
    for name, limit in JOB_LIMITS.items():
        check_text(name, getattr(job, name), limit, required=name == "job_desc",
                   one_line=name in ONE_LINE_JOB_FIELDS)
    if job.job_group <= 0:
        raise FieldError("job_group", "must be a positive group id")
    _check_enum("misfire_strategy", job.misfire_strategy, [m.value for m in MisfireStrategy])
    _check_enum("executor_route_strategy", job.executor_route_strategy, [r.value for r in RouteStrategy])
    _check_enum("executor_block_strategy", job.executor_block_strategy, [b.value for b in BlockStrategy])
    _check_enum("glue_type", job.glue_type, [g.value for g in GlueType])
    if not 0 <= job.executor_timeout <= MAX_EXECUTOR_TIMEOUT_S:
        raise FieldError("executor_timeout", f"must be between 0 and {MAX_EXECUTOR_TIMEOUT_S} seconds")
    if not 0 <= job.executor_fail_retry_count <= MAX_RETRY_COUNT:
        raise FieldError("executor_fail_retry_count", f"must be between 0 and {MAX_RETRY_COUNT}")
    if job.glue_type == GlueType.BEAN and not (job.executor_handler or "").strip():
        raise FieldError("executor_handler", "is required for BEAN jobs")
    if job.executor_handler and not HANDLER_PATTERN.fullmatch(job.executor_handler):
        raise FieldError("executor_handler", "must not start or end with white space")
    if job.alarm_email:
        for address in job.alarm_email.split(","):
            if address.strip() and "@" not in address:
                raise FieldError("alarm_email", f"{address.strip()!r} is not an e-mail address")
    _check_alarms_and_retries(job)
    check_timezone("schedule_timezone", job.schedule_timezone)
    check_schedule(job.schedule_type, job.schedule_conf, job.schedule_timezone or default_tz)
    if job.id and job.id in parse_child_ids("child_jobid", job.child_jobid):
        raise ConflictingValue("child_jobid", "a job cannot be its own child")


MAX_RETRY_INTERVAL_S = 24 * 3600
MAX_DEADLINE_MINUTES = 7 * 24 * 60


def _check_alarms_and_retries(job: JobInfo) -> None:
    from jobring.admin.alarms.targets import TargetError, parse_targets
    from jobring.core.retry import AlarmOn, RetryBackoff

    try:
        parse_targets(job.alarm_targets)
    except TargetError as exc:
        raise FieldError(exc.field, exc.message) from None
    _check_enum("alarm_on", job.alarm_on, [a.value for a in AlarmOn])
    _check_enum("retry_backoff", job.retry_backoff, [b.value for b in RetryBackoff])
    if not 0 <= job.executor_fail_retry_interval_s <= MAX_RETRY_INTERVAL_S:
        raise FieldError("executor_fail_retry_interval_s", f"must be between 0 and {MAX_RETRY_INTERVAL_S}")
    if job.failure_tolerance is not None:
        FailureTolerance.parse(job.failure_tolerance)  # a JoinError names failure_tolerance
    if not 0 <= job.shard_count <= MAX_SHARDS:
        raise FieldError("shard_count", f"must be between 0 and {MAX_SHARDS}")
    check_hooks(job.broadcast_pre, job.broadcast_post, shard_count=job.shard_count,
                broadcast=job.executor_route_strategy == RouteStrategy.SHARDING_BROADCAST.value)
    if not 0 <= job.retry_backoff_max_s <= MAX_RETRY_INTERVAL_S:
        raise FieldError("retry_backoff_max_s", f"must be between 0 and {MAX_RETRY_INTERVAL_S}")
    if job.deadline_minutes is not None and not 1 <= job.deadline_minutes <= MAX_DEADLINE_MINUTES:
        raise FieldError("deadline_minutes", f"must be between 1 and {MAX_DEADLINE_MINUTES} (or null)")


def missing_group(field: str, group_id: int) -> MissingReference:
    """What a request naming group ``group_id`` in ``field`` answers when it does not exist
    (or the caller may not see it)."""
    return MissingReference(field, f"executor group {group_id} does not exist")


async def check_job_references(
    store: Store, job: JobInfo, usable: Callable[[JobInfo], bool] | None = None
) -> None:
    """The group exists; child jobs exist (a child ``usable`` refuses is reported exactly as
    a missing one); the child links would form no cycle."""
    if await store.groups.get(job.job_group) is None:
        raise missing_group("job_group", job.job_group)
    children = parse_child_ids("child_jobid", job.child_jobid)
    if not children:
        return
    found = await store.jobs.get_many(children)
    missing = [c for c in children if c not in found or (usable is not None and not usable(found[c]))]
    if missing:
        raise MissingReference("child_jobid", f"job {missing[0]} does not exist")
    if job.id:
        await check_no_cycle(store, job.id, children)


async def check_no_cycle(store: Store, job_id: int, children: list[int]) -> None:
    """ConflictingValue when ``children`` of job ``job_id`` would lead back to it, through any
    jobs (of any group: the caller sees only that a cycle exists)."""
    # Walk down from the new children; reaching the job itself means a cycle.
    seen: set[int] = set()
    frontier = list(children)
    while frontier:
        if job_id in frontier:
            raise ConflictingValue("child_jobid", f"child jobs would form a cycle through job {job_id}")
        seen.update(frontier)
        if len(seen) > MAX_CHILD_DEPTH * 10:
            raise ConflictingValue("child_jobid", "the chain of child jobs is too large to check")
        jobs = await store.jobs.get_many(frontier)
        frontier = [c for j in jobs.values() for c in j.child_job_ids if c not in seen]


@dataclass(frozen=True, slots=True)
class GroupFields:
    app_name: str
    title: str
    address_type: int
    addresses: list[str]


def check_address(field: str, address: str, policy: AddressPolicy | None = None) -> str:
    """An executor address the admin may call (see :mod:`jobring.core.addresses`); returns it
    trimmed, with an IP host in canonical form."""
    text = address.strip()
    check_text(field, text, 255, required=True)
    try:
        return check_executor_address(text, policy)
    except AddressRefused as exc:
        raise FieldError(field, str(exc)) from None


def check_group(fields: GroupFields, policy: AddressPolicy | None = None) -> str | None:
    """Validate a group; returns the stored address_list (comma list) for manual groups."""
    if not APP_NAME_PATTERN.fullmatch(fields.app_name):
        raise FieldError("app_name", "must be 1-64 letters, digits or _ . : -, starting alphanumeric")
    check_text("title", fields.title, 64, required=True, one_line=True)
    if fields.address_type not in (0, 1):
        raise FieldError("address_type", "must be 0 (automatic) or 1 (manual)")
    if fields.address_type == 0:
        return None
    if not fields.addresses:
        raise FieldError("addresses", "a manual group needs at least one address")
    cleaned = [check_address(f"addresses.{i}", a, policy) for i, a in enumerate(fields.addresses)]
    joined = ",".join(dict.fromkeys(cleaned))
    if len(joined) > 65_000:
        raise FieldError("addresses", "too many addresses")
    return joined


def check_username(username: str) -> None:
    if not USERNAME_PATTERN.fullmatch(username):
        raise FieldError("username", "must be 1-50 letters, digits or _ . @ -, starting alphanumeric")


def check_permission_groups(field: str, group_ids: list[int]) -> str | None:
    """Permitted groups as the stored comma list (fits the 255-character column)."""
    if any(g <= 0 for g in group_ids):
        raise FieldError(field, "group ids must be positive")
    text = ",".join(str(g) for g in dict.fromkeys(group_ids))
    if len(text) > 255:
        raise FieldError(field, "too many groups (the list must fit in 255 characters)")
    return text or None
