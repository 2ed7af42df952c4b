"""A workflow's graph: node and edge specs, the compiled graph, the limits and the error type.

The graph is built only by :func:`jobring.core.workflow.parse.parse_workflow`, which checks
everything that can be checked without the store; what needs the store (jobs, groups, other
workflows) is :mod:`jobring.core.workflow.access`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum

from jobring.core.expression import Expression
from jobring.core.templating import Template
from jobring.errors import JobringError

__all__ = [
    "MAX_EDGES",
    "MAX_FANOUT_ITEMS",
    "MAX_NESTING",
    "MAX_NODES",
    "MAX_PARALLELISM",
    "MAX_RETRIES",
    "MAX_RUN_ITEMS",
    "PARAMS_MAX_CHARS",
    "Edge",
    "FailureRule",
    "Join",
    "Node",
    "NodeKind",
    "WorkflowGraph",
    "WorkflowInvalid",
]

MAX_NODES = 1_000
MAX_EDGES = 5_000
MAX_RETRIES = 20
MAX_PARALLELISM = 100
MAX_FANOUT_ITEMS = 1_000
MAX_RUN_ITEMS = 10_000
"""Fan-out items in one run, all fan-out nodes together: a run's whole state is one document
read, changed and written back per event, so its size bounds the cost of every event."""
MAX_NESTING = 5
"""Sub-workflows nest at most this deep below the workflow being saved."""
PARAMS_MAX_CHARS = 512
"""Rendered node params must fit the run log's ``executor_param`` column."""


class NodeKind(StrEnum):
    """``job`` runs a job; ``decision`` picks outgoing edges by their conditions; ``fanout`` runs
    a job once per item of a list; ``subworkflow`` runs another workflow."""

    JOB = "job"
    DECISION = "decision"
    FANOUT = "fanout"
    SUBWORKFLOW = "subworkflow"


class Join(StrEnum):
    """When a node with parents may start (see docs/workflows.md for skipped parents)."""

    ALL_SUCCESS = "all_success"
    ANY_SUCCESS = "any_success"
    ALL_DONE = "all_done"


class FailureRule(StrEnum):
    """What a node's final failure does: stop the workflow, skip the node's descendants (the
    rest goes on), or continue as if the node had succeeded."""

    STOP = "stop"
    SKIP_DESCENDANTS = "skip_descendants"
    CONTINUE = "continue"


class WorkflowInvalid(JobringError, ValueError):
    """A refused workflow: ``field`` is the JSON path (``nodes[3].join``, ``edges[0].when``),
    ``node`` the key of the offending node when there is one."""

    def __init__(self, field: str, node: str | None, message: str) -> None:
        where = f" (node {node!r})" if node is not None else ""
        super().__init__(f"{field}{where}: {message}")
        self.field = field
        self.node = node
        self.message = message


@dataclass(frozen=True, slots=True)
class Node:
    """One node. ``index`` is its position in the submitted ``nodes`` list. Overrides left None
    fall back to the job's own values (params, timeout, retry count)."""

    key: str
    kind: NodeKind
    index: int
    job_id: int | None = None
    workflow_id: int | None = None
    params: Template | None = None
    timeout_s: int | None = None
    retries: int | None = None
    join: Join = Join.ALL_SUCCESS
    on_failure: FailureRule = FailureRule.STOP
    result_json: bool = False
    items: Expression | None = None
    parallelism: int | None = None

    @property
    def field(self) -> str:
        return f"nodes[{self.index}]"


@dataclass(frozen=True, slots=True)
class Edge:
    """``source -> target``; out of a decision node exactly one of ``when`` (a condition) and
    ``otherwise`` (taken when no condition of that decision holds) is set."""

    source: str
    target: str
    index: int
    when: Expression | None = None
    otherwise: bool = False

    @property
    def field(self) -> str:
        return f"edges[{self.index}]"


@dataclass(frozen=True, slots=True)
class WorkflowGraph:
    """A checked graph: acyclic, connected, every edge between known nodes. ``order`` is a
    topological order; ``position`` maps a key to its place in it; ``fanouts`` are the fan-out
    nodes' keys."""

    nodes: Mapping[str, Node]
    edges: tuple[Edge, ...]
    parents: Mapping[str, tuple[str, ...]]
    children: Mapping[str, tuple[Edge, ...]]
    order: tuple[str, ...]
    position: Mapping[str, int] = field(repr=False)
    fanouts: frozenset[str] = field(repr=False)  # the fan-out nodes' keys

    def descendants(self, key: str) -> set[str]:
        """Every node reachable from ``key`` (not ``key`` itself)."""
        seen: set[str] = set()
        stack = [key]
        while stack:
            for edge in self.children[stack.pop()]:
                if edge.target not in seen:
                    seen.add(edge.target)
                    stack.append(edge.target)
        return seen

    def to_json(self) -> dict[str, object]:
        """The graph in the submitted JSON shape (defaults left out), for storing a version."""
        return {"nodes": [_node_json(n) for n in self.nodes.values()],
                "edges": [_edge_json(e) for e in self.edges]}


def _node_json(node: Node) -> dict[str, object]:
    doc: dict[str, object] = {"key": node.key}
    if node.kind is not NodeKind.JOB:
        doc["kind"] = node.kind.value
    optional: dict[str, object] = {
        "job_id": node.job_id, "workflow_id": node.workflow_id,
        "params": node.params.source if node.params else None, "timeout_s": node.timeout_s,
        "retries": node.retries, "items": node.items.source if node.items else None,
        "parallelism": node.parallelism,
    }
    doc.update({k: v for k, v in optional.items() if v is not None})
    if node.join is not Join.ALL_SUCCESS:
        doc["join"] = node.join.value
    if node.on_failure is not FailureRule.STOP:
        doc["on_failure"] = node.on_failure.value
    if node.result_json:
        doc["result_json"] = True
    return doc


def _edge_json(edge: Edge) -> dict[str, object]:
    doc: dict[str, object] = {"from": edge.source, "to": edge.target}
    if edge.when is not None:
        doc["when"] = edge.when.source
    if edge.otherwise:
        doc["else"] = True
    return doc
