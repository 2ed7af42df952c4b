"""Parsing and checking a workflow's graph: every refusal names the field and the node."""

from __future__ import annotations

import contextlib
import copy
from itertools import pairwise
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jobring.core.workflow import FailureRule, Join, NodeKind, WorkflowInvalid, parse_workflow
from jobring.core.workflow.model import MAX_EDGES, MAX_NODES, MAX_PARALLELISM

VALID: dict[str, Any] = {
    "name": "nightly",
    "nodes": [
        {"key": "extract", "job_id": 12, "params": "--day={{ day }}", "retries": 2, "timeout_s": 60,
         "result_json": True},
        {"key": "route", "kind": "decision"},
        {"key": "big", "kind": "fanout", "job_id": 13, "items": "files", "parallelism": 4,
         "on_failure": "skip_descendants"},
        {"key": "small", "job_id": 14, "on_failure": "continue"},
        {"key": "child", "kind": "subworkflow", "workflow_id": 7, "join": "any_success"},
        {"key": "cleanup", "job_id": 15, "join": "all_done"},
    ],
    "edges": [
        {"from": "extract", "to": "route"},
        {"from": "route", "to": "big", "when": "rows > 1000"},
        {"from": "route", "to": "small", "else": True},
        {"from": "big", "to": "child"},
        {"from": "small", "to": "child"},
        {"from": "child", "to": "cleanup"},
    ],
}


def test_a_valid_graph() -> None:
    graph = parse_workflow(VALID)
    assert list(graph.nodes) == ["extract", "route", "big", "small", "child", "cleanup"]
    assert graph.order == ("extract", "route", "big", "small", "child", "cleanup")
    extract, route, big = graph.nodes["extract"], graph.nodes["route"], graph.nodes["big"]
    assert (extract.kind, extract.job_id, extract.retries, extract.timeout_s) == (NodeKind.JOB, 12, 2, 60)
    assert extract.params is not None and extract.params.variables == {"day"}
    assert extract.result_json and extract.join is Join.ALL_SUCCESS and extract.on_failure is FailureRule.STOP
    assert route.kind is NodeKind.DECISION
    assert big.items is not None and big.parallelism == 4 and big.on_failure is FailureRule.SKIP_DESCENDANTS
    assert graph.nodes["child"].workflow_id == 7 and graph.nodes["child"].join is Join.ANY_SUCCESS
    assert graph.parents["child"] == ("big", "small")
    assert [e.target for e in graph.children["route"]] == ["big", "small"]
    assert graph.children["route"][1].otherwise
    assert graph.descendants("route") == {"big", "small", "child", "cleanup"}
    assert graph.descendants("cleanup") == set()


def test_to_json_round_trips() -> None:
    graph = parse_workflow(VALID)
    stored = graph.to_json()
    assert "name" not in stored
    assert stored["nodes"][0] == VALID["nodes"][0]
    again = parse_workflow(stored)
    assert again.to_json() == stored
    assert again.order == graph.order


def test_edges_are_optional_for_a_single_node() -> None:
    graph = parse_workflow({"nodes": [{"key": "only", "job_id": 1}]})
    assert graph.order == ("only",) and graph.edges == ()


def changed(path: str, value: Any) -> dict[str, Any]:
    """VALID with ``path`` (``nodes.2.items``; value ``...`` deletes) changed."""
    doc = copy.deepcopy(VALID)
    *parts, last = path.split(".")
    target: Any = doc
    for part in parts:
        target = target[int(part)] if part.isdigit() else target[part]
    if value is ...:
        del target[int(last) if last.isdigit() else last]
    elif last.isdigit():
        target[int(last)] = value
    else:
        target[last] = value
    return doc


