"""The workflow driver's steps (:mod:`jobring.admin.services.workflows`): the engine applied to
a run, on the event loop for a small state and in a worker thread for a large one, and what a
step hands to the firing of its attempts."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, TypeVar

import orjson

from jobring.admin.store.records import JobInfo, LogEntry
from jobring.admin.store.workflow_records import (
    SMALL_STATE_CHARS,
    NewNodeRun,
    NodeRunRecord,
    StoredStep,
    WorkflowRunRecord,
)
from jobring.core.enums import HandleCode
from jobring.core.expression import JsonValue
from jobring.core.runstate import killed_by_user
from jobring.core.workflow import (
    Command,
    Event,
    NodeFinished,
    NodeRun,
    NodeStatus,
    Outcome,
    RunStarted,
    StartJob,
    StartSubworkflow,
    Step,
    WorkflowGraph,
    WorkflowRun,
    apply,
    node_to_json,
    run_from_json,
    run_head_json,
)
from jobring.errors import JobringError

__all__ = [
    "Applied",
    "WorkflowRunGone",
    "finished",
    "item_of",
    "naive_utc",
    "unconfirmed",
    "KNOWN_STEP_ON_LOOP",
    "KnownRun",
    "StateEncoder",
    "Wanted",
    "first_step",
    "new_attempts",
    "off_loop_if_large",
    "steps_of",
    "steps_of_state",
    "wanted_in",
]

_T = TypeVar("_T")


class WorkflowRunGone(JobringError, LookupError):
    """The run (or its workflow version) no longer exists; at a run's start: its workflow was
    deleted, or moved out of the group it was read in."""


@dataclass(frozen=True, slots=True)
class Applied:
    """An event's step once applied. ``stored_over``: the run it was stored over (None: nothing
    stored, no command of it is due); ``stored``: what the write read back; ``run``: the run as
    stored (after the whole batch the event was applied in)."""

    step: Step
    stored_over: WorkflowRunRecord | None = None
    stored: StoredStep | None = None
    run: WorkflowRun | None = None


class StateEncoder:
    """Encodes a run's state document exactly as the store's ``dumps(run_to_json(run))``, keeping the text of
    each node record it encoded: records are values (a changed node is a new object), and a step
    of a large run changes a few of them, so the others' text is reused. Encoding a 1,000-node
    run whole took most of its step's time (1.1-2 ms of 2.3). One per run; the driver applies a
    run's steps one batch at a time, so one encoder is never used by two threads at once."""

    __slots__ = ("_texts",)

    def __init__(self) -> None:
        self._texts: dict[str, tuple[NodeRun, bytes | None]] = {}

    def encode(self, run: WorkflowRun) -> str:
        texts: dict[str, tuple[NodeRun, bytes | None]] = {}
        kept = self._texts.get
        parts = []
        for key, node in run.nodes.items():
            entry = kept(key)
            if entry is None or entry[0] is not node:
                # A record equal to the fresh one (all defaults: {}) is left out, as run_to_json
                # does. (Unchanged records keep their entry as it is.)
                doc = node_to_json(node)
                entry = (node, orjson.dumps({key: doc})[1:-1] if doc else None)
            texts[key] = entry
            text = entry[1]
            if text is not None:
                parts.append(text)
        self._texts = texts
        head = orjson.dumps(run_head_json(run))  # its nodes come last: '{...' + ',"nodes":{...}}'
        return b"".join((head[:-1], b',"nodes":{', b",".join(parts), b"}}")).decode()


@dataclass(frozen=True, slots=True)
class KnownRun:
    """A run as this driver last stored it: its record (``rev`` the stored one, no state
    document), the engine's run, the size of its encoded state and the encoder that wrote it."""

    record: WorkflowRunRecord
    run: WorkflowRun
    chars: int
    encoder: StateEncoder


@dataclass(frozen=True, slots=True)
class Wanted:
    """What firing an attempt needs to know of its run: its context, its group and, when read
    with the step that stored the attempt, the jobs (None: read the job at the fire) and the
    run-log row that step recorded for it: (log id, its trigger time in epoch ms)."""

    context: dict[str, JsonValue]
    group: int
    jobs: Mapping[int, JobInfo] | None = None
    superseded: bool = False  # the attempt is no longer the running one of its node
    recorded: tuple[int, int] | None = None


KNOWN_STEP_ON_LOOP = 200_000
"""A known run's step (its run kept in memory, see :class:`KnownRun`) of a workflow without
fan-out nodes runs on the event loop when its state's size (JSON characters) times the events
applied is at most this: nothing to decode, and only the node records it changes encoded (a
result changes one or two), so its CPU grows with the nodes and the events (some 0.4 ms for
the last parent of a 1,000-node join, 76,000 characters, on the test machine): less than
handing it to a worker thread and back, which waited milliseconds for the interpreter lock on
a busy loop. A batch of many results goes to the thread as before, and so does every step of
a run with fan-out nodes (a fan-out node's record, items and all, is encoded again whole at
each item's result)."""


