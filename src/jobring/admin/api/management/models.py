"""Request and response bodies of the management API (pydantic), and record conversions.

Instants are UTC: epoch milliseconds for scheduling fields (``trigger_next_time`` ...),
ISO 8601 with offset for the reference's DATETIME columns.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Annotated, Any, Generic, Literal, TypeVar

import orjson
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, StrictBool

from jobring.admin.api.management.flowmodels import FlowIn, FlowOut, flow_out
from jobring.admin.security.passwords import MAX_PASSWORD_LENGTH, MIN_PASSWORD_LENGTH
from jobring.admin.security.roles import Role
from jobring.admin.services.validation import APP_NAME_PATTERN, USERNAME_PATTERN, FieldError, text_problem
from jobring.admin.store.records import (
    ApiToken,
    ClearRule,
    GlueVersion,
    JobGroup,
    JobInfo,
    LogEntry,
    RegistryEntry,
    RevokedAccess,
    User,
)
from jobring.core.addresses import is_broker_address, is_pull_address
from jobring.core.distributed import MAX_SHARDS
from jobring.core.enums import BlockStrategy, GlueType, MisfireStrategy, RouteStrategy, ScheduleType
from jobring.core.masking import masked
from jobring.core.runstate import RunState, duration_ms, run_state
from jobring.core.text import ONE_LINE_EXCLUDED, one_line_problem

MAX_INT32 = 2_147_483_647
MAX_INT64 = 9_223_372_036_854_775_807
MAX_EPOCH_MS = 253_402_300_799_999  # 9999-12-31T23:59:59.999Z

T = TypeVar("T")


def _storable_text(value: str) -> str:
    problem = text_problem(value)
    if problem:
        raise ValueError(problem)
    return value


def _one_line_text(value: str) -> str:
    problem = one_line_problem(value) or text_problem(value)
    if problem:
        raise ValueError(problem)
    return value


# What _storable_text enforces, told to schema readers (clients, fuzzers): no control
# characters other than tab and line breaks.
STORABLE_TEXT_PATTERN = "^[^\\u0000-\\u0008\\u000b\\u000c\\u000e-\\u001f]*$"
# What _one_line_text enforces (names, titles, addresses): no line break or control character.
ONE_LINE_PATTERN = f"^[^{ONE_LINE_EXCLUDED}]*$"
# HANDLER_PATTERN (no padding) on one line. U+0085 is named: Python's \s (the server's)
# includes it, a JavaScript-style \s (a schema reader's) does not.
HANDLER_NAME_PATTERN = f"^[^\\s{ONE_LINE_EXCLUDED}](?:[^{ONE_LINE_EXCLUDED}]*[^\\s{ONE_LINE_EXCLUDED}])?$"
# A required text: at least one character that is not white space.
NON_BLANK_TEXT = (
    "^[^\\u0000-\\u0008\\u000b\\u000c\\u000e-\\u001f]*[^\\s\\u0000-\\u001f\\u0085]"
    "[^\\u0000-\\u0008\\u000b\\u000c\\u000e-\\u001f]*$"
)
NON_BLANK_LINE = f"^[^{ONE_LINE_EXCLUDED}]*[^\\s{ONE_LINE_EXCLUDED}][^{ONE_LINE_EXCLUDED}]*$"
Text = Annotated[
    str, AfterValidator(_storable_text), Field(json_schema_extra={"pattern": STORABLE_TEXT_PATTERN})
]
Line = Annotated[str, AfterValidator(_one_line_text), Field(json_schema_extra={"pattern": ONE_LINE_PATTERN})]
Id32 = Annotated[int, Field(ge=1, le=MAX_INT32)]
Id64 = Annotated[int, Field(ge=1, le=MAX_INT64)]
EpochMs = Annotated[int, Field(ge=0, le=MAX_EPOCH_MS)]


def aware(value: datetime | None) -> datetime | None:
    """The store's naive-UTC DATETIME values, marked as UTC for output."""
    return None if value is None else value.replace(tzinfo=UTC)


def record_fields(model: type[BaseModel], record: object, **given: object) -> dict[str, Any]:
    """The model's fields read by name off a store record (DATETIME values marked UTC),
    except those ``given`` explicitly."""
    values: dict[str, Any] = dict(given)
    for name in model.model_fields:
        if name not in values:
            value = getattr(record, name)
            values[name] = aware(value) if isinstance(value, datetime) else value
    return values


def not_nullable(*names: str) -> Callable[[dict[str, Any]], None]:
    """A ``json_schema_extra`` telling that these optional fields may be left out but not be
    null (the server refuses null for them; None in Python only means "not sent")."""

    def edit(schema: dict[str, Any]) -> None:
        for name in names:
            prop = schema["properties"][name]
            branches = [b for b in prop.pop("anyOf", []) if b.get("type") != "null"]
            if len(branches) == 1:
                prop.update(branches[0])
            elif branches:
                prop["anyOf"] = branches
            prop.pop("default", None)

    return edit


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class PageOut(BaseModel, Generic[T]):
    items: list[T]
    total: int
    offset: int
    limit: int
    total_exact: bool = Field(
        default=True, description="false: counting stopped early and `total` is an estimate (for runs: "
        "extrapolated from the time the newest runs span, two significant digits)"
    )
    next_cursor: str | None = Field(
        default=None, description="where a full page ended: pass it as `cursor` for the next page "
        "(listings that support it; null when the page was not full)"
    )


