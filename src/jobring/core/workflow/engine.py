"""The workflow run engine: a pure reducer ``(graph, run, event) -> (run', commands)``.

:func:`apply` is the only entry point. It never reads a clock (events carry their instant) and
never performs I/O: the integrator stores the returned run and carries out the commands (see
:mod:`jobring.core.workflow.events` for the exactly-once contract). Applying an event that does
not fit the run (a duplicate, a late result of a superseded attempt, a refused repair) returns
the same run, no command, and a note saying why.
"""

from __future__ import annotations

from dataclasses import replace

from jobring.core.workflow.context import ContextError, merge_context, parse_result_message
from jobring.core.workflow.events import (
    Event,
    KillJob,
    NodeDispatched,
    NodeFinished,
    NodeTimedOut,
    Outcome,
    RunStarted,
    Step,
    StopSubworkflow,
)
from jobring.core.workflow.model import Node, NodeKind, WorkflowGraph
from jobring.core.workflow.repair import apply_repair
from jobring.core.workflow.state import NodeRun, NodeStatus, RunStatus, Unit, WorkflowRun, clip_message
from jobring.core.workflow.transition import Transition

__all__ = ["apply"]

NodeEvent = NodeDispatched | NodeFinished | NodeTimedOut


def apply(graph: WorkflowGraph, run: WorkflowRun | None, event: Event) -> Step:
    """The step ``event`` makes from ``run`` (None before the run starts) on ``graph``, the
    graph of the version the run started with."""
    if isinstance(event, RunStarted):
        return _start(graph, run, event)
    if run is None:
        return Step(None, (), "the run has not started")
    if isinstance(event, NodeDispatched | NodeFinished | NodeTimedOut):
        return _node_event(graph, run, event)
    return apply_repair(graph, run, event)


def _start(graph: WorkflowGraph, run: WorkflowRun | None, event: RunStarted) -> Step:
    if run is not None:
        return Step(run, (), "the run has already started")
    try:
        context = merge_context({}, event.params)
    except ContextError as exc:
        return Step(None, (), f"params: {exc}")
    run = WorkflowRun(status=RunStatus.RUNNING, version=event.version, started_ms=event.at_ms,
                      context=context, retries=dict(event.retries))
    tx = Transition(graph, run, event.at_ms)
    tx.changed = True
    for key in graph.order:
        if not graph.parents[key]:
            tx.enqueue(key)
    tx.settle()
    return tx.step()


def _unit_of(node: Node, tx: Transition, item: int | None) -> Unit | str:
    record = tx.node(node.key)
    if node.kind is NodeKind.FANOUT:
        if item is None:
            return f"node {node.key!r} is a fan-out: events name an item"
        if record.items is None or not 0 <= item < len(record.items):
            return f"node {node.key!r} has no item {item}"
        return record.items[item]
    if item is not None:
        return f"node {node.key!r} is not a fan-out: events name no item"
    return record


def _put_unit(tx: Transition, node: Node, item: int | None, unit: Unit) -> None:
    if item is None:
        assert isinstance(unit, NodeRun)
        tx.put(node.key, unit)
    else:
        tx.put_item(node.key, item, unit)


def _node_event(graph: WorkflowGraph, run: WorkflowRun, event: NodeEvent) -> Step:
    node = graph.nodes.get(event.node)
    if node is None:
        return Step(run, (), f"no node {event.node!r} in this workflow")
    tx = Transition(graph, run, event.at_ms)
    unit = _unit_of(node, tx, event.item)
    if isinstance(unit, str):
        return Step(run, (), unit)
    if unit.attempt != event.attempt or unit.status is NodeStatus.WAITING:
        return Step(run, (), f"attempt {event.attempt} of {node.key!r} is not current")
    if isinstance(event, NodeDispatched):
        if unit.run_id is not None:
            return Step(run, (), "run id already recorded")
        _put_unit(tx, node, event.item, replace(unit, run_id=event.run_id))
        return tx.step()
    if unit.status is not NodeStatus.RUNNING:
        return Step(run, (), f"attempt {event.attempt} of {node.key!r} has already ended")
    if isinstance(event, NodeFinished):
        if event.run_id is not None and unit.run_id is None:
            _put_unit(tx, node, event.item, replace(unit, run_id=event.run_id))
        _finished(tx, node, event)
    else:
        _timed_out(tx, node, unit, event)
    tx.settle()
    return tx.step()


def _finished(tx: Transition, node: Node, event: NodeFinished) -> None:
    if event.outcome is not Outcome.SUCCESS:
        tx.attempt_failed(node, event.outcome, event.message, event.item)
        return
    error = tx.additions(node, event.message, event.context)
    if error is not None:
        tx.attempt_failed(node, Outcome.FAILED, error, event.item)
        return
    message = event.message
    if node.result_json:
        _, ignored = parse_result_message(event.message)
        message = f"{message} [{ignored}]" if ignored else message
    if event.item is None:
        tx.succeed(node, message)
        return
    unit = _unit_of(node, tx, event.item)
    assert isinstance(unit, Unit)
    tx.put_item(node.key, event.item, replace(unit, status=NodeStatus.SUCCESS, ended_ms=tx.at,
                                              message=clip_message(message)))
    tx.fill_fanout(node)


def _timed_out(tx: Transition, node: Node, unit: Unit, event: NodeTimedOut) -> None:
    if node.kind is NodeKind.SUBWORKFLOW:
        tx.commands.append(StopSubworkflow(node.key, unit.attempt, unit.run_id))
    else:
        tx.commands.append(KillJob(node.key, unit.attempt, event.item, unit.run_id))
    tx.attempt_failed(node, Outcome.TIMED_OUT, "no result by the deadline", event.item)
