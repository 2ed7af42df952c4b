"""A workflow run's state: what the engine reads and returns, stored as one JSON document.

The document (``run_to_json``) is compact: nodes still waiting with no history are left out,
node fields have short names and defaults are dropped. Node record keys: ``s`` status, ``a``
attempt, ``b`` attempts before the current repair round, ``r`` run id (a job run's log id, or a
sub-workflow's run id), ``t0``/``t1`` start/end (epoch ms), ``m`` message, ``k`` skip reason,
``mk`` marked succeeded by a user, ``tk`` a decision's taken edge targets, ``it`` fan-out items
(each a record with ``s a b r t0 t1 m``), ``iv`` the fan-out item values.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from jobring.core.expression import JsonValue

__all__ = [
    "MESSAGE_MAX_CHARS",
    "NodeRun",
    "NodeStatus",
    "RunStatus",
    "SkipReason",
    "Unit",
    "WorkflowRun",
    "clip_message",
    "node_to_json",
    "run_from_json",
    "run_head_json",
    "run_to_json",
]

MESSAGE_MAX_CHARS = 500
_FORMAT = 1


def clip_message(message: str) -> str:
    """A node message cut to :data:`MESSAGE_MAX_CHARS` (the state stays small)."""
    return message if len(message) <= MESSAGE_MAX_CHARS else message[: MESSAGE_MAX_CHARS - 1] + "…"


class RunStatus(StrEnum):
    """A workflow run's state."""

    RUNNING = "running"
    SUCCESS = "success"
    FAILED = "failed"
    STOPPED = "stopped"


class NodeStatus(StrEnum):
    """A node's (or a fan-out item's) state in a run."""

    WAITING = "waiting"
    RUNNING = "running"
    SUCCESS = "success"
    FAILED = "failed"
    SKIPPED = "skipped"
    STOPPED = "stopped"

    @property
    def is_final(self) -> bool:
        return self not in (NodeStatus.WAITING, NodeStatus.RUNNING)


class SkipReason(StrEnum):
    """``branch``: on a branch a decision did not take; ``upstream``: a parent failed."""

    BRANCH = "branch"
    UPSTREAM = "upstream"


# Unit and NodeRun are values: nothing mutates one, the engine makes changed copies
# (dataclasses.replace). They are not frozen only because a frozen dataclass is about five
# times slower to build, and a stored run with a 1,000-item fan-out builds 1,000 of them. The
# admin's state encoder relies on it: it keeps each record's encoded text by the record's
# identity, so a record changed in place would be stored as it was.
@dataclass(slots=True)
class Unit:
    """One runnable thing: a node, or one item of a fan-out node. ``attempt`` counts every
    attempt of the run (0: never started); ``base`` is the attempt count when the current repair
    round began, so retries are counted from it. Never mutated (see above)."""

    status: NodeStatus = NodeStatus.WAITING
    attempt: int = 0
    base: int = 0
    run_id: int | None = None
    started_ms: int | None = None
    ended_ms: int | None = None
    message: str = ""

    @property
    def duration_ms(self) -> int | None:
        if self.started_ms is None or self.ended_ms is None:
            return None
        return max(0, self.ended_ms - self.started_ms)


@dataclass(slots=True)
class NodeRun(Unit):
    """A node's record: a :class:`Unit` plus what only some kinds have."""

    skip: SkipReason | None = None
    marked: bool = False
    taken: tuple[str, ...] = ()
    items: tuple[Unit, ...] | None = None
    values: tuple[JsonValue, ...] | None = None


FRESH = NodeRun()


@dataclass(frozen=True, slots=True)
class WorkflowRun:
    """The whole state of one run. ``nodes`` holds only nodes with a history (see :meth:`node`);
    ``retries`` the inherited retry counts fixed at the start; ``round`` counts repairs."""

    status: RunStatus
    version: int
    started_ms: int
    context: Mapping[str, JsonValue] = field(default_factory=dict)
    nodes: Mapping[str, NodeRun] = field(default_factory=dict)
    retries: Mapping[str, int] = field(default_factory=dict)
    round: int = 0
    ended_ms: int | None = None
    message: str = ""

    def node(self, key: str) -> NodeRun:
        return self.nodes.get(key, FRESH)


