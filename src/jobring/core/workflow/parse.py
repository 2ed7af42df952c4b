"""From the API's JSON to a checked :class:`WorkflowGraph`, refusing with the offending node named.

Shape (``POST /api/v1/workflows``; other top-level keys such as ``name`` belong to the caller)::

    {"nodes": [{"key": "extract", "job_id": 12, "params": "--day={{ day }}", "retries": 2},
               {"key": "route", "kind": "decision"},
               {"key": "big", "kind": "fanout", "job_id": 13, "items": "files", "parallelism": 4},
               {"key": "small", "job_id": 14, "join": "any_success", "on_failure": "continue"},
               {"key": "child", "kind": "subworkflow", "workflow_id": 7}],
     "edges": [{"from": "extract", "to": "route"},
               {"from": "route", "to": "big", "when": "rows > 1000"},
               {"from": "route", "to": "small", "else": true}, ...]}

Checks, each an error naming the field (``nodes[2].parallelism``) and the node: field types and
ranges, unknown fields, fields that do not belong to the node's kind, duplicate keys, edges to
unknown keys, duplicate edges, conditions on edges out of non-decision nodes, decision nodes
without edges or with an edge that has no condition, expression and template syntax, cycles
(the cycle's nodes listed), and nodes not connected to the rest (unreachable). Every check is
linear in nodes + edges.
"""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Mapping
from typing import TypeVar

from jobring.core.expression import Expression, ExpressionError, parse_expression
from jobring.core.templating import Template, parse_template
from jobring.core.workflow.model import (
    MAX_EDGES,
    MAX_FANOUT_ITEMS,
    MAX_NODES,
    MAX_PARALLELISM,
    MAX_RETRIES,
    MAX_RUN_ITEMS,
    PARAMS_MAX_CHARS,
    Edge,
    FailureRule,
    Join,
    Node,
    NodeKind,
    WorkflowGraph,
    WorkflowInvalid,
)

__all__ = ["MAX_TIMEOUT_S", "parse_workflow"]

MAX_TIMEOUT_S = 30 * 86_400
_KEY = re.compile(r"[A-Za-z0-9_-]{1,64}")
_MAX_ID = 2**63 - 1
_COMMON = frozenset({"key", "kind", "join", "on_failure"})
_ALLOWED = {
    NodeKind.JOB: _COMMON | {"job_id", "params", "timeout_s", "retries", "result_json"},
    NodeKind.FANOUT: _COMMON | {"job_id", "params", "timeout_s", "retries", "result_json", "items",
                                "parallelism"},
    NodeKind.SUBWORKFLOW: _COMMON | {"workflow_id", "timeout_s", "retries"},
    NodeKind.DECISION: _COMMON,
}
_REQUIRED = {
    NodeKind.JOB: ("job_id",),
    NodeKind.FANOUT: ("job_id", "items", "parallelism"),
    NodeKind.SUBWORKFLOW: ("workflow_id",),
    NodeKind.DECISION: (),
}
_EDGE_FIELDS = frozenset({"from", "to", "when", "else"})
_Choice = TypeVar("_Choice", Join, FailureRule)
_KINDS: dict[str, NodeKind] = {kind.value: kind for kind in NodeKind}
_JOINS: dict[str, Join] = {join.value: join for join in Join}
_RULES: dict[str, FailureRule] = {rule.value: rule for rule in FailureRule}


class _Fields:
    """Typed reads of one JSON object, each error naming ``prefix.name`` and the node."""

    def __init__(self, doc: Mapping[str, object], prefix: str, node: str | None) -> None:
        self.doc, self.prefix, self.node = doc, prefix, node

    def invalid(self, name: str, message: str) -> WorkflowInvalid:
        return WorkflowInvalid(f"{self.prefix}.{name}" if name else self.prefix, self.node, message)

    def integer(self, name: str, low: int, high: int) -> int | None:
        value = self.doc.get(name)
        if value is None:
            return None
        if type(value) is not int or not low <= value <= high:
            raise self.invalid(name, f"must be a whole number from {low} to {high}")
        return value

    def text(self, name: str) -> str | None:
        value = self.doc.get(name)
        if value is not None and type(value) is not str:
            raise self.invalid(name, "must be a string")
        return value

    def flag(self, name: str) -> bool:
        value = self.doc.get(name, False)
        if type(value) is not bool:
            raise self.invalid(name, "must be true or false")
        return value

    def choice(self, name: str, table: Mapping[str, _Choice], default: _Choice) -> _Choice:
        value = self.doc.get(name)
        if value is None:
            return default
        if type(value) is not str or value not in table:
            raise self.invalid(name, f"must be one of {', '.join(table)}")
        return table[value]


def _object(value: object, field: str) -> Mapping[str, object]:
    if not isinstance(value, Mapping) or not all(isinstance(k, str) for k in value):
        raise WorkflowInvalid(field, None, "must be an object")
    return value


