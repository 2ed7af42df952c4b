"""The fire types shared by the trigger's recorder and dispatcher.

A :class:`FireRequest` becomes a :class:`FirePlan` (resolved against its executor group,
with its log ids once recorded); plans recorded ahead travel as a :class:`PreparedBatch`
until they are dispatched or cancelled; each request ends as a :class:`FireResult`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

from jobring.admin.store.records import JobGroup, JobInfo, LogEntry, TriggerResult
from jobring.core.enums import GlueType, RouteStrategy, TriggerType
from jobring.core.routing import declaring
from jobring.errors import JobringError
from jobring.protocol.models import FAIL_CODE

TRIGGER_TYPE_TITLES = {
    TriggerType.MANUAL: "Manual trigger",
    TriggerType.CRON: "Cron trigger",
    TriggerType.FIX_RATE: "Fixed-rate trigger",
    TriggerType.RETRY: "Fail retry trigger",
    TriggerType.PARENT: "Parent job trigger",
    TriggerType.API: "Api trigger",
    TriggerType.MISFIRE: "Misfire compensation trigger",
    TriggerType.DELAYED: "Delayed trigger",
    TriggerType.WORKFLOW: "Workflow trigger",
    TriggerType.BACKFILL: "Backfill trigger",
}
MSG_ADDRESS_EMPTY = "Trigger Fail: registry address is empty"
_ONE_SHARD = ((0, 1),)
_HANDLER_SPLITS_KEPT = 1_000  # per group view (one per handler of the group's jobs)


def msg_no_handler(app_name: str | None, handler: str) -> str:
    """The trigger failure when every online executor declared handlers, none this one."""
    return f"Trigger Fail: no online executor of group {app_name} declares handler '{handler}'"


def bean_handler(job: JobInfo) -> str | None:
    """The handler an executor must have to run ``job``; None for a GLUE job (the executor
    gets the source with the fire)."""
    if job.executor_handler and (job.glue_type or GlueType.BEAN) == GlueType.BEAN:
        return job.executor_handler
    return None


class TriggerRejected(JobringError, ValueError):
    """A fire request that must not be carried out (e.g. an address outside the group)."""


class NotSent(JobringError, RuntimeError):
    """A fire's ``send_check`` said no right before its /run: nothing was sent and no trigger
    result recorded (its run log row stays as recorded, for whoever took the fire over)."""


@dataclass(frozen=True, slots=True)
class FireRequest:
    """One fire of one job.

    ``planned_time`` (epoch ms) is set for scheduled fires: with ``job.id`` it is the fire's
    identity. ``address_override`` (MANUAL only) must be a subset of the group's addresses.
    ``fail_retry_count`` None means the job's own count. A child fire (and a retry of a
    child run) carries its tree's root run and its depth (1: a child of the root run).
    """

    job: JobInfo
    trigger_type: TriggerType
    planned_time: int | None = None
    executor_param: str | None = None
    address_override: list[str] | None = None
    fail_retry_count: int | None = None
    sharding: tuple[int, int] | None = None  # a retry re-runs one shard (index, total)
    attempt: int = 1  # 1 = first run, 2 = first retry, ...
    preferred_address: str | None = None  # a shard's retry goes back there while it is routable
    root_run_id: int | None = None
    child_depth: int = 0
    retry_of: int | None = None  # a retry: the run it re-runs
    workflow_node_run_id: int | None = None  # a workflow node's attempt (its run's identity)
    # A workflow node's attempt: its run's context as the node starts (sent as workflowContext).
    workflow_context: Mapping[str, Any] | None = None
    # Logical (business) time, epoch ms: a backfill's instant (its identity, with backfill_id
    # and attempt), or given by the caller; None: the planned instant of a scheduled fire.
    logical_time: int | None = None
    data_interval_start: int | None = None
    backfill_id: int | None = None
    # Awaited right before the /run is sent (after routing): False and it is not sent (the
    # fire raises NotSent). A workflow node's fire checks that its admin still holds the
    # attempt's claim. Only for a fire of one request (``TriggerService.fire``).
    send_check: Callable[[], Awaitable[bool]] | None = field(default=None, compare=False, repr=False)


@dataclass(frozen=True, slots=True)
class NodeFire:
    """What a workflow node attempt's fire sends beyond its job and run-log row: its run's
    context as the node starts, and the node's own timeout (None: the job's)."""

    context: Mapping[str, Any]
    timeout_s: int | None


@dataclass(frozen=True, slots=True)
class FireResult:
    """What became of one request: its log ids, or ``duplicate`` when another node fired it."""

    log_ids: list[int]
    duplicate: bool
    trigger_code: int
    trigger_msg: str


@dataclass(frozen=True, slots=True)
class GroupView:
    """A group as dispatch uses it: the addresses the policy admits and the token to send
    (None: the client's global token)."""

    group: JobGroup
    addresses: list[str]
    refused: list[str]
    token: str | None
    # The handlers declared by those of ``addresses`` whose executor declared any.
    declared: Mapping[str, frozenset[str]] = field(default_factory=dict)
    _splits: dict[str, tuple[list[str], list[str]]] = field(default_factory=dict, repr=False, compare=False)

    def for_handler(self, handler: str | None) -> tuple[list[str], list[str]]:
        """The addresses that may receive a job of ``handler`` and those that declared other
        handlers only (see ``core.routing.declaring``); worked out once per handler."""
        if handler is None or not self.declared:
            return self.addresses, []
        split = self._splits.get(handler)
        if split is None:
            if len(self._splits) >= _HANDLER_SPLITS_KEPT:
                self._splits.clear()
            split = self._splits[handler] = declaring(handler, self.addresses, self.declared)
        return split


class FirePlan:
    """A request, then resolved against its group: the address list and the shards to run,
    then the log ids recorded for it (one per shard) or ``duplicate``."""

    __slots__ = ("req", "strategy", "param", "retry_count", "trigger_time_ms", "addresses",
                 "manual_addresses", "shards", "problem", "token", "app_name", "log_ids", "duplicate",
                 "undeclared", "logical_ms", "interval_start_ms", "refusal", "flow")

    def __init__(self, req: FireRequest, strategy: RouteStrategy | None, param: str, retry_count: int,
                 trigger_time_ms: int) -> None:
        self.req = req
        self.strategy = strategy
        self.param = param
        self.retry_count = retry_count
        self.trigger_time_ms = trigger_time_ms
        self.addresses: list[str] = []
        # The group's addresses passed over: their executors did not declare the job's handler.
        self.undeclared: list[str] = []
        self.manual_addresses = False
        self.shards: Sequence[tuple[int, int]] = _ONE_SHARD if req.sharding is None else (req.sharding,)
        self.problem: str | None = None  # why no address could be had (shown in the trigger message)
        self.token: str | None = None  # the executor token of the job's group (else the global one)
        self.app_name: str | None = None  # the group's appname (a 3.5 executor wants it in a header)
        self.log_ids: list[int] = []
        self.duplicate = False
        self.logical_ms: int | None = None  # sent to executors as logicalTime
        self.interval_start_ms: int | None = None  # ... as dataIntervalStart
        self.refusal: str | None = None  # why it must fail without being sent (recorded first)
        # The flow settings (JSON) of the job and of its group when either has some: the fire
        # then goes through flow control's admission (admin/trigger/flowgate.py).
        self.flow: tuple[str | None, str | None] | None = None


class PreparedBatch:
    """Fires whose log rows are recorded and not yet dispatched (see ``prepare_batch``)."""

    __slots__ = ("plans", "state")

    def __init__(self, plans: list[FirePlan]) -> None:
        self.plans = plans
        self.state = "prepared"

    def split(self) -> list[PreparedBatch]:
        """One prepared batch per request (in order), so each can be sent at its own instant.
        This batch is then used up (state "split")."""
        if self.state != "prepared":
            raise RuntimeError(f"prepared batch already {self.state}")
        self.state = "split"
        return [PreparedBatch([plan]) for plan in self.plans]

    @staticmethod
    def merge(batches: Sequence[PreparedBatch]) -> PreparedBatch:
        """The prepared batches as one (each is used up, state "merged")."""
        plans: list[FirePlan] = []
        for batch in batches:
            if batch.state != "prepared":
                raise RuntimeError(f"prepared batch already {batch.state}")
            batch.state = "merged"
            plans.extend(batch.plans)
        return PreparedBatch(plans)

    @property
    def duplicates(self) -> list[bool]:
        """Per request: True when the planned fire was already recorded (it will not run)."""
        return [p.duplicate for p in self.plans]

    @property
    def log_ids(self) -> list[list[int]]:
        return [list(p.log_ids) for p in self.plans]


def fire_results(plans: Sequence[FirePlan], answers: Sequence[TriggerResult]) -> list[FireResult]:
    """One result per plan from the trigger results of its log rows."""
    by_log = {a.log_id: a for a in answers}
    results: list[FireResult] = []
    for plan in plans:
        if plan.duplicate:
            results.append(FireResult([], True, 0, "duplicate fire: already recorded"))
            continue
        mine = [by_log[i] for i in plan.log_ids]
        code = FAIL_CODE if any(a.trigger_code != 200 for a in mine) else 200
        msg = "\n\n".join(a.trigger_msg or "" for a in mine)
        results.append(FireResult(list(plan.log_ids), False, code, msg))
    return results


def dispatch_error_reason(address: str | None, msg: str | None) -> str:
    """A failed dispatch's reason, for metrics: no_address, unreachable, timeout, http_error,
    bad_answer or refused (the executor answered with a failure code)."""
    if address is None:
        return "no_address"
    text = msg or ""
    for marker, reason in ((" unreachable (", "unreachable"), (" timed out (", "timeout"),
                           (" answered HTTP ", "http_error"), ("not a ReturnT", "bad_answer")):
        if marker in text:
            return reason
    return "refused"


def _ms(value: datetime | None) -> int:
    return 0 if value is None else int(value.replace(tzinfo=value.tzinfo or UTC).timestamp() * 1000)


_FOLD_MS = 3_600_000  # a daylight-saving shift


def sent_instant(planned_ms: int | None, now_ms: int) -> int:
    """The ``logDateTime`` to send a run recorded at ``now_ms`` with, and its trigger time: a
    value :func:`sent_time_ms` gives back from the stored row whatever the column keeps of it
    (a DATETIME column may drop or round the milliseconds). A run's identity on an executor
    is (logId, logDateTime): the admin asks executors about a run, kills it and sends an
    unsure fire again by that pair. So a fire planned ahead (or up to about two seconds late:
    its whole second within one of the plan) is stamped with its planned instant, anything
    else with a whole second."""
    whole = now_ms - now_ms % 1_000
    if planned_ms is not None and whole - planned_ms < 1_000:
        return planned_ms
    return whole


def sent_time_ms(row: LogEntry) -> int:
    """The ``logDateTime`` the run of ``row`` was sent with: as recorded (``sent_time``); for a
    row without it (recorded before that column, or by an XXL-JOB admin), its planned instant
    when the row was recorded ahead (the stored trigger time may have lost its milliseconds),
    else the stored trigger time."""
    if row.sent_time is not None:
        return row.sent_time
    stored = _ms(row.trigger_time)
    planned = row.planned_time
    # A database zone's repeated hour (DST ending) reads back as its first occurrence: an hour early.
    if planned is not None and (abs(stored - planned) < 1_000 or abs(stored + _FOLD_MS - planned) < 1_000):
        return planned
    return stored


def run_candidates(row: LogEntry) -> list[tuple[int, int]]:
    """The (logId, logDateTime) pairs the run of ``row`` may have been sent with: what to ask
    executors' ``/received`` about it: the one recorded first, then the ones its stored
    trigger time allows (it may have lost its milliseconds and, in a database zone's repeated
    hour, reads an hour early). Only this run has its log id, so a candidate it was not sent
    with matches nothing."""
    at = sent_time_ms(row)
    candidates = [(row.id, at)]
    # Also what the stored trigger time allows when the instant was recorded: an admin of an
    # earlier version (a rolling upgrade) starts a queued run with the second it starts in
    # and leaves sent_time as it was. Only this run has its id: no other run matches these.
    worked_out = sent_time_ms(replace(row, sent_time=None))
    for other in (worked_out, worked_out - 1_000, worked_out + _FOLD_MS):
        if (row.id, other) not in candidates:
            candidates.append((row.id, other))
    return candidates
