"""The records of the workflow store (:mod:`jobring.admin.store.workflows`): workflows, runs,
node attempts, their row decoders and the errors of the store."""

from __future__ import annotations

import builtins
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

import orjson

from jobring.admin.store.records import JobInfo
from jobring.errors import JobringError

__all__ = [
    "MANAGED_BY_CODE",
    "EndedNodeRun",
    "FireRows",
    "NewNodeRun",
    "NodeRunRecord",
    "NodeRunState",
    "SMALL_STATE_CHARS",
    "StoredStep",
    "WorkflowBusy",
    "WorkflowGone",
    "WorkflowNameTaken",
    "WorkflowRecord",
    "WorkflowRunRecord",
    "Withdrawal",
    "decoded_run",
    "dumps",
    "listed_run",
    "node_run_of",
]


MANAGED_BY_CODE = "code"
"""``jobring_workflow.managed_by`` of a workflow declared in an executor's code."""


class NodeRunState:
    """The states of a node attempt row (see ``tables.workflow_node_run``)."""

    PENDING = "pending"
    FIRING = "firing"
    RUNNING = "running"
    ENDED = "ended"


class Withdrawal(Enum):
    """What became of a recorded job run its admin decided not to send (``withdraw_unsent``)."""

    WITHDRAWN = "withdrawn"  # deleted: it was never sent
    SENT = "sent"  # confirmed meanwhile (a dispatch answer or a result): it stays
    TAKEN_OVER = "taken over"  # the attempt is another admin's claim now, and so is its run


class WorkflowGone(JobringError, LookupError):
    """The workflow was deleted, or moved to another group (a run cannot start)."""


class WorkflowBusy(JobringError):
    """The workflow has running runs (``run_ids``, a few of them): it may not be deleted."""

    def __init__(self, workflow_id: int, run_ids: builtins.list[int]) -> None:
        super().__init__(f"workflow {workflow_id} has running runs")
        self.run_ids = run_ids


class WorkflowNameTaken(JobringError):
    """A workflow of that name is in the group already (``workflow_id``): a declared one is
    created once per group and name."""

    def __init__(self, name: str, workflow_id: int) -> None:
        super().__init__(f"workflow {workflow_id} is named {name!r} already")
        self.workflow_id = workflow_id


@dataclass(frozen=True, slots=True)
class WorkflowRecord:
    id: int
    name: str
    job_group: int
    description: str
    version: int
    created_by: str | None
    created_at: int
    updated_at: int
    definition: dict[str, Any]
    managed_by: str | None = None


@dataclass(frozen=True, slots=True)
class WorkflowRunRecord:
    """A run; ``state`` is the engine's document (None in lists, which do not read it)."""

    id: int
    workflow_id: int
    version: int
    job_group: int
    status: str
    rev: int
    triggered_by: str | None
    started_at: int
    ended_at: int | None
    parent_run_id: int | None = None
    parent_node_run_id: int | None = None
    state: dict[str, Any] | None = None
    params: dict[str, Any] | None = None
    state_chars: int = 0  # the stored state's length (0 in lists)


@dataclass(frozen=True, slots=True)
class NewNodeRun:
    """A node attempt to start (an engine StartJob or StartSubworkflow command)."""

    node_key: str
    item: int  # -1: not a fan-out item
    attempt: int
    job_id: int  # 0 for a sub-workflow attempt
    params: str | None
    timeout_s: int | None
    workflow_id: int | None = None  # the workflow a sub-workflow attempt runs


@dataclass(frozen=True, slots=True)
class NodeRunRecord:
    id: int
    workflow_run_id: int
    node_key: str
    item: int
    attempt: int
    job_id: int
    params: str | None
    timeout_s: int | None
    state: str
    log_id: int | None
    claimed_by: str | None
    claimed_at: int | None
    created_at: int
    ended_at: int | None
    workflow_id: int | None = None
    context_added: str | None = None  # JSON: what the handler added to the context


@dataclass(frozen=True, slots=True)
class EndedNodeRun:
    """A running node attempt whose job run has a result (or failed to trigger)."""

    node_run: NodeRunRecord
    trigger_code: int
    trigger_msg: str | None
    handle_code: int
    handle_msg: str | None


SMALL_STATE_CHARS = 8_192
"""A run state up to this size (JSON characters) is decoded, stepped and encoded on the event
loop: well under a millisecond of CPU, less than handing it to a worker thread and back costs
on a busy machine. Larger ones (a state reaches megabytes) go to a worker thread."""


@dataclass(frozen=True, slots=True)
class StoredStep:
    """What storing a step read in its transaction: the run's pending attempts (those it
    inserted among them) and the jobs they run, by id (missing: deleted); ``log_ids``: the
    run-log rows it recorded for them (see :class:`FireRows`), by attempt id, stamped
    ``logged_at_ms``."""

    attempts: builtins.list[NodeRunRecord]
    jobs: dict[int, JobInfo]
    log_ids: dict[int, int] = field(default_factory=dict)
    logged_at_ms: int = 0


@dataclass(frozen=True, slots=True)
class FireRows:
    """The run-log rows a step records with the job attempts it starts, in the same write
    (PostgreSQL's one statement; a transaction where the database has INSERT ... RETURNING,
    ``WorkflowRepository.advance``): one per attempt, as the trigger
    would record its fire (``trigger_type`` by ``admin_node``, stamped ``trigger_time_ms``,
    the attempt's params or else its job's, no retries), for a job that still exists in
    ``job_group`` and whose timing does not mention ``params_template`` (templated params are
    rendered by the trigger). The others are recorded by the trigger at their fire."""

    admin_node: str
    trigger_type: str
    trigger_time_ms: int
    job_group: int


def dumps(doc: Mapping[str, Any]) -> str:
    """A document (a definition, a run's state or params) as stored."""
    return orjson.dumps(doc).decode()


def _run(row: Any, with_state: bool) -> WorkflowRunRecord:
    values = dict(row._asdict())
    raw = values.pop("state", None)
    params = values.pop("params", None)
    return WorkflowRunRecord(**values, state=orjson.loads(raw) if with_state and raw is not None else None,
                             params=orjson.loads(params) if with_state and params is not None else None,
                             state_chars=len(raw) if with_state and raw is not None else 0)


def decoded_run(row: Any) -> WorkflowRunRecord:
    """A run row with its state and params decoded."""
    return _run(row, with_state=True)


def node_run_of(row: Any) -> NodeRunRecord:
    """A node attempt row."""
    return NodeRunRecord(**row._asdict())


def listed_run(row: Any) -> WorkflowRunRecord:
    """A run row of a list (its state and params not read)."""
    return _run(row, with_state=False)