# -- jobs ------------------------------------------------------------------------------------


# A job's field limits, shared by creation, partial update and the calls that take one field.
JobDesc = Annotated[Line, Field(min_length=1, max_length=255, json_schema_extra={"pattern": NON_BLANK_LINE})]
Author = Annotated[Line, Field(max_length=64)]
# A comma list whose non-blank items each hold an "@" (what check_job accepts), on one line.
_EMAIL_CHARS = f"[^,{ONE_LINE_EXCLUDED}]*"
_EMAIL_ITEM = f"(?: *|{_EMAIL_CHARS}@{_EMAIL_CHARS})"
AlarmEmail = Annotated[
    Line, Field(max_length=255, json_schema_extra={"pattern": f"^{_EMAIL_ITEM}(?:,{_EMAIL_ITEM})*$"})
]
# Executor addresses check_address accepts: http(s) URLs with a host name or IPv4 address (a
# valid port), without user info, query, fragment or spaces (IPv6 literals are accepted too
# but not described here).
EXECUTOR_URL_PATTERN = (
    "^https?://[A-Za-z0-9.-]+"
    "(?::(?:[1-9][0-9]{0,3}|[1-5][0-9]{4}|6[0-4][0-9]{3}|65[0-4][0-9]{2}|655[0-2][0-9]|6553[0-5]))?"
    # The path: printable ASCII without a backslash, '?' or '#'.
    '(?:/[!"$->@-\\[\\]-~]*)?$'
)


def manual_addresses_rule(schema: dict[str, Any]) -> None:
    """A manual group (address_type 1) lists at least one executor URL."""
    schema["allOf"] = [{
        "if": {"properties": {"address_type": {"const": 1}}, "required": ["address_type"]},
        "then": {"required": ["addresses"], "properties": {"addresses": {
            "type": "array", "minItems": 1, "maxItems": 200,
            "items": {"type": "string", "maxLength": 255, "pattern": EXECUTOR_URL_PATTERN}}}},
    }]
ScheduleConf = Annotated[Line, Field(max_length=128)]
# Formats a client (or a fuzzer) must know: "iana-time-zone" is a name of the IANA time zone
# database (Europe/Paris, UTC); "quartz-cron" is a Quartz cron expression with seconds
# (6 or 7 fields, e.g. "0 */5 * * * ?") that fires at least once more.
ZoneName = Annotated[Line, Field(max_length=64, json_schema_extra={"format": "iana-time-zone"})]
# FIX_RATE intervals: a whole number of seconds, 1 to 31,536,000 (a year).
FIX_RATE_PATTERN = (
    "^(?:[1-9][0-9]{0,6}|[12][0-9]{7}|30[0-9]{6}|31[0-4][0-9]{5}|315[0-2][0-9]{4}|3153[0-5][0-9]{3}|31536000)$"
)


def schedule_rules(schema: dict[str, Any]) -> None:
    """What the server checks across the schedule fields: CRON needs a cron expression,
    FIX_RATE a number of seconds, in ``schedule_conf``."""
    rules = []
    for kind, conf in (("CRON", {"format": "quartz-cron"}), ("FIX_RATE", {"pattern": FIX_RATE_PATTERN})):
        rules.append({
            "if": {"properties": {"schedule_type": {"const": kind}}, "required": ["schedule_type"]},
            "then": {"required": ["schedule_conf"],
                     "properties": {"schedule_conf": {"type": "string", "maxLength": 128, **conf}}},
        })
    schema["allOf"] = rules


def partial_handler_rule(schema: dict[str, Any]) -> None:
    """A partial update of a job that is (or becomes) BEAN keeps a handler name: one sent
    is not blank, and switching to BEAN sends one (the stored job may have none)."""
    schema.setdefault("allOf", []).extend([
        {"if": {"properties": {"glue_type": {"not": {"const": "BEAN"}}}, "required": ["glue_type"]},
         "else": {"properties": {"executor_handler": {"type": "string", "maxLength": 255,
                                                      "pattern": HANDLER_NAME_PATTERN}}}},
        {"if": {"properties": {"glue_type": {"const": "BEAN"}}, "required": ["glue_type"]},
         "then": {"required": ["executor_handler"]}},
    ])


def handler_rule(schema: dict[str, Any]) -> None:
    """BEAN jobs (the default glue_type) name their handler: no blank or padded name."""
    schema.setdefault("allOf", []).append({
        "if": {"properties": {"glue_type": {"not": {"const": "BEAN"}}}, "required": ["glue_type"]},
        "else": {"required": ["executor_handler"],
                 "properties": {"executor_handler": {"type": "string", "maxLength": 255,
                                                     "pattern": HANDLER_NAME_PATTERN}}},
    })


def _with(*edits: Callable[[dict[str, Any]], None], examples: list[dict[str, Any]] | None = None
          ) -> Callable[[dict[str, Any]], None]:
    def edit(schema: dict[str, Any]) -> None:
        for one in edits:
            one(schema)
        if examples:
            schema["examples"] = examples
    return edit
