"""The store's records: frozen dataclasses, one per row kind, plus small value types.

Reference DATETIME columns are naive UTC ``datetime`` values (whole seconds: MySQL keeps
no fractions); epoch-millisecond columns are ``int``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Generic, TypeVar

import orjson

from jobring.core.addresses import address_key

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Page(Generic[T]):
    """One page of a listing and the number of rows matching the filter overall; when
    ``total_exact`` is False, ``total`` is an estimate (counting exactly was too costly)."""

    items: list[T]
    total: int
    total_exact: bool = True


@dataclass(frozen=True, slots=True)
class RunCursor:
    """Where a page of runs (newest first) ended: its last row's trigger time and id."""

    trigger_time: datetime
    id: int


@dataclass(frozen=True, slots=True)
class JobInfo:
    """A row of ``xxl_job_info``. ``id`` is ignored by ``jobs.create``."""

    id: int = 0
    job_group: int = 0
    job_desc: str = ""
    add_time: datetime | None = None
    update_time: datetime | None = None
    author: str | None = None
    alarm_email: str | None = None
    schedule_type: str = "NONE"
    schedule_conf: str | None = None
    misfire_strategy: str = "DO_NOTHING"
    executor_route_strategy: str | None = "FIRST"
    executor_handler: str | None = None
    executor_param: str | None = None
    executor_block_strategy: str | None = "SERIAL_EXECUTION"
    executor_timeout: int = 0
    executor_fail_retry_count: int = 0
    glue_type: str = "BEAN"
    glue_source: str | None = None
    glue_remark: str | None = None
    glue_updatetime: datetime | None = None
    child_jobid: str | None = None
    trigger_status: int = 0
    trigger_last_time: int = 0
    trigger_next_time: int = 0
    schedule_timezone: str | None = None
    lease_owner: str | None = None
    lease_until: int = 0
    alarm_targets: str | None = None  # JSON list of {"kind": ..., ...}
    alarm_on: str = "failure_final"
    alarm_recovery: bool = False
    deadline_minutes: int | None = None
    executor_fail_retry_interval_s: int = 0
    retry_backoff: str = "fixed"
    retry_backoff_max_s: int = 3600
    declared_spec: str | None = None  # JSON: the fields an executor last declared
    declared_by_executor: int = 0  # 1 while the executor's code declares the job
    managed_by: str = "console"  # "code": the executor's declarations may manage it
    declared_retired_at: int | None = None  # epoch ms the code stopped declaring it
    timing: str | None = None  # JSON timing rules (jobring.core.timing.rules); None: none
    pause_note: str | None = None  # JSON {"by", "reason", "at"} of the last pause
    flow: str | None = None  # JSON flow settings (jobring.core.flow.settings); None: none
    shard_count: int = 0  # shards per run, as sub-tasks (0: not sharded)
    failure_tolerance: str | None = None  # sub-tasks that may fail: "3", "1%" (None: none)
    broadcast_pre: str | None = None  # SHARDING_BROADCAST: a handler run once before the parts
    broadcast_post: str | None = None  # ... and once after them all, with their results

    @property
    def child_job_ids(self) -> list[int]:
        """``child_jobid`` parsed; blanks and non-numbers are ignored."""
        return [int(p) for p in (self.child_jobid or "").split(",") if p.strip().isdigit()]


class JobSort(StrEnum):
    """Orderings offered by ``jobs.list``."""

    ID_DESC = "id_desc"
    ID_ASC = "id_asc"
    NEXT_TIME = "next_time"
    DESC = "desc"


@dataclass(frozen=True, slots=True)
class NewLog:
    """A run-log row to insert. ``planned_time`` (epoch ms) is the identity of a scheduled fire."""

    job_group: int
    job_id: int
    trigger_time: datetime
    executor_handler: str | None = None
    executor_param: str | None = None
    executor_address: str | None = None
    executor_sharding_param: str | None = None
    executor_fail_retry_count: int = 0
    trigger_code: int = 0
    trigger_msg: str | None = None
    handle_code: int = 0
    trigger_type: str | None = None
    planned_time: int | None = None
    dispatch_time: int | None = None
    admin_node: str | None = None
    attempt: int = 1
    root_run_id: int | None = None  # a child run's root trigger (run id)
    child_depth: int = 0  # 1: a direct child of the root run
    retry_of: int | None = None  # a retry: the run it re-runs
    workflow_node_run_id: int | None = None  # a workflow node's attempt (unique)
    alarm_status: int = 0  # 1 (not needed): never retried nor alarmed (a calendar skip)
    logical_time: int | None = None  # the instant the run stands for (backfills, templated params)
    data_interval_start: int | None = None
    backfill_id: int | None = None
    sent_time: int | None = None  # the logDateTime it is sent with (epoch ms)


