"""Request and response bodies of the management API (pydantic), and record conversions.

Instants are UTC: epoch milliseconds for scheduling fields (``trigger_next_time`` ...),
ISO 8601 with offset for the reference's DATETIME columns.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Annotated, Any, Generic, TypeVar

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

from jobring.admin.security.roles import Role
from jobring.admin.store.records import (
    ApiToken,
    ClearRule,
    GlueVersion,
    JobGroup,
    JobInfo,
    LogEntry,
    RegistryEntry,
    User,
)
from jobring.admin.validation import FieldError, text_problem
from jobring.core.enums import BlockStrategy, GlueType, MisfireStrategy, RouteStrategy, ScheduleType
from jobring.core.runstate import RunState, duration_ms, run_state

MAX_INT32 = 2_147_483_647
MAX_INT64 = 9_223_372_036_854_775_807
MAX_EPOCH_MS = 253_402_300_799_999  # 9999-12-31T23:59:59.999Z

T = TypeVar("T")


def _storable_text(value: str) -> str:
    problem = text_problem(value)
    if problem:
        raise ValueError(problem)
    return value


Text = Annotated[str, AfterValidator(_storable_text)]
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


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class PageOut(BaseModel, Generic[T]):
    items: list[T]
    total: int
    offset: int
    limit: int


# -- jobs ------------------------------------------------------------------------------------


# A job's field limits, shared by creation, partial update and the calls that take one field.
JobDesc = Annotated[Text, Field(min_length=1, max_length=255)]
Author = Annotated[Text, Field(max_length=64)]
AlarmEmail = Annotated[Text, Field(max_length=255)]
ScheduleConf = Annotated[Text, Field(max_length=128)]
ZoneName = Annotated[Text, Field(max_length=64)]
HandlerName = Annotated[Text, Field(max_length=255)]
ExecutorParam = Annotated[Text, Field(max_length=512)]
TimeoutSeconds = Annotated[int, Field(ge=0, le=7 * 24 * 3600)]
RetryCount = Annotated[int, Field(ge=0, le=100)]
GlueRemark = Annotated[Text, Field(max_length=128)]
ChildJobIds = Annotated[list[Id32], Field(max_length=20)]
GlueSource = Annotated[Text, Field(max_length=1_000_000)]
AlarmTargets = Annotated[list[dict[str, Any]], Field(max_length=20, description=(
    'alarm targets: {"kind": "email", "to": [...]}, or {"kind": "webhook"|"slack"|"wecom", "url": ...}, '
    'or {"kind": "dingtalk"|"feishu", "url": ..., "secret": ...}'))]
AlarmOnRule = Annotated[str, Field(pattern="^(failure_final|every_failure)$",
                                   description="failure_final: only when no retry follows; every_failure")]
RetryIntervalSeconds = Annotated[int, Field(ge=0, le=24 * 3600)]
RetryBackoffKind = Annotated[str, Field(pattern="^(fixed|exponential)$")]
DeadlineMinutes = Annotated[int, Field(ge=1, le=7 * 24 * 60)]


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
    alarm_recovery: bool = False
    deadline_minutes: DeadlineMinutes | None = Field(
        None, description="alarm when a run is not finished this long after its planned time")
    executor_fail_retry_interval_s: RetryIntervalSeconds = 0
    retry_backoff: RetryBackoffKind = "fixed"
    retry_backoff_max_s: RetryIntervalSeconds = 3600


class JobCreate(JobFields):
    pass


class JobUpdate(Strict):
    """A partial update: only the fields sent change."""

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
    alarm_recovery: bool | None = None
    deadline_minutes: DeadlineMinutes | None = None
    executor_fail_retry_interval_s: RetryIntervalSeconds | None = None
    retry_backoff: RetryBackoffKind | None = None
    retry_backoff_max_s: RetryIntervalSeconds | None = None


def targets_out(job: JobInfo) -> list[dict[str, Any]]:
    """The job's alarm targets for output, signing secrets masked."""
    from jobring.admin.alarms.targets import TargetError, parse_targets

    try:
        return [t.as_dict(mask_secrets=True) for t in parse_targets(job.alarm_targets)]
    except TargetError:
        return []


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
    alarm_targets: list[dict[str, Any]] = Field(description="signing secrets are shown masked")
    alarm_on: str
    alarm_recovery: bool
    deadline_minutes: int | None
    executor_fail_retry_interval_s: int
    retry_backoff: str
    retry_backoff_max_s: int
    declared_by_executor: bool = Field(
        description="the job is declared in its executor's code (@executor.job(..., cron=...))"
    )

    @classmethod
    def of(cls, job: JobInfo) -> JobOut:
        return cls(**record_fields(cls, job, alarm_targets=targets_out(job),
                                   declared_by_executor=bool(job.declared_by_executor)))