HandlerName = Annotated[
    Line, Field(max_length=255, json_schema_extra={"pattern": f"^(?:{HANDLER_NAME_PATTERN[1:-1]})?$"})
]
ExecutorParam = Annotated[Text, Field(max_length=512)]
TimeoutSeconds = Annotated[int, Field(ge=0, le=7 * 24 * 3600)]
RetryCount = Annotated[int, Field(ge=0, le=100)]
GlueRemark = Annotated[Text, Field(max_length=128)]
ChildJobIds = Annotated[list[Id32], Field(max_length=20)]
GlueSource = Annotated[Text, Field(max_length=1_000_000)]
AlarmTargets = Annotated[list[dict[str, Any]], Field(max_length=20, description=(
    'alarm targets: {"kind": "email", "to": [...]}, or {"kind": "webhook"|"slack"|"wecom", "url": ...}, '
    'or {"kind": "dingtalk"|"feishu", "url": ..., "secret": ...}; a URL must not reach an internal address '
    '(loopback, private, link-local, metadata) unless the admin allows it (JOBRING_ALARM_TARGET_ALLOW)'))]
AlarmOnRule = Annotated[str, Field(pattern="^(failure_final|every_failure)$",
                                   description="failure_final: only when no retry follows; every_failure")]
RetryIntervalSeconds = Annotated[int, Field(ge=0, le=24 * 3600)]
RetryBackoffKind = Annotated[str, Field(pattern="^(fixed|exponential)$")]
DeadlineMinutes = Annotated[int, Field(ge=1, le=7 * 24 * 60)]


ManagedByName = Annotated[str, Field(pattern="^(console|code)$")]


# (Plain strings: the one-line pattern of Line would replace these in the schema.)
CalendarName = Annotated[
    str, Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9][A-Za-z0-9 _.:-]{0,63}$")]
# A timing rule's instant: epoch ms or ISO 8601 with an offset, within 1970-2099.
InstantOrMs = Annotated[int, Field(ge=0, le=4_102_444_799_999)] | Annotated[
    str, Field(max_length=40, json_schema_extra={"format": "offset-date-time"})]


OverlapName = Literal["skip", "buffer_one", "buffer_all", "cancel_other", "terminate_other", "allow_all"]


class CatchUpIn(Strict):
    """A catch-up window (docs/time.md, Catch-up)."""

    window_seconds: Annotated[int, Field(ge=10, le=366 * 86_400)]
    mode: Literal["each", "once"] = "each"
    limit: Annotated[int, Field(ge=1, le=1_000)] = 100


class DstIn(Strict):
    """Daylight-saving rules: a wall time in a spring-forward gap, one shown twice at fall-back."""

    gap: Literal["skip", "next_valid"] = "skip"
    repeat: Literal["first", "second", "both"] = "second"


class JobTiming(Strict):
    """A job's timing rules; every field optional (see docs/time.md)."""

    model_config = ConfigDict(json_schema_extra={"examples": [{
        "calendars": ["cn-2026"], "calendar_action": "skip", "start_at": "2026-01-01T00:00:00Z",
        "max_runs": 100, "jitter_seconds": 30,
    }]})

    start_at: InstantOrMs | None = Field(None, description="ISO 8601 with an offset, or epoch ms")
    end_at: InstantOrMs | None = Field(None, description="ISO 8601 with an offset, or epoch ms")
    max_runs: Annotated[int, Field(ge=1, le=1_000_000_000)] | None = None
    jitter_seconds: Annotated[int, Field(ge=0, le=86_400)] | None = None
    calendars: Annotated[list[CalendarName], Field(max_length=16)] | None = None
    calendar_action: Literal["skip", "move"] | None = None
    params_template: StrictBool | None = Field(
        None, description="executor_param is a template over the run's logical time "
        "({{ logical_date | fmt(\"%Y%m%d\") }}, data_interval_start, data_interval_end)")
    overlap: OverlapName | None = Field(
        None, description="what a fire does while runs of the job are in progress (default allow_all)")
    catch_up: CatchUpIn | None = Field(
        None, description="after downtime or a pause: missed instants within the window fire")
    dst: DstIn | None = Field(None, description="daylight-saving rules (CRON; default: Quartz's)")


class JobTimingOut(BaseModel):
    start_at: str | None = None
    end_at: str | None = None
    max_runs: int | None = None
    jitter_seconds: int | None = None
    calendars: list[str] = Field(default_factory=list)
    calendar_action: str = "skip"
    params_template: bool = False
    overlap: str = "allow_all"
    catch_up: CatchUpIn | None = None
    dst: DstIn = Field(default_factory=DstIn)


class PauseNoteOut(BaseModel):
    """Who paused (stopped) the job, why and when."""

    by: str
    reason: str
    at: int = Field(description="epoch ms")


ShardCount = Annotated[int, Field(ge=0, le=MAX_SHARDS)]
FailureToleranceText = Annotated[str, Field(min_length=1, max_length=32, pattern=r"^[0-9.%, ]+$")]
HookName = Annotated[str, Field(min_length=1, max_length=64, pattern=r"^[A-Za-z][A-Za-z0-9_.-]{0,63}$")]