REFUSALS: list[tuple[dict[str, Any] | Any, str, str | None, str]] = [
    ("not an object", "workflow", None, "must be an object"),
    ({"nodes": []}, "nodes", None, "non-empty list"),
    ({"nodes": "x"}, "nodes", None, "non-empty list"),
    (changed("edges", {}), "edges", None, "must be a list"),
    (changed("nodes.0", "x"), "nodes[0]", None, "must be an object"),
    (changed("nodes.0.key", "bad key!"), "nodes[0].key", None, "1-64 characters"),
    (changed("nodes.0.key", 5), "nodes[0].key", None, "1-64 characters"),
    (changed("nodes.1.key", "extract"), "nodes[1].key", "extract", "duplicate key"),
    (changed("nodes.0.kind", "lambda"), "nodes[0].kind", "extract", "must be one of job, decision"),
    (changed("nodes.0.job_id", ...), "nodes[0].job_id", "extract", "required for a job node"),
    (changed("nodes.0.job_id", "12"), "nodes[0].job_id", "extract", "whole number"),
    (changed("nodes.0.job_id", True), "nodes[0].job_id", "extract", "whole number"),
    (changed("nodes.0.job_id", 0), "nodes[0].job_id", "extract", "whole number from 1"),
    (changed("nodes.0.retries", 99), "nodes[0].retries", "extract", "from 0 to 20"),
    (changed("nodes.0.timeout_s", -1), "nodes[0].timeout_s", "extract", "from 0 to"),
    (changed("nodes.0.retires", 1), "nodes[0].retires", "extract", "unknown field"),
    (changed("nodes.0.items", "x"), "nodes[0].items", "extract", "not a field of a job node"),
    (changed("nodes.0.result_json", "yes"), "nodes[0].result_json", "extract", "true or false"),
    (changed("nodes.0.params", 5), "nodes[0].params", "extract", "must be a string"),
    (changed("nodes.0.params", "{{ day"), "nodes[0].params", "extract", "column 1: '{{' without its '}}'"),
    (changed("nodes.0.params", "x" * 513), "nodes[0].params", "extract", "longer than 512"),
    (changed("nodes.0.join", "some"), "nodes[0].join", "extract", "all_success, any_success, all_done"),
    (changed("nodes.0.join", ["all_done"]), "nodes[0].join", "extract", "must be one of"),
    (changed("nodes.0.on_failure", {}), "nodes[0].on_failure", "extract", "must be one of"),
    (changed("nodes.0.kind", ["job"]), "nodes[0].kind", "extract", "must be one of"),
    (changed("nodes.0.on_failure", "retry"), "nodes[0].on_failure", "extract", "stop, skip_descendants"),
    (changed("nodes.1.job_id", 3), "nodes[1].job_id", "route", "not a field of a decision node"),
    (changed("nodes.1.on_failure", "continue"), "nodes[1].on_failure", "route", "cannot continue"),
    (changed("nodes.2.items", ...), "nodes[2].items", "big", "required for a fanout node"),
    (changed("nodes.2.parallelism", ...), "nodes[2].parallelism", "big", "required for a fanout node"),
    (changed("nodes.2.parallelism", 0), "nodes[2].parallelism", "big", f"from 1 to {MAX_PARALLELISM}"),
    (changed("nodes.2.items", "files["), "nodes[2].items", "big", "expected a value"),
    (changed("nodes.4.workflow_id", ...), "nodes[4].workflow_id", "child", "required for a subworkflow"),
    (changed("nodes.4.params", "x"), "nodes[4].params", "child", "not a field of a subworkflow node"),
    (changed("edges.0.to", "nowhere"), "edges[0].to", "nowhere", "no node has the key 'nowhere'"),
    (changed("edges.0.from", "ghost"), "edges[0].from", "ghost", "no node has the key 'ghost'"),
    (changed("edges.0.from", 1), "edges[0].from", None, "must be a node key"),
    (changed("edges.0.label", "x"), "edges[0].label", "extract", "unknown field"),
    (changed("edges.0.when", "true"), "edges[0].when", "extract", "only edges out of a decision node"),
    (changed("edges.3.else", True), "edges[3].else", "big", "only edges out of a decision node"),
    (changed("edges.1.when", ...), "edges[1].when", "route", "needs a condition"),
    (changed("edges.1.when", "rows >"), "edges[1].when", "route", "column 7: expected a value"),
    (changed("edges.2.when", "rows < 5"), "edges[2].else", "route", "not both"),
    (changed("edges.1", {"from": "route", "to": "big", "else": True}), "edges[2].else", "route",
     "at most one else edge"),
    (changed("edges.5", {"from": "small", "to": "child"}), "edges[5]", "small",
     "duplicate edge small -> child"),
]


@pytest.mark.parametrize(("doc", "field", "node", "message"), REFUSALS,
                         ids=[f"{r[1]}:{r[3][:30]}" for r in REFUSALS])
def test_refusals_name_field_and_node(doc: Any, field: str, node: str | None, message: str) -> None:
    with pytest.raises(WorkflowInvalid) as caught:
        parse_workflow(doc)
    assert (caught.value.field, caught.value.node) == (field, node)
    assert message in caught.value.message