@dataclass(frozen=True, slots=True)
class RunLink:
    """Where a run belongs: its job and group, and the child-fire tree it is part of."""

    run_id: int
    job_id: int
    job_group: int
    root_run_id: int | None
    child_depth: int


@dataclass(frozen=True, slots=True)
class ParentLink:
    """A run whose success was just recorded, with what follows a success in its job: the
    child jobs to fire, and whether a recovery is alarmed."""

    link: RunLink
    child_jobid: str | None
    alarm_recovery: bool


@dataclass(frozen=True, slots=True)
class FirstResult:
    """A run's first result, written alone (``LogRepository.record_first_result``), with its
    run's :class:`ParentLink` as the write returned it (None: its job no longer exists)."""

    parent: ParentLink | None


@dataclass(frozen=True, slots=True)
class LogEntry:
    """A row of ``xxl_job_log``."""

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
    handle_time: datetime | None
    handle_code: int
    handle_msg: str | None
    alarm_status: int
    trigger_type: str | None
    planned_time: int | None
    dispatch_time: int | None
    admin_node: str | None
    handle_time_ms: int | None = None  # handle_time with its milliseconds
    attempt: int = 1
    root_run_id: int | None = None
    child_depth: int = 0
    child_fires: int = 0
    retry_of: int | None = None
    workflow_node_run_id: int | None = None
    logical_time: int | None = None
    data_interval_start: int | None = None
    backfill_id: int | None = None
    sent_time: int | None = None  # the logDateTime it was sent with (epoch ms; None: older rows)


@dataclass(frozen=True, slots=True)
class TriggerResult:
    """What the dispatcher learned from the executor's /run answer, for one log row."""

    log_id: int
    executor_address: str | None
    trigger_code: int
    trigger_msg: str | None
    dispatch_time: int | None = None
    executor_sharding_param: str | None = None


@dataclass(frozen=True, slots=True)
class HandleResult:
    """An executor's callback for one log row."""

    log_id: int
    handle_code: int
    handle_msg: str | None
    handle_time: datetime
    # A workflow node's additions to the workflow context (compact JSON text, within the cap),
    # stored on its attempt with the result.
    workflow_context: str | None = None


class ResultOutcome(StrEnum):
    """What ``logs.record_results`` did with one callback."""

    APPLIED = "applied"
    REPEAT = "repeat"  # the log already had a result: ignored
    NOT_FOUND = "not_found"  # no such run, or (with a GroupGuard) a run of a group not allowed


@dataclass(frozen=True, slots=True)
class GroupGuard:
    """The executor groups whose runs a write may touch: ``only`` these (a group token's
    groups), or every group but ``excluded`` (the global token: not the groups that have a
    token of their own). Part of the write's own statement, not a check before it."""

    only: frozenset[int] | None = None
    excluded: frozenset[int] = frozenset()

    def allows(self, group_id: int) -> bool:
        if self.only is not None:
            return group_id in self.only
        return group_id not in self.excluded


@dataclass(slots=True)
class Tally:
    """The rows a write done in several short transactions changed so far: what was done when
    it fails midway (an audit entry names it)."""

    count: int = 0


class LogStatus(StrEnum):
    """The console's log status filter (the reference's logStatus 0..3)."""

    ALL = "all"
    SUCCESS = "success"
    FAIL = "fail"
    RUNNING = "running"


class ClearRule(StrEnum):
    """The reference's clearLog types, plus 1 day and 1 week."""

    OLDER_THAN_1_DAY = "older_than_1_day"
    OLDER_THAN_1_WEEK = "older_than_1_week"
    OLDER_THAN_1_MONTH = "older_than_1_month"
    OLDER_THAN_3_MONTHS = "older_than_3_months"
    OLDER_THAN_6_MONTHS = "older_than_6_months"
    OLDER_THAN_1_YEAR = "older_than_1_year"
    KEEP_LAST_1K = "keep_last_1k"
    KEEP_LAST_10K = "keep_last_10k"
    KEEP_LAST_30K = "keep_last_30k"
    KEEP_LAST_100K = "keep_last_100k"
    ALL = "all"

    @classmethod
    def from_reference_type(cls, clear_type: int) -> ClearRule:
        """Map XXL-JOB's numeric ``type`` (1..9) to a rule; ValueError when unknown."""
        mapping = {
            1: cls.OLDER_THAN_1_MONTH,
            2: cls.OLDER_THAN_3_MONTHS,
            3: cls.OLDER_THAN_6_MONTHS,
            4: cls.OLDER_THAN_1_YEAR,
            5: cls.KEEP_LAST_1K,
            6: cls.KEEP_LAST_10K,
            7: cls.KEEP_LAST_30K,
            8: cls.KEEP_LAST_100K,
            9: cls.ALL,
        }
        try:
            return mapping[clear_type]
        except KeyError:
            raise ValueError(f"unknown log clear type {clear_type!r} (expected 1..9)") from None