class JobFields(Strict):
    """The writable fields of a job (the reference's names)."""

    job_group: Id32
    job_desc: JobDesc
    author: Author | None = None
    alarm_email: AlarmEmail | None = None
    schedule_type: ScheduleType = ScheduleType.NONE
    schedule_conf: ScheduleConf | None = None
    schedule_timezone: ZoneName | None = Field(
        None, description="IANA zone for CRON; null = the admin's zone"
    )
    misfire_strategy: MisfireStrategy = MisfireStrategy.DO_NOTHING
    executor_route_strategy: RouteStrategy = RouteStrategy.FIRST
    executor_handler: HandlerName | None = None
    executor_param: ExecutorParam | None = None
    executor_block_strategy: BlockStrategy = BlockStrategy.SERIAL_EXECUTION
    executor_timeout: TimeoutSeconds = 0
    executor_fail_retry_count: RetryCount = 0
    glue_type: GlueType = GlueType.BEAN
    glue_source: GlueSource | None = None
    glue_remark: GlueRemark | None = None
    child_job_ids: ChildJobIds = Field(default_factory=list)
    alarm_targets: AlarmTargets = Field(default_factory=list)
    alarm_on: AlarmOnRule = "failure_final"
    alarm_recovery: StrictBool = False
    deadline_minutes: DeadlineMinutes | None = Field(
        None, description="alarm when a run is not finished this long after its planned time")
    executor_fail_retry_interval_s: RetryIntervalSeconds = 0
    retry_backoff: RetryBackoffKind = "fixed"
    retry_backoff_max_s: RetryIntervalSeconds = 3600
    timing: JobTiming | None = Field(None, description="calendars, validity window, run limit, jitter")
    flow: FlowIn | None = Field(None, description="concurrency and rate limits, concurrency key, priority")
    shard_count: ShardCount = Field(0, description="run as this many shards over the group's jobring "
                                                   "executors (sub-tasks with index/total; 0: not sharded)")
    failure_tolerance: FailureToleranceText | None = Field(
        None, description="sub-tasks or shards that may fail with the run still a success: a count (\"3\"), "
                          "a percentage (\"1%\"), or both (\"3,1%\": the smaller); null: none")
    broadcast_pre: HookName | None = Field(
        None, description="route SHARDING_BROADCAST only: a handler run once, on one executor, before the "
                          "job's handler runs on every executor (its failure fails the run; null: none)")
    broadcast_post: HookName | None = Field(
        None, description="route SHARDING_BROADCAST only: a handler run once after every executor ran, "
                          "whatever their outcome, with their results (ctx.results()); null: none")


class JobCreate(JobFields):
    model_config = ConfigDict(json_schema_extra=_with(schedule_rules, handler_rule, examples=[{
        "job_group": 1, "job_desc": "nightly report", "author": "ops", "schedule_type": "CRON",
        "schedule_conf": "0 0 2 * * ?", "schedule_timezone": "Europe/Berlin",
        "executor_handler": "report", "executor_param": "full", "executor_route_strategy": "ROUND",
        "executor_timeout": 600, "executor_fail_retry_count": 1,
    }]))


# Fields a job update may leave out but not set to null (told to schema readers too).
JOB_UPDATE_NOT_NULL = (
    "job_group", "job_desc", "schedule_type", "misfire_strategy", "executor_route_strategy",
    "executor_block_strategy", "executor_timeout", "executor_fail_retry_count", "glue_type",
    "alarm_on", "alarm_recovery", "executor_fail_retry_interval_s", "retry_backoff",
    "retry_backoff_max_s", "managed_by", "shard_count",
)


class JobUpdate(Strict):
    """A partial update: only the fields sent change."""

    # schedule_conf is checked with the schedule_type sent along, so it needs one.
    model_config = ConfigDict(json_schema_extra=_with(not_nullable(*JOB_UPDATE_NOT_NULL),
        schedule_rules, partial_handler_rule,
        lambda schema: schema.update(dependentRequired={"schedule_conf": ["schedule_type"]})))

    job_group: Id32 | None = None
    job_desc: JobDesc | None = None
    author: Author | None = None
    alarm_email: AlarmEmail | None = None
    schedule_type: ScheduleType | None = None
    schedule_conf: ScheduleConf | None = None
    schedule_timezone: ZoneName | None = None
    misfire_strategy: MisfireStrategy | None = None
    executor_route_strategy: RouteStrategy | None = None
    executor_handler: HandlerName | None = None
    executor_param: ExecutorParam | None = None
    executor_block_strategy: BlockStrategy | None = None
    executor_timeout: TimeoutSeconds | None = None
    executor_fail_retry_count: RetryCount | None = None
    glue_type: GlueType | None = None
    glue_remark: GlueRemark | None = None
    child_job_ids: ChildJobIds | None = None
    alarm_targets: AlarmTargets | None = None
    alarm_on: AlarmOnRule | None = None
    alarm_recovery: StrictBool | None = None
    deadline_minutes: DeadlineMinutes | None = None
    executor_fail_retry_interval_s: RetryIntervalSeconds | None = None
    retry_backoff: RetryBackoffKind | None = None
    retry_backoff_max_s: RetryIntervalSeconds | None = None
    timing: JobTiming | None = Field(None, description="null: no timing rules")
    flow: FlowIn | None = Field(None, description="null: no flow control")
    shard_count: ShardCount | None = None
    failure_tolerance: FailureToleranceText | None = Field(None, description="null: no failure allowed")
    broadcast_pre: HookName | None = Field(None, description="null: no pre hook")
    broadcast_post: HookName | None = Field(None, description="null: no post hook")
    managed_by: ManagedByName | None = Field(
        None, description="admin only: \"code\" lets the job's executor group manage it through the jobs "
                          "its code declares; \"console\" takes it back (the code no longer touches it)")


