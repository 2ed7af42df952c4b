"""The state encoder: the stored document exactly, whatever changed between two encodes, and only
the changed node records encoded again."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jobring.admin.services import workflow_steps as steps_module
from jobring.admin.services.workflow_steps import StateEncoder
from jobring.admin.store.workflow_records import dumps
from jobring.core.workflow import (
    NodeDispatched,
    NodeFinished,
    NodeRun,
    NodeStatus,
    Outcome,
    RunStarted,
    RunStatus,
    SkipReason,
    Unit,
    WorkflowRun,
    parse_workflow,
    run_to_json,
)

KEYS = [f"n{i}" for i in range(6)]
small = st.integers(-(2**40), 2**40)

instants = st.none() | st.integers(0, 10**13)
units = st.builds(
    Unit, st.sampled_from(list(NodeStatus)), st.integers(0, 3), st.integers(0, 2),
    st.none() | st.integers(1, 10**12), instants, instants,
    st.sampled_from(["", "ok", "fail: \"quoted\" é"]))
records = st.builds(
    NodeRun, st.sampled_from(list(NodeStatus)), st.integers(0, 3), st.integers(0, 2),
    st.none() | st.integers(1, 10**6), instants, instants,
    st.sampled_from(["", "done", "ünïcode \n"]), skip=st.none() | st.sampled_from(list(SkipReason)),
    marked=st.booleans(), taken=st.lists(st.sampled_from(KEYS)).map(tuple),
    items=st.none() | st.lists(units, max_size=3).map(tuple),
    values=st.none() | st.lists(small | st.text(max_size=3), max_size=3).map(tuple),
) | st.just(NodeRun())  # a record with nothing in it: left out of the document

# Between two encodes each node keeps its record (the same object), gets a new one, or goes.
changes = st.lists(st.tuples(st.sampled_from(KEYS), st.none() | records), max_size=4)


@settings(max_examples=100, deadline=None)
@given(st.dictionaries(st.sampled_from(KEYS), records), st.lists(changes, min_size=1, max_size=5),
       st.dictionaries(st.text(max_size=3), small | st.text(max_size=3), max_size=2))
def test_every_encode_is_the_stored_document(
    first: dict[str, NodeRun], steps: list[list[tuple[str, NodeRun | None]]], context: dict[str, Any]
) -> None:
    encoder = StateEncoder()
    nodes = dict(first)
    for i, step in enumerate([[], *steps]):
        for key, record in step:
            if record is None:
                nodes.pop(key, None)
            else:
                nodes[key] = record
        run = WorkflowRun(RunStatus.RUNNING, 2, 1_000 + i, context=context, nodes=dict(nodes), round=i,
                          message=f"round {i}")
        assert encoder.encode(run) == dumps(run_to_json(run))


def test_a_step_encodes_only_the_records_it_changed(monkeypatch: pytest.MonkeyPatch) -> None:
    keys = [f"w{i}" for i in range(50)]
    graph = parse_workflow({
        "nodes": [{"key": k, "job_id": 1} for k in keys],
        "edges": [{"from": keys[0], "to": k} for k in keys[1:-1]]
        + [{"from": k, "to": keys[-1]} for k in keys[1:-1]]})
    encoded: list[str] = []
    real = steps_module.node_to_json

    def counted(node: NodeRun) -> dict[str, Any]:
        encoded.append(node.status.value)
        return real(node)

    monkeypatch.setattr(steps_module, "node_to_json", counted)
    encoder = StateEncoder()
    step, _ = steps_module.first_step(graph, RunStarted(1_000, 1), encoder)
    assert step.run is not None and encoded == ["running"]
    events = [NodeDispatched(keys[0], 1, 1, 1_001), NodeFinished(keys[0], 1, Outcome.SUCCESS, 1_002)]
    _, run, _ = steps_module.steps_of(graph, step.run, events, encoder)
    assert len(encoded) == 1 + 49  # the root again, and the 48 middle nodes it started
    middle = [NodeFinished(k, 1, Outcome.SUCCESS, 1_003) for k in keys[1:-1]]
    _, run, _ = steps_module.steps_of(graph, run, middle[:-1], encoder)
    encoded.clear()
    _, run, text = steps_module.steps_of(graph, run, middle[-1:], encoder)
    assert encoded == ["success", "running"]  # the last parent, and the sink it started
    assert text == dumps(run_to_json(run))


def test_a_new_encoder_encodes_every_record() -> None:
    run = WorkflowRun(RunStatus.RUNNING, 1, 0, nodes={"a": NodeRun(NodeStatus.RUNNING, 1)})
    kept = StateEncoder()
    assert kept.encode(run) == StateEncoder().encode(run)
    changed = replace(run, nodes={"a": NodeRun(NodeStatus.SUCCESS, 1)})
    assert kept.encode(changed) == StateEncoder().encode(changed) == dumps(run_to_json(changed))