# -- JSON ----------------------------------------------------------------------------------------

_STATUSES = {status.value: status for status in NodeStatus}


def _unit_json(unit: Unit) -> dict[str, Any]:
    # Written out field by field: this runs for every fan-out item on every stored step.
    doc: dict[str, Any] = {}
    if unit.status is not NodeStatus.WAITING:
        doc["s"] = unit.status.value
    if unit.attempt:
        doc["a"] = unit.attempt
    if unit.base:
        doc["b"] = unit.base
    if unit.run_id is not None:
        doc["r"] = unit.run_id
    if unit.started_ms is not None:
        doc["t0"] = unit.started_ms
    if unit.ended_ms is not None:
        doc["t1"] = unit.ended_ms
    if unit.message:
        doc["m"] = unit.message
    return doc


def node_to_json(node: NodeRun) -> dict[str, Any]:
    """One node record of :func:`run_to_json`'s ``nodes`` (a record equal to the fresh one is
    left out of them)."""
    doc = _unit_json(node)
    if node.skip is not None:
        doc["k"] = node.skip.value
    if node.marked:
        doc["mk"] = True
    if node.taken:
        doc["tk"] = list(node.taken)
    if node.items is not None:
        doc["it"] = [_unit_json(item) for item in node.items]
    if node.values is not None:
        doc["iv"] = list(node.values)
    return doc


def run_to_json(run: WorkflowRun) -> dict[str, Any]:
    """The run as a JSON-ready dict (store it; :func:`run_from_json` reads it back)."""
    doc = run_head_json(run)
    doc["nodes"] = {key: node_to_json(node) for key, node in run.nodes.items() if node != FRESH}
    return doc


def run_head_json(run: WorkflowRun) -> dict[str, Any]:
    """:func:`run_to_json` without its ``nodes``, which come last in it (an encoder that keeps
    each node's encoded text builds the document from this and them)."""
    return {
        "format": _FORMAT, "status": run.status.value, "version": run.version, "round": run.round,
        "started_ms": run.started_ms, "ended_ms": run.ended_ms, "message": run.message,
        "context": dict(run.context), "retries": dict(run.retries),
    }


def _int_or_none(value: object) -> int | None:
    if value is not None and type(value) is not int:
        raise ValueError(f"expected a whole number, got {value!r:.40}")
    return value


def _unit(doc: Mapping[str, Any]) -> Unit:
    get = doc.get
    return Unit(_STATUSES[get("s", "waiting")], _int_or_none(get("a", 0)) or 0,
                _int_or_none(get("b", 0)) or 0,
                _int_or_none(get("r")), _int_or_none(get("t0")), _int_or_none(get("t1")),
                str(get("m", "")))


def _node_from_json(doc: Mapping[str, Any]) -> NodeRun:
    items = doc.get("it")
    values = doc.get("iv")
    unit = _unit(doc)
    return NodeRun(
        unit.status, unit.attempt, unit.base, unit.run_id, unit.started_ms, unit.ended_ms, unit.message,
        skip=SkipReason(doc["k"]) if "k" in doc else None,
        marked=bool(doc.get("mk", False)),
        taken=tuple(str(t) for t in doc.get("tk", ())),
        items=tuple(_unit(item) for item in items) if items is not None else None,
        values=tuple(values) if values is not None else None,
    )


def run_from_json(doc: Mapping[str, Any]) -> WorkflowRun:
    """A run stored by :func:`run_to_json`; ValueError (or KeyError) when the document is not one."""
    if doc.get("format") != _FORMAT:
        raise ValueError(f"unknown workflow run format {doc.get('format')!r}")
    return WorkflowRun(
        status=RunStatus(doc["status"]), version=int(doc["version"]), round=int(doc["round"]),
        started_ms=int(doc["started_ms"]), ended_ms=_int_or_none(doc.get("ended_ms")),
        message=str(doc.get("message", "")), context=dict(doc.get("context", {})),
        retries={str(k): int(v) for k, v in doc.get("retries", {}).items()},
        nodes={str(key): _node_from_json(value) for key, value in doc.get("nodes", {}).items()},
    )