def targets_out(job: JobInfo, *, reveal_urls: bool = False) -> list[dict[str, Any]]:
    """The job's alarm targets for output: secrets masked, and the credential parts of URLs
    too unless ``reveal_urls`` (for those who may edit the job)."""
    try:
        targets = orjson.loads(job.alarm_targets) if job.alarm_targets else []
    except orjson.JSONDecodeError:
        return []
    return [t for t in masked(targets, urls=not reveal_urls) if isinstance(t, dict)] if isinstance(
        targets, list) else []


M = TypeVar("M", bound=BaseModel)


def _json_model(model: type[M], text: str | None) -> M | None:
    """A stored JSON column as ``model`` (None: empty, or no longer readable)."""
    if not text:
        return None
    try:
        return model.model_validate_json(text)
    except ValueError:
        return None


class JobOut(BaseModel):
    id: int
    job_group: int
    job_desc: str
    author: str | None
    alarm_email: str | None
    schedule_type: str
    schedule_conf: str | None
    schedule_timezone: str | None
    misfire_strategy: str
    executor_route_strategy: str | None
    executor_handler: str | None
    executor_param: str | None
    executor_block_strategy: str | None
    executor_timeout: int
    executor_fail_retry_count: int
    glue_type: str
    glue_remark: str | None
    glue_updatetime: datetime | None
    child_job_ids: list[int]
    trigger_status: int = Field(description="0 stopped, 1 running")
    trigger_last_time: int = Field(description="epoch ms")
    trigger_next_time: int = Field(description="epoch ms")
    add_time: datetime | None
    update_time: datetime | None
    alarm_targets: list[dict[str, Any]] = Field(description=(
        "signing secrets are shown masked (send the mask back to keep them); the path and query "
        "values of URLs (a robot's credential) are masked too for readers who may not edit the job"))
    alarm_on: str
    alarm_recovery: bool
    deadline_minutes: int | None
    executor_fail_retry_interval_s: int
    retry_backoff: str
    retry_backoff_max_s: int
    declared_by_executor: bool = Field(
        description="the job is declared in its executor's code (@executor.job(..., cron=...))"
    )
    managed_by: str = Field(
        description="\"code\": its executor's declarations may change it (it created the job, or an admin "
                    "handed it over); \"console\": only users may")
    declared_retired_at: int | None = Field(
        None, description="epoch ms the code stopped declaring it: stopped then, deleted after the grace "
                          "period (JOBRING_DECLARED_JOBS_RETIRED_GRACE_DAYS) unless declared again")
    timing: JobTimingOut | None = Field(None, description="its timing rules (null: none)")
    pause_note: PauseNoteOut | None = Field(None, description="who stopped it last, why and when")
    flow: FlowOut | None = Field(None, description="its flow control (null: none)")
    shard_count: int = Field(description="shards per run as sub-tasks (0: not sharded)")
    failure_tolerance: str | None = Field(description="sub-tasks that may fail (null: none)")
    broadcast_pre: str | None = Field(None, description="a broadcast's pre hook handler (null: none)")
    broadcast_post: str | None = Field(None, description="a broadcast's post hook handler (null: none)")

    @classmethod
    def of(cls, job: JobInfo, *, reveal_urls: bool = False) -> JobOut:
        """``job`` as answered; ``reveal_urls`` for a reader who may edit it."""
        return cls(**record_fields(cls, job, alarm_targets=targets_out(job, reveal_urls=reveal_urls),
                                   declared_by_executor=bool(job.declared_by_executor),
                                   timing=_json_model(JobTimingOut, job.timing),
                                   pause_note=_json_model(PauseNoteOut, job.pause_note),
                                   flow=flow_out(job.flow)))


class JobUpdateOut(JobOut):
    warnings: list[str] = Field(
        default_factory=list,
        description="stored values kept although a new job could not have them (e.g. adopted from XXL-JOB)",
    )


class TriggerIn(Strict):
    model_config = ConfigDict(json_schema_extra={"examples": [{"executor_param": "date=2026-01-31"}]})

    executor_param: ExecutorParam | None = Field(
        None, description="replaces the job's params for this run"
    )
    addresses: Annotated[list[Annotated[Line, Field(max_length=255)]], Field(max_length=100)] | None = Field(
        None, description="run on these addresses only; each must be one of the group's addresses"
    )


MAX_DELAY_MS = 366 * 86_400_000  # how far ahead a delayed run may be asked for


class TriggerAtIn(Strict):
    at: Annotated[int, Field(ge=0, le=MAX_EPOCH_MS)] | Annotated[Text, Field(max_length=64)] | None = Field(
        None, description="when to run: epoch ms, or ISO 8601 (without an offset: UTC)"
    )
    delay_ms: Annotated[int, Field(ge=1, le=MAX_DELAY_MS)] | None = Field(
        None, description="or: run this many ms from now"
    )
    executor_param: ExecutorParam | None = Field(None, description="replaces the job's params for this run")
    addresses: Annotated[list[Annotated[Line, Field(max_length=255)]], Field(max_length=100)] | None = Field(
        None, description="run on these addresses only; each must be one of the group's addresses"
    )


class DelayedFireOut(BaseModel):
    id: int
    job_id: int
    job_group: int
    fire_at: int = Field(description="epoch ms")
    fire_at_iso: str
    executor_param: str | None
    addresses: list[str] | None
    created_by: str | None
    created_at: int = Field(description="epoch ms")
    state: str = Field(default="scheduled", description="always scheduled: a fired or cancelled run is gone")