def _node_kind(doc: Mapping[str, object], field: str, key: str) -> NodeKind:
    kind = doc.get("kind", "job")
    if type(kind) is not str or kind not in _KINDS:
        raise WorkflowInvalid(f"{field}.kind", key, f"must be one of {', '.join(_KINDS)}")
    return _KINDS[kind]


def _parse_node(value: object, index: int) -> Node:
    field = f"nodes[{index}]"
    doc = _object(value, field)
    key = doc.get("key")
    if type(key) is not str or _KEY.fullmatch(key) is None:
        raise WorkflowInvalid(f"{field}.key", None, "must be 1-64 characters of A-Z a-z 0-9 _ -")
    kind = _node_kind(doc, field, key)
    fields = _Fields(doc, field, key)
    for name in doc:
        if name not in _ALLOWED[kind]:
            known = any(name in allowed for allowed in _ALLOWED.values())
            raise fields.invalid(name, f"not a field of a {kind.value} node" if known else "unknown field")
    for name in _REQUIRED[kind]:
        if doc.get(name) is None:
            raise fields.invalid(name, f"required for a {kind.value} node")
    on_failure = fields.choice("on_failure", _RULES, FailureRule.STOP)
    if kind is NodeKind.DECISION and on_failure is FailureRule.CONTINUE:
        raise fields.invalid("on_failure", "a decision node cannot continue as if it succeeded (no branch "
                             "would be chosen); use stop or skip_descendants")
    return Node(
        key=key, kind=kind, index=index,
        job_id=fields.integer("job_id", 1, _MAX_ID),
        workflow_id=fields.integer("workflow_id", 1, _MAX_ID),
        params=_params(fields),
        timeout_s=fields.integer("timeout_s", 0, MAX_TIMEOUT_S),
        retries=fields.integer("retries", 0, MAX_RETRIES),
        join=fields.choice("join", _JOINS, Join.ALL_SUCCESS),
        on_failure=on_failure,
        result_json=fields.flag("result_json"),
        items=_items(fields),
        parallelism=fields.integer("parallelism", 1, MAX_PARALLELISM),
    )


def _params(fields: _Fields) -> Template | None:
    source = fields.text("params")
    if source is None:
        return None
    try:
        template = parse_template(source)
    except ExpressionError as exc:
        raise fields.invalid("params", str(exc)) from None
    if template.is_constant and len(source) > PARAMS_MAX_CHARS:
        raise fields.invalid("params", f"longer than {PARAMS_MAX_CHARS} characters")
    return template


def _items(fields: _Fields) -> Expression | None:
    source = fields.text("items")
    if source is None:
        return None
    try:
        return parse_expression(source)
    except ExpressionError as exc:
        raise fields.invalid("items", str(exc)) from None


def _parse_edge(value: object, index: int, nodes: Mapping[str, Node]) -> Edge:
    field = f"edges[{index}]"
    doc = _object(value, field)
    source, target = doc.get("from"), doc.get("to")
    fields = _Fields(doc, field, source if isinstance(source, str) else None)
    for name in doc:
        if name not in _EDGE_FIELDS:
            raise fields.invalid(name, "unknown field")
    for name, key in (("from", source), ("to", target)):
        if type(key) is not str:
            raise fields.invalid(name, "must be a node key")
        if key not in nodes:
            raise WorkflowInvalid(f"{field}.{name}", key, f"no node has the key {key!r}")
    assert isinstance(source, str) and isinstance(target, str)
    when_source = fields.text("when")
    otherwise = fields.flag("else")
    from_decision = nodes[source].kind is NodeKind.DECISION
    if not from_decision and (when_source is not None or otherwise):
        raise fields.invalid("when" if when_source is not None else "else",
                             "only edges out of a decision node have conditions")
    if from_decision and when_source is None and not otherwise:
        raise fields.invalid("when", "an edge out of a decision node needs a condition ('when') "
                             "or 'else': true")
    if when_source is not None and otherwise:
        raise fields.invalid("else", "an edge has a condition ('when') or 'else': true, not both")
    try:
        when = parse_expression(when_source) if when_source is not None else None
    except ExpressionError as exc:
        raise fields.invalid("when", str(exc)) from None
    return Edge(source=source, target=target, index=index, when=when, otherwise=otherwise)


def _list(doc: Mapping[str, object], name: str, limit: int, required: bool) -> list[object]:
    value = doc.get(name)
    if value is None and not required:
        return []
    if not isinstance(value, list) or (required and not value):
        raise WorkflowInvalid(name, None, "must be a non-empty list" if required else "must be a list")
    if len(value) > limit:
        raise WorkflowInvalid(name, None, f"at most {limit} allowed, got {len(value)}")
    return value


def _check_decisions(nodes: Mapping[str, Node], children: Mapping[str, list[Edge]]) -> None:
    for node in nodes.values():
        if node.kind is not NodeKind.DECISION:
            continue
        out = children[node.key]
        if not out:
            raise WorkflowInvalid(node.field, node.key,
                                  "a decision node needs outgoing edges with conditions")
        elses = [edge for edge in out if edge.otherwise]
        if len(elses) > 1:
            raise WorkflowInvalid(f"{elses[1].field}.else", node.key,
                                  "a decision node has at most one else edge")