class TriggerIn(Strict):
    executor_param: ExecutorParam | None = Field(
        None, description="replaces the job's params for this run"
    )
    addresses: Annotated[list[Annotated[Text, Field(max_length=255)]], Field(max_length=100)] | None = Field(
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
    addresses: Annotated[list[Annotated[Text, Field(max_length=255)]], Field(max_length=100)] | None = Field(
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
    log_ids: list[int]
    trigger_code: int
    trigger_msg: str


class SchedulePreviewIn(Strict):
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
    glue_remark: Annotated[Text, Field(min_length=1, max_length=128)]


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


class GroupIn(Strict):
    app_name: Annotated[Text, Field(min_length=1, max_length=64)]
    title: Annotated[Text, Field(min_length=1, max_length=64)]
    address_type: Annotated[int, Field(ge=0, le=1, description="0 automatic (registry), 1 manual")] = 0
    addresses: Annotated[list[Annotated[Text, Field(max_length=255)]], Field(max_length=200)] = Field(
        default_factory=list, description="manual groups: http(s) URLs of the executors"
    )


class OnlineAddress(BaseModel):
    address: str
    last_heartbeat: datetime | None


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

    @classmethod
    def of(cls, g: JobGroup, entries: list[RegistryEntry]) -> GroupOut:
        online = [
            OnlineAddress(address=e.registry_value, last_heartbeat=aware(e.update_time)) for e in entries
        ]
        return cls(**record_fields(cls, g, online=online, has_access_token=bool(g.access_token),
                                   disabled_addresses=g.disabled))


class GroupTokenOut(BaseModel):
    group_id: int
    app_name: str
    access_token: str


class AddressIn(Strict):
    address: Annotated[Text, Field(min_length=1, max_length=255)]


# -- users, tokens, auth ---------------------------------------------------------------------

RoleName = Annotated[str, Field(pattern="^(admin|operator|viewer)$")]


def _encodable(value: str) -> str:
    if any(0xD800 <= ord(ch) <= 0xDFFF for ch in value):
        raise ValueError("must be valid Unicode (no lone surrogates)")
    return value


Password = Annotated[str, Field(min_length=1, max_length=256), AfterValidator(_encodable)]


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
    username: Annotated[Text, Field(min_length=1, max_length=50)]
    password: Password
    role: RoleName = "operator"
    group_ids: Annotated[list[Id32], Field(max_length=50)] = Field(default_factory=list)
    glue_permission: bool = False
    must_change_password: bool = Field(True, description="the user must pick a new password at first login")


class UserUpdate(Strict):
    username: Annotated[Text, Field(min_length=1, max_length=50)] | None = None
    role: RoleName | None = None
    group_ids: Annotated[list[Id32], Field(max_length=50)] | None = None
    glue_permission: bool | None = None
    password: Password | None = Field(None, description="reset the password (the user must change it)")


class PasswordChange(Strict):
    current_password: Password
    new_password: Password


class LoginIn(Strict):
    username: Annotated[Text, Field(min_length=1, max_length=50)]
    password: Password


class MeOut(BaseModel):
    user: UserOut
    auth: str = Field(description="session or token")
    csrf_token: str | None = Field(None, description="send it as X-CSRF-Token on unsafe methods")


MAX_TOKEN_DAYS = 3650


class TokenCreate(Strict):
    name: Annotated[Text, Field(min_length=1, max_length=64)]
    expires_in_days: Annotated[int, Field(ge=1, le=MAX_TOKEN_DAYS)] | None = Field(
        None, description="the token stops working after this many days (default: never)"
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

    @classmethod
    def of(cls, t: ApiToken) -> TokenOut:
        return cls(**record_fields(cls, t))


class TokenCreated(TokenOut):
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
    global_access_token: bool = Field(
        description="the global executor token (JOBRING_ACCESS_TOKEN) is on: executors of groups "
        "without a token of their own present it"
    )