class TriggerOut(BaseModel):
    model_config = ConfigDict(json_schema_extra={"examples": [{
        "run_ids": [3051], "log_ids": [3051], "trigger_code": 200,
        "trigger_msg": "Trigger type: Manual trigger\n>>>>>>>>>>> Trigger Job <<<<<<<<<<<\ncode: 200\n",
    }]})

    run_ids: list[int] = Field(description="the runs this trigger started (one per executor of a broadcast)")
    log_ids: list[int] = Field(description="deprecated: the same as run_ids (XXL-JOB's name for a run)",
                               json_schema_extra={"deprecated": True})
    trigger_code: int
    trigger_msg: str


class SchedulePreviewIn(Strict):
    model_config = ConfigDict(json_schema_extra=schedule_rules)

    schedule_type: ScheduleType
    schedule_conf: ScheduleConf | None = None
    timezone: ZoneName | None = Field(
        None, description="null = the admin's zone"
    )
    count: Annotated[int, Field(ge=1, le=100)] = 5
    after: EpochMs | None = Field(None, description="epoch ms; default now")


class SchedulePreviewOut(BaseModel):
    timezone: str
    times: list[int] = Field(description="epoch ms")
    times_iso: list[str]


# -- GLUE ------------------------------------------------------------------------------------


class GlueOut(BaseModel):
    job_id: int
    glue_type: str
    glue_source: str | None
    glue_remark: str | None
    glue_updatetime: datetime | None


class GlueSave(Strict):
    glue_source: GlueSource
    glue_remark: Annotated[
        Text, Field(min_length=1, max_length=128, json_schema_extra={"pattern": NON_BLANK_TEXT})
    ]


class GlueVersionOut(BaseModel):
    id: int
    job_id: int
    glue_type: str | None
    glue_source: str | None
    glue_remark: str
    add_time: datetime | None

    @classmethod
    def of(cls, v: GlueVersion) -> GlueVersionOut:
        return cls(**record_fields(cls, v))


# -- runs ------------------------------------------------------------------------------------


class RunOut(BaseModel):
    model_config = ConfigDict(json_schema_extra={"examples": [{
        "id": 3051, "job_group": 1, "job_id": 12, "executor_address": "http://10.0.0.7:9999/",
        "executor_handler": "report", "executor_param": "full", "executor_sharding_param": None,
        "executor_fail_retry_count": 1, "trigger_time": "2026-01-31T02:00:00Z", "trigger_code": 200,
        "trigger_msg": "Trigger type: Cron trigger", "trigger_type": "CRON",
        "handle_time": "2026-01-31T02:03:12Z", "handle_code": 200, "handle_msg": None, "alarm_status": 0,
        "planned_time": 1769824800000, "dispatch_time": 1769824800004,
    }]})

    id: int
    job_group: int
    job_id: int
    executor_address: str | None
    executor_handler: str | None
    executor_param: str | None
    executor_sharding_param: str | None
    executor_fail_retry_count: int
    trigger_time: datetime | None
    trigger_code: int
    trigger_msg: str | None
    trigger_type: str | None
    handle_time: datetime | None
    handle_code: int = Field(description="0 running/unknown, 200 success, 500 fail, 502 timeout")
    handle_msg: str | None
    alarm_status: int
    planned_time: int | None
    dispatch_time: int | None
    state: RunState = Field(description="the run's one state (see the README, \"Run states\")")
    duration_ms: int | None = Field(
        description="result time minus dispatch time, once finished; null while not finished or "
        "when the run never started"
    )
    attempt: int = Field(description="1 = first run, 2 = first retry, ...")
    retry_of: int | None = Field(description="a retry: the run it re-runs (its previous attempt); "
                                 "null on a first run")

    @classmethod
    def of(cls, e: LogEntry, now_ms: int) -> RunOut:
        state = run_state(
            trigger_code=e.trigger_code,
            handle_code=e.handle_code,
            now_ms=now_ms,
            trigger_msg=e.trigger_msg,
            handle_msg=e.handle_msg,
            planned_time=e.planned_time,
        )
        started = e.dispatch_time if e.dispatch_time is not None else _ms(e.trigger_time)
        finished = (e.handle_time_ms or _ms(e.handle_time)) if e.handle_code != 0 else None
        return cls(**record_fields(cls, e, state=state, duration_ms=duration_ms(
            started_ms=started, finished_ms=finished)))


def _ms(value: datetime | None) -> int | None:
    return None if value is None else int(value.replace(tzinfo=UTC).timestamp() * 1000)


class RunLogOut(BaseModel):
    from_line_num: int
    to_line_num: int
    log_content: str
    is_end: bool


class KillOut(BaseModel):
    killed: bool
    msg: str


class ClearIn(Strict):
    rule: ClearRule = Field(description="by age (older_than_...), keep the newest N (keep_last_...), or all")
    job_group: Id32 | None = None
    job_id: Id32 | None = None


class ClearOut(BaseModel):
    deleted: int


# -- groups ----------------------------------------------------------------------------------


# What check_group enforces (a full match), told to schema readers.
APP_NAME_SCHEMA_PATTERN = f"^{APP_NAME_PATTERN.pattern}$"


