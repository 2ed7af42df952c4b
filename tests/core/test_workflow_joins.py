"""A join's incoming signals read in one loop (``incoming_signals``) are those of its edges one by
one (``edge_signal``), for every kind of parent and every state a parent's record can be in."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from jobring.core.workflow import NodeRun, NodeStatus, SkipReason, parse_workflow
from jobring.core.workflow.joins import edge_signal, incoming_signals

PARENTS = ("p0", "p1", "p2")


@st.composite
def parent_setups(draw: st.DrawFn) -> tuple[dict[str, Any], dict[str, NodeRun]]:
    nodes: list[dict[str, Any]] = [{"key": "root", "job_id": 1}, {"key": "child", "job_id": 1}]
    edges: list[dict[str, Any]] = []
    records: dict[str, NodeRun] = {}
    for key in PARENTS:
        decision = draw(st.booleans())
        if decision:
            nodes.append({"key": key, "kind": "decision",
                          "on_failure": draw(st.sampled_from(["stop", "skip_descendants"]))})
            edges.append({"from": key, "to": "child", "when": "true"})
        else:
            nodes.append({"key": key, "job_id": 1,
                          "on_failure": draw(st.sampled_from(["stop", "skip_descendants", "continue"]))})
            edges.append({"from": key, "to": "child"})
        edges.append({"from": "root", "to": key})
        if draw(st.booleans()):  # absent: waiting, never started
            status = draw(st.sampled_from(list(NodeStatus)))
            records[key] = NodeRun(
                status, attempt=1,
                skip=draw(st.sampled_from(list(SkipReason))) if status is NodeStatus.SKIPPED else None,
                taken=("child",) if draw(st.booleans()) else ())
    return {"nodes": nodes, "edges": edges}, records


@settings(max_examples=300, deadline=None)
@given(parent_setups())
def test_the_signals_read_in_one_loop_are_each_edges_signal(
    setup: tuple[dict[str, Any], dict[str, NodeRun]],
) -> None:
    doc, records = setup
    graph = parse_workflow(doc)
    each = {edge_signal(graph.nodes[p], records.get(p, NodeRun()), "child") for p in graph.parents["child"]}
    assert incoming_signals(graph, records, "child") == each