@dataclass(frozen=True, slots=True)
class DayCount:
    """Run counts of one day (from the logs or from ``xxl_job_log_report``)."""

    day: datetime  # midnight, naive UTC
    running: int
    success: int
    fail: int


@dataclass(frozen=True, slots=True)
class JobGroup:
    """A row of ``xxl_job_group`` (an executor group). ``id`` is ignored by ``groups.create``."""

    id: int = 0
    app_name: str = ""
    title: str = ""
    address_type: int = 0
    address_list: str | None = None
    update_time: datetime | None = None
    # The group's executor token (jobring addition); see admin/services/executor_tokens.py.
    access_token: str | None = field(default=None, repr=False)
    disabled_addresses: str | None = None
    flow: str | None = None  # JSON flow settings of every job of the group; None: none

    @property
    def addresses(self) -> list[str]:
        """``address_list`` split on commas, blanks dropped."""
        return [a.strip() for a in (self.address_list or "").split(",") if a.strip()]

    @property
    def disabled(self) -> list[str]:
        """The addresses taken out of routing by hand."""
        return [a.strip() for a in (self.disabled_addresses or "").split(",") if a.strip()]

    @property
    def routable_addresses(self) -> list[str]:
        """``addresses`` without the disabled ones (in any spelling of them, see
        ``address_key``): what a fire may be routed to."""
        off = {address_key(a) for a in self.disabled}
        return [a for a in self.addresses if address_key(a) not in off]


@dataclass(frozen=True, slots=True)
class RegistryEntry:
    """A row of ``xxl_job_registry``: one heartbeat of one executor address."""

    id: int
    registry_group: str
    registry_key: str
    registry_value: str
    update_time: datetime | None
    handlers: str | None = None  # JSON array of the declared handler names; None: none declared

    @property
    def declared_handlers(self) -> list[str] | None:
        """The handler names the executor declared (sorted), None when it declared none."""
        return decode_handlers(self.handlers)


def encode_handlers(names: Sequence[str] | None) -> str | None:
    """``xxl_job_registry.handlers`` for the declared names (None: nothing declared)."""
    return None if names is None else orjson.dumps(sorted(set(names))).decode()


def decode_handlers(text: str | None) -> list[str] | None:
    """The names stored by :func:`encode_handlers`; None for NULL or a value not written by it."""
    if text is None:
        return None
    try:
        value = orjson.loads(text)
    except orjson.JSONDecodeError:
        return None
    return sorted(v for v in value if isinstance(v, str)) if isinstance(value, list) else None


@dataclass(frozen=True, slots=True)
class GlueVersion:
    """A row of ``xxl_job_logglue``: one saved version of a job's GLUE source."""

    id: int
    job_id: int
    glue_type: str | None
    glue_source: str | None
    glue_remark: str
    add_time: datetime | None
    update_time: datetime | None


@dataclass(frozen=True, slots=True)
class User:
    """A row of ``xxl_job_user``. Role: 1 admin, 0 operator, 2 viewer."""

    id: int
    username: str
    role: int
    permission: str | None = None
    password_hash: str | None = None
    must_change_password: bool = False
    glue_permission: bool = False
    add_time: datetime | None = None

    @property
    def permitted_group_ids(self) -> list[int]:
        """``permission`` parsed as a comma list of group ids."""
        return [int(p) for p in (self.permission or "").split(",") if p.strip().isdigit()]


@dataclass(frozen=True, slots=True)
class ApiToken:
    """A row of ``jobring_api_token``; only the token's hash is stored."""

    id: int
    user_id: int
    name: str
    token_hash: str
    add_time: datetime | None
    last_used_time: datetime | None
    revoked: bool
    expires_at: datetime | None = None  # naive UTC; None: never
    parent_token_id: int | None = None  # the token this one was created with


@dataclass(frozen=True, slots=True)
class RevokedAccess:
    """How many active sessions and API tokens of a user a change ended."""

    sessions: int
    tokens: int


@dataclass(frozen=True, slots=True)
class Session:
    """A row of ``jobring_session`` (instants in epoch ms); the id itself is never stored."""

    id_hash: str
    user_id: int
    created: int
    expires: int
    last_seen: int
    revoked: bool


@dataclass(frozen=True, slots=True)
class ReportTotals:
    """Sums over all of ``xxl_job_log_report``."""

    running: int = 0
    success: int = 0
    fail: int = 0


@dataclass(frozen=True, slots=True)
class HeldJobs:
    """What a node holds after renewing its leases (:meth:`JobRepository.renew_held`)."""

    ids: frozenset[int]  # every job leased to the node
    changed: list[JobInfo]  # the rows new to the caller or changed since it read them