class GroupIn(Strict):
    model_config = ConfigDict(json_schema_extra=_with(manual_addresses_rule, examples=[
        {"app_name": "billing", "title": "Billing and invoicing"},
        {"app_name": "reports", "title": "Reports", "address_type": 1, "addresses": ["http://10.0.0.7:9999/"]},
    ]))

    app_name: Annotated[
        Line, Field(min_length=1, max_length=64, json_schema_extra={"pattern": APP_NAME_SCHEMA_PATTERN})
    ]
    title: Annotated[Line, Field(min_length=1, max_length=64, json_schema_extra={"pattern": NON_BLANK_LINE})]
    address_type: Annotated[int, Field(ge=0, le=1, description="0 automatic (registry), 1 manual")] = 0
    addresses: Annotated[list[Annotated[Line, Field(max_length=255)]], Field(max_length=200)] = Field(
        default_factory=list, description="manual groups: http(s) URLs of the executors"
    )


class OnlineAddress(BaseModel):
    address: str
    last_heartbeat: datetime | None
    handlers: list[str] | None = Field(
        default=None,
        description="the handlers its executor declared (jobring executors): only jobs of these handlers "
                    "(and GLUE jobs) are routed to it; null: it declared none (XXL-JOB and older "
                    "executors), every job of the group may be routed to it")
    dispatch: Literal["push", "pull", "broker"] = Field(
        default="push",
        description="push: the admin calls the executor's address; pull: the executor (a pull:// address) "
                    "opens no port and long-polls the admin for its runs; broker: the executor (a "
                    "broker:// address) takes its runs from RabbitMQ queues and polls the admin for "
                    "the other calls (docs/dispatch.md)")


def _dispatch_of(address: str) -> Literal["push", "pull", "broker"]:
    if is_pull_address(address):
        return "pull"
    return "broker" if is_broker_address(address) else "push"


class GroupOut(BaseModel):
    id: int
    app_name: str
    title: str
    address_type: int
    addresses: list[str]
    online: list[OnlineAddress]
    disabled_addresses: list[str] = Field(description="taken out of routing by hand")
    update_time: datetime | None
    has_access_token: bool = Field(
        description="the group has its own executor token (admins read it at /groups/{id}/access-token)"
    )
    flow: FlowOut | None = Field(None, description="flow control of every job of the group (null: none)")

    @classmethod
    def of(cls, g: JobGroup, entries: list[RegistryEntry]) -> GroupOut:
        online = [
            OnlineAddress(address=e.registry_value, last_heartbeat=aware(e.update_time),
                          handlers=e.declared_handlers,
                          dispatch=_dispatch_of(e.registry_value)) for e in entries
        ]
        return cls(**record_fields(cls, g, online=online, has_access_token=bool(g.access_token),
                                   disabled_addresses=g.disabled, flow=flow_out(g.flow)))


class GroupTokenOut(BaseModel):
    group_id: int
    app_name: str
    access_token: str


class AddressIn(Strict):
    address: Annotated[
        Line, Field(min_length=1, max_length=255, json_schema_extra={"pattern": EXECUTOR_URL_PATTERN})
    ] = Field(description="one of the group's executor addresses")


# -- users, tokens, auth ---------------------------------------------------------------------

RoleName = Annotated[str, Field(pattern="^(admin|operator|viewer)$")]


def _encodable(value: str) -> str:
    if any(0xD800 <= ord(ch) <= 0xDFFF for ch in value):
        raise ValueError("must be valid Unicode (no lone surrogates)")
    return value


Password = Annotated[str, Field(min_length=1, max_length=256), AfterValidator(_encodable)]
# A password being set: the length rules of password_problem, told to schema readers.
NewPassword = Annotated[
    str, Field(min_length=MIN_PASSWORD_LENGTH, max_length=MAX_PASSWORD_LENGTH), AfterValidator(_encodable)
]
# What check_username enforces.
Username = Annotated[
    Line, Field(min_length=1, max_length=50, json_schema_extra={"pattern": f"^{USERNAME_PATTERN.pattern}$"})
]


class UserOut(BaseModel):
    id: int
    username: str
    role: str
    group_ids: list[int]
    glue_permission: bool
    must_change_password: bool
    add_time: datetime | None

    @classmethod
    def of(cls, u: User) -> UserOut:
        try:
            role = Role(u.role).label
        except ValueError:
            role = Role.VIEWER.label
        return cls(**record_fields(cls, u, role=role, group_ids=u.permitted_group_ids))


class UserCreate(Strict):
    username: Username
    password: NewPassword
    role: RoleName = "operator"
    group_ids: Annotated[list[Id32], Field(max_length=50)] = Field(default_factory=list)
    glue_permission: StrictBool = False
    must_change_password: StrictBool = Field(
        True, description="the user must pick a new password at first login")


class UserUpdate(Strict):
    model_config = ConfigDict(
        json_schema_extra=not_nullable("username", "role", "group_ids", "glue_permission")
    )

    username: Username | None = None
    role: RoleName | None = None
    group_ids: Annotated[list[Id32], Field(max_length=50)] | None = None
    glue_permission: StrictBool | None = None
    password: NewPassword | None = Field(None, description="reset the password (the user must change it)")


class PasswordChange(Strict):
    current_password: Password
    new_password: NewPassword


class LoginIn(Strict):
    model_config = ConfigDict(json_schema_extra={"examples": [
        {"username": "admin", "password": "correct horse battery staple"},
    ]})

    username: Annotated[Line, Field(min_length=1, max_length=50)]
    password: Password