def _topological_order(nodes: Mapping[str, Node], edges: list[Edge],
                       children: Mapping[str, list[Edge]]) -> list[str]:
    indegree = dict.fromkeys(nodes, 0)
    for edge in edges:
        indegree[edge.target] += 1
    ready = deque(key for key, count in indegree.items() if count == 0)
    order: list[str] = []
    while ready:
        key = ready.popleft()
        order.append(key)
        for edge in children[key]:
            indegree[edge.target] -= 1
            if indegree[edge.target] == 0:
                ready.append(edge.target)
    if len(order) < len(nodes):
        _raise_cycle(indegree, edges)
    return order


def _raise_cycle(indegree: Mapping[str, int], edges: list[Edge]) -> None:
    # Every node left with parents has a parent that is also left: walking back from one of
    # them must revisit a node, and the walk between the two visits is a cycle.
    back: dict[str, Edge] = {}
    for edge in edges:
        if indegree[edge.source] > 0 and indegree[edge.target] > 0:
            back.setdefault(edge.target, edge)
    start = next(key for key, count in indegree.items() if count > 0)
    seen: dict[str, int] = {}
    walk: list[str] = []
    key = start
    while key not in seen:
        seen[key] = len(walk)
        walk.append(key)
        key = back[key].source
    cycle = list(reversed(walk[seen[key]:]))
    closing = back[cycle[0]]
    path = " -> ".join([*cycle, cycle[0]])
    raise WorkflowInvalid(closing.field, cycle[0], f"cycle: {path}")


def _check_connected(nodes: Mapping[str, Node], edges: list[Edge]) -> None:
    neighbours: dict[str, list[str]] = {key: [] for key in nodes}
    for edge in edges:
        neighbours[edge.source].append(edge.target)
        neighbours[edge.target].append(edge.source)
    first = next(iter(nodes))
    seen = {first}
    stack = [first]
    while stack:
        for other in neighbours[stack.pop()]:
            if other not in seen:
                seen.add(other)
                stack.append(other)
    for node in nodes.values():
        if node.key not in seen:
            raise WorkflowInvalid(node.field, node.key, f"unreachable: not connected to {first!r} and the "
                                  "rest of the workflow (add an edge, or make it a workflow of its own)")


def parse_workflow(doc: object) -> WorkflowGraph:
    """The checked graph of ``doc`` (the API's JSON); :class:`WorkflowInvalid` on the first problem."""
    top = _object(doc, "workflow")
    nodes: dict[str, Node] = {}
    for index, value in enumerate(_list(top, "nodes", MAX_NODES, required=True)):
        node = _parse_node(value, index)
        if node.key in nodes:
            raise WorkflowInvalid(f"{node.field}.key", node.key, "duplicate key")
        nodes[node.key] = node
    edges: list[Edge] = []
    children: dict[str, list[Edge]] = {key: [] for key in nodes}
    parents: dict[str, list[str]] = {key: [] for key in nodes}
    seen_pairs: set[tuple[str, str]] = set()
    for index, value in enumerate(_list(top, "edges", MAX_EDGES, required=False)):
        edge = _parse_edge(value, index, nodes)
        if (edge.source, edge.target) in seen_pairs:
            raise WorkflowInvalid(edge.field, edge.source, f"duplicate edge {edge.source} -> {edge.target}")
        seen_pairs.add((edge.source, edge.target))
        edges.append(edge)
        children[edge.source].append(edge)
        parents[edge.target].append(edge.source)
    _check_decisions(nodes, children)
    order = _topological_order(nodes, edges, children)
    _check_connected(nodes, edges)
    return WorkflowGraph(
        nodes=nodes, edges=tuple(edges),
        parents={key: tuple(value) for key, value in parents.items()},
        children={key: tuple(value) for key, value in children.items()},
        order=tuple(order), position={key: i for i, key in enumerate(order)},
        fanouts=frozenset(key for key, node in nodes.items() if node.kind is NodeKind.FANOUT),
    )


def check_run_budget(graph: WorkflowGraph) -> None:
    """Refuse (:class:`WorkflowInvalid`, naming the first fan-out node over the budget) a graph
    whose fan-out nodes together could hold more than :data:`MAX_RUN_ITEMS` items in one run.

    Saving checks this; :func:`parse_workflow` does not, so that versions stored before the
    budget still load (their runs are held to it item by item: a fan-out that would go over
    fails)."""
    budget = 0
    for node in graph.nodes.values():
        if node.kind is NodeKind.FANOUT:
            budget += MAX_FANOUT_ITEMS
            if budget > MAX_RUN_ITEMS:
                raise WorkflowInvalid(
                    f"{node.field}.kind", node.key,
                    f"at most {MAX_RUN_ITEMS // MAX_FANOUT_ITEMS} fan-out nodes per workflow: each may "
                    f"fan out over {MAX_FANOUT_ITEMS} items and a run holds at most {MAX_RUN_ITEMS}")