async def off_loop_if_large(chars: int, fn: Callable[..., _T], *args: Any, small: int | None = None) -> _T:
    """``fn(*args)`` for a run state of ``chars`` JSON characters: on the loop when it is at
    most ``small`` (None: SMALL_STATE_CHARS), else in a worker thread."""
    if chars <= (SMALL_STATE_CHARS if small is None else small):
        return fn(*args)
    return await asyncio.to_thread(fn, *args)


def wanted_in(
    run: WorkflowRun, attempt: NodeRunRecord, group: int, jobs: Mapping[int, JobInfo] | None,
    stored: StoredStep | None = None,
) -> Wanted:
    """What firing the attempt needs of ``run``; superseded unless the attempt is still the
    running one of its node (or fan-out item) there. ``stored``: the step that stored it (its
    run-log row, when it recorded one)."""
    node = run.node(attempt.node_key)
    unit = (
        node
        if attempt.item < 0 or node.items is None or attempt.item >= len(node.items)
        else node.items[attempt.item]
    )
    superseded = unit.status is not NodeStatus.RUNNING or unit.attempt != attempt.attempt
    log_id = None if stored is None else stored.log_ids.get(attempt.id)
    recorded = None if log_id is None or stored is None else (log_id, stored.logged_at_ms)
    return Wanted(dict(run.context), group, jobs, superseded, recorded)


def first_step(graph: WorkflowGraph, event: RunStarted, encoder: StateEncoder) -> tuple[Step, str | None]:
    step = apply(graph, None, event)
    return step, None if step.run is None else encoder.encode(step.run)


def steps_of_state(
    graph: WorkflowGraph, state: Mapping[str, Any], events: Sequence[Event], encoder: StateEncoder
) -> tuple[list[tuple[Step, bool]], WorkflowRun, str | None]:
    """:func:`steps_of` over a stored state document."""
    return steps_of(graph, run_from_json(state), events, encoder)


def steps_of(
    graph: WorkflowGraph, run: WorkflowRun, events: Sequence[Event], encoder: StateEncoder
) -> tuple[list[tuple[Step, bool]], WorkflowRun, str | None]:
    """``events`` applied in turn to a run: per event its step and whether it changed the run;
    the run after the last, and its state document encoded by ``encoder`` (None when nothing
    changed)."""
    steps = []
    changed = False
    for event in events:
        step = apply(graph, run, event)
        moved = step.applied and step.run is not None and step.run is not run
        steps.append((step, moved))
        if moved:
            assert step.run is not None
            run, changed = step.run, True
    return steps, run, encoder.encode(run) if changed else None


def new_attempts(commands: Sequence[Command]) -> list[NewNodeRun]:
    out = []
    for c in commands:
        if isinstance(c, StartJob):
            out.append(NewNodeRun(c.node, -1 if c.item is None else c.item, c.attempt, c.job_id, c.params,
                                  c.timeout_s))
        elif isinstance(c, StartSubworkflow):  # job 0: the attempt runs a workflow, not a job
            out.append(NewNodeRun(c.node, -1, c.attempt, 0, None, c.timeout_s, workflow_id=c.workflow_id))
    return out


def finished(
    attempt: NodeRunRecord,
    trigger_code: int,
    trigger_msg: str | None,
    handle_code: int,
    handle_msg: str | None,
    now_ms: int,
) -> NodeFinished:
    """The engine event of an attempt whose job run ended (or failed to trigger)."""
    if handle_code == 0 and trigger_code not in (0, HandleCode.SUCCESS):
        outcome, message = Outcome.FAILED, f"trigger failed: {trigger_msg or ''}".strip()
    elif handle_code == HandleCode.SUCCESS:
        outcome, message = Outcome.SUCCESS, handle_msg or ""
    else:
        outcome = Outcome.KILLED if killed_by_user(handle_msg) else Outcome.FAILED
        message = handle_msg or f"handle code {handle_code}"
    added = _additions(attempt.context_added) if outcome is Outcome.SUCCESS else None
    return NodeFinished(attempt.node_key, attempt.attempt, outcome, now_ms, item_of(attempt.item),
                        run_id=attempt.log_id, message=message, context=added)


def unconfirmed(entry: LogEntry) -> bool:
    """Recorded, and neither a dispatch answer nor a result written."""
    return entry.trigger_code == 0 and entry.dispatch_time is None and entry.handle_code == 0


def _additions(text: str | None) -> dict[str, JsonValue] | None:
    """The handler's context additions stored with its result (merged, and checked, by the
    engine exactly as ``result_json`` additions are)."""
    if text is None:
        return None
    value = orjson.loads(text)
    return value if isinstance(value, dict) else None


def item_of(item: int) -> int | None:
    return None if item < 0 else item


def naive_utc(ms: int) -> datetime:
    return datetime.fromtimestamp(ms // 1000, tz=UTC).replace(tzinfo=None)