class MeOut(BaseModel):
    user: UserOut
    auth: str = Field(description="session or token")
    csrf_token: str | None = Field(None, description="send it as X-CSRF-Token on unsafe methods")


class RevokedOut(BaseModel):
    sessions: int = Field(description="active sessions that were ended")
    tokens: int = Field(description="active API tokens that were revoked")

    @classmethod
    def of(cls, revoked: RevokedAccess) -> RevokedOut:
        return cls(sessions=revoked.sessions, tokens=revoked.tokens)


class UserChangeOut(UserOut):
    revoked: RevokedOut | None = Field(
        None,
        description="a password reset or a change of role, groups or GLUE permission ends every "
                    "session and revokes every API token of the user: how many (null: nothing changed "
                    "that needs it)",
    )


class PasswordChangedOut(MeOut):
    revoked: RevokedOut = Field(
        description="your sessions (this one too) and API tokens (the one used for this call too) "
                    "that were ended; a session caller gets a new session with this answer"
    )


MAX_TOKEN_DAYS = 3650


class TokenCreate(Strict):
    model_config = ConfigDict(json_schema_extra={"examples": [{"name": "laptop"}]})

    name: Annotated[Line, Field(min_length=1, max_length=64)]
    expires_in_days: Annotated[int, Field(ge=1, le=MAX_TOKEN_DAYS)] | None = Field(
        None, description="the token stops working after this many days (default: never; created with "
                          "an API token that expires: required, and not after that token)"
    )
    expires_at: datetime | None = Field(
        None, description="ISO 8601 instant (UTC if no offset) after which the token stops working"
    )

    def expiry(self, now: datetime) -> datetime | None:
        """The expiry as naive UTC (``now`` is naive UTC); FieldError for a bad combination."""
        if self.expires_in_days is not None and self.expires_at is not None:
            raise FieldError("expires_at", "give expires_at or expires_in_days, not both")
        if self.expires_in_days is not None:
            return now + timedelta(days=self.expires_in_days)
        if self.expires_at is None:
            return None
        at = self.expires_at
        if at.tzinfo is not None:
            at = at.astimezone(UTC).replace(tzinfo=None)
        if at <= now:
            raise FieldError("expires_at", "must be in the future")
        if at > now + timedelta(days=MAX_TOKEN_DAYS):
            raise FieldError("expires_at", f"must be within {MAX_TOKEN_DAYS} days")
        return at


class TokenOut(BaseModel):
    id: int
    user_id: int
    name: str
    add_time: datetime | None
    last_used_time: datetime | None
    revoked: bool
    expires_at: datetime | None = Field(None, description="null: never expires")
    parent_token_id: int | None = Field(
        None, description="the API token this one was created with (it is revoked with that one)"
    )

    @classmethod
    def of(cls, t: ApiToken) -> TokenOut:
        return cls(**record_fields(cls, t))


class TokenCreated(TokenOut):
    model_config = ConfigDict(json_schema_extra={"examples": [{
        "id": 3, "user_id": 1, "name": "laptop", "add_time": "2026-01-31T09:15:00Z", "last_used_time": None,
        "revoked": False, "token": "jr_2bW9q...(shown once)",
    }]})

    token: str = Field(description="shown only in this answer; store it now")


# -- dashboard, settings ---------------------------------------------------------------------


class DayCountOut(BaseModel):
    day: str = Field(description="YYYY-MM-DD (UTC)")
    running: int
    success: int
    fail: int


class NodeOut(BaseModel):
    node_id: str
    alive: bool = Field(description="the node announced itself as scheduling")
    held_jobs: int = Field(description="jobs (of the caller's groups) it holds a lease on")
    fires_last_hour: int
    lateness_avg_ms: float | None = Field(description="dispatch minus planned instant, last hour")
    lateness_max_ms: int | None


class DashboardOut(BaseModel):
    job_count: int
    executor_count: int
    runs_today: int
    runs_today_success: int
    runs_today_fail: int
    runs_today_running: int
    runs_today_scheduled: int = Field(description="fires of today recorded ahead, not yet due")
    chart: list[DayCountOut]
    recent_failures: list[RunOut] = Field(description="the newest failed runs")
    nodes: list[NodeOut] = Field(description="scheduling admin nodes")


class ConsoleSettingsOut(BaseModel):
    glue_enabled: bool
    timezone: str = Field(description="the admin's default schedule zone")
    email_alarms: bool = Field(
        description="an SMTP server is configured (JOBRING_SMTP_HOST); without one e-mail alarms are not sent"
    )


class AccessTokenOut(BaseModel):
    enabled: bool = Field(description="whether the global executor token (JOBRING_ACCESS_TOKEN) is on")
    access_token: str | None = Field(
        description="the global executor token, valid for every group; null when not enabled "
        "(executors then use their group's token: GET /groups/{id}/access-token)"
    )


class SettingsOut(BaseModel):
    version: str
    database_backend: str = Field(description="sqlite, postgresql or mysql")
    timezone: str = Field(description="zone of cron schedules without their own")
    base_path: str = Field(description="executor API path prefix")
    glue_enabled: bool
    email_alarms: bool = Field(description="an SMTP server is configured (JOBRING_SMTP_HOST)")
    global_access_token: bool = Field(
        description="the global executor token (JOBRING_ACCESS_TOKEN) is on: executors of groups "
        "without a token of their own present it"
    )
