"""The repairs of a run: stop, retry from the failed nodes, mark a node succeeded, re-run from a node.

Each applied repair starts a new round (``WorkflowRun.round``); a repair naming another round
is refused, and so is one that does not fit the run's state (retrying a running run, marking a
node that did not fail): a repeated request changes nothing. Nodes run again keep counting
their attempts (so commands stay unique) and get their full retries again.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import replace

from jobring.core.workflow.events import MarkSucceeded, RerunFrom, RetryFailed, Step, StopRun
from jobring.core.workflow.model import NodeKind, WorkflowGraph
from jobring.core.workflow.state import NodeRun, NodeStatus, RunStatus, SkipReason, Unit, WorkflowRun
from jobring.core.workflow.transition import Transition

__all__ = ["Repair", "apply_repair"]

Repair = RetryFailed | MarkSucceeded | StopRun | RerunFrom
_ENDED = (RunStatus.FAILED, RunStatus.STOPPED)


def _again(unit: Unit) -> Unit:
    return Unit(attempt=unit.attempt, base=unit.attempt)


def _retry_record(record: NodeRun) -> NodeRun:
    """Waiting again; a fan-out keeps its item list and its successful items."""
    items = None
    if record.items is not None:
        items = tuple(item if item.status is NodeStatus.SUCCESS else _again(item) for item in record.items)
    return NodeRun(attempt=record.attempt, base=record.attempt, values=record.values if items else None,
                   items=items)


def _fresh_record(record: NodeRun) -> NodeRun:
    return NodeRun(attempt=record.attempt, base=record.attempt)


def _reset(tx: Transition, keys: Iterable[str], wanted: Callable[[NodeRun], bool],
           again: Callable[[NodeRun], NodeRun]) -> None:
    for key in keys:
        record = tx.node(key)
        if wanted(record):
            tx.put(key, again(record))


def _resume(tx: Transition) -> None:
    tx.enqueue_waiting()
    tx.settle()


def _upstream_skipped(record: NodeRun) -> bool:
    return record.status is NodeStatus.SKIPPED and record.skip is SkipReason.UPSTREAM


def _needs_retry(record: NodeRun) -> bool:
    return record.status in (NodeStatus.FAILED, NodeStatus.STOPPED) or _upstream_skipped(record)


def _stop(tx: Transition, event: StopRun) -> str | None:
    if tx.status is not RunStatus.RUNNING:
        return f"the run is {tx.status.value}, not running"
    tx.round += 1
    tx.end(RunStatus.STOPPED, event.note)
    return None


def _retry_failed(tx: Transition) -> str | None:
    if tx.status not in _ENDED:
        return f"only a failed or stopped run can be retried; this one is {tx.status.value}"
    _reset(tx, tx.graph.order, _needs_retry, _retry_record)
    tx.reopen()
    _resume(tx)
    return None


def _mark_succeeded(tx: Transition, event: MarkSucceeded) -> str | None:
    node = tx.graph.nodes.get(event.node)
    if node is None:
        return f"no node {event.node!r} in this workflow"
    record = tx.node(node.key)
    if record.status not in (NodeStatus.FAILED, NodeStatus.STOPPED):
        return f"node {node.key!r} is {record.status.value}; only a failed or stopped node can be marked"
    if node.kind is NodeKind.DECISION:
        return "a decision node cannot be marked succeeded (which branch?); re-run it instead"
    tx.put(node.key, replace(record, status=NodeStatus.SUCCESS, marked=True, message=event.note,
                             ended_ms=record.ended_ms if record.ended_ms is not None else tx.at))
    _reset(tx, tx.graph.descendants(node.key), _upstream_skipped, _fresh_record)
    if tx.status in _ENDED:
        _reset(tx, tx.graph.order, lambda record: record.status is NodeStatus.STOPPED, _retry_record)
        tx.reopen()
    else:
        tx.round += 1
    _resume(tx)
    return None


def _rerun_from(tx: Transition, event: RerunFrom) -> str | None:
    node = tx.graph.nodes.get(event.node)
    if node is None:
        return f"no node {event.node!r} in this workflow"
    if tx.status is RunStatus.RUNNING:
        return "the run is still running: stop it first"
    _reset(tx, (node.key, *tx.graph.descendants(node.key)), lambda record: True, _fresh_record)
    tx.reopen()
    tx.start(node)
    _resume(tx)
    return None


def apply_repair(graph: WorkflowGraph, run: WorkflowRun, event: Repair) -> Step:
    """Apply a repair to ``run``; a refusal comes back as the step's note with the run unchanged."""
    if event.round is not None and event.round != run.round:
        return Step(run, (), f"the run is at round {run.round}, not {event.round}: reload it and try again")
    tx = Transition(graph, run, event.at_ms)
    if isinstance(event, StopRun):
        refusal = _stop(tx, event)
    elif isinstance(event, RetryFailed):
        refusal = _retry_failed(tx)
    elif isinstance(event, MarkSucceeded):
        refusal = _mark_succeeded(tx, event)
    else:
        refusal = _rerun_from(tx, event)
    if refusal is not None:
        return Step(run, (), refusal)
    return tx.step()