def test_a_decision_without_edges_is_refused() -> None:
    doc = {"nodes": [{"key": "a", "job_id": 1}, {"key": "d", "kind": "decision"}],
           "edges": [{"from": "a", "to": "d"}]}
    with pytest.raises(WorkflowInvalid) as caught:
        parse_workflow(doc)
    assert (caught.value.field, caught.value.node) == ("nodes[1]", "d")


def test_cycles_are_named() -> None:
    doc = {"nodes": [{"key": k, "job_id": 1} for k in ("a", "b", "c", "d")],
           "edges": [{"from": "a", "to": "b"}, {"from": "b", "to": "c"}, {"from": "c", "to": "d"},
                     {"from": "d", "to": "b"}]}
    with pytest.raises(WorkflowInvalid) as caught:
        parse_workflow(doc)
    message = caught.value.message
    assert message.startswith("cycle: ")
    cycle = message.removeprefix("cycle: ").split(" -> ")
    assert cycle[0] == cycle[-1] and set(cycle) == {"b", "c", "d"}
    assert caught.value.node == cycle[0]
    assert caught.value.field.startswith("edges[")


def test_a_self_loop_is_a_cycle() -> None:
    doc = {"nodes": [{"key": "a", "job_id": 1}], "edges": [{"from": "a", "to": "a"}]}
    with pytest.raises(WorkflowInvalid, match=r"cycle: a -> a") as caught:
        parse_workflow(doc)
    assert caught.value.node == "a"


def test_unreachable_nodes_are_named() -> None:
    doc = {"nodes": [{"key": "a", "job_id": 1}, {"key": "b", "job_id": 1}, {"key": "lonely", "job_id": 1}],
           "edges": [{"from": "a", "to": "b"}]}
    with pytest.raises(WorkflowInvalid, match="unreachable") as caught:
        parse_workflow(doc)
    assert (caught.value.field, caught.value.node) == ("nodes[2]", "lonely")


def test_size_limits() -> None:
    many = {"nodes": [{"key": f"n{i}", "job_id": 1} for i in range(MAX_NODES + 1)]}
    with pytest.raises(WorkflowInvalid, match=f"at most {MAX_NODES}"):
        parse_workflow(many)
    edges = [{"from": "a", "to": "b"}] * (MAX_EDGES + 1)
    with pytest.raises(WorkflowInvalid, match=f"at most {MAX_EDGES}"):
        parse_workflow({"nodes": [{"key": "a", "job_id": 1}, {"key": "b", "job_id": 1}], "edges": edges})


def test_the_largest_wide_and_deep_graphs_parse() -> None:
    keys = [f"n{i}" for i in range(MAX_NODES)]
    nodes = [{"key": k, "job_id": 1} for k in keys]
    deep = parse_workflow({"nodes": nodes, "edges": [{"from": a, "to": b} for a, b in pairwise(keys)]})
    assert deep.order == tuple(keys)
    middle = keys[1:-1]
    wide_edges = [{"from": keys[0], "to": m} for m in middle] + [{"from": m, "to": keys[-1]} for m in middle]
    wide = parse_workflow({"nodes": nodes, "edges": wide_edges})
    assert wide.order[0] == keys[0] and wide.order[-1] == keys[-1]
    assert len(wide.parents[keys[-1]]) == MAX_NODES - 2


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-3, 10**20) | st.floats() | st.text(max_size=6),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=6,
)
FIELDS = ["key", "kind", "job_id", "workflow_id", "params", "timeout_s", "retries", "join", "on_failure",
          "result_json", "items", "parallelism", "from", "to", "when", "else", "x"]


@settings(max_examples=150, deadline=None)
@given(st.sampled_from(["nodes", "edges"]), st.integers(0, 6), st.sampled_from(FIELDS), JSON_VALUES)
def test_any_json_is_parsed_or_refused_with_workflow_invalid(part: str, index: int, name: str,
                                                           value: Any) -> None:
    doc = copy.deepcopy(VALID)
    items = doc[part]
    if index < len(items):
        items[index][name] = value
    else:
        items.append(value)
    try:
        parse_workflow(doc)
    except WorkflowInvalid as exc:
        assert exc.field and exc.message


@settings(max_examples=100, deadline=None)
@given(JSON_VALUES)
def test_any_top_level_json_is_refused_cleanly(value: Any) -> None:
    with contextlib.suppress(WorkflowInvalid):  # anything else fails the test
        parse_workflow(value)
