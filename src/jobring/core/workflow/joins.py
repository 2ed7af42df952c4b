"""When a waiting node runs or is skipped: each incoming edge gives a signal, the join reads them.

Signal of the edge ``parent -> node``:

* ``ok``: the parent succeeded (or was marked succeeded, or failed under ``continue``) and, for
  a decision parent, took this edge;
* ``not_taken``: a decision parent did not take this edge, or the parent was skipped because its
  own branch was not taken;
* ``failed``: the parent failed (``skip_descendants``), was stopped, or was skipped because
  something above it failed;
* ``pending``: the parent has not finished.

Joins (a node without parents runs at once):

* ``all_success``: skipped (upstream) as soon as one signal is ``failed``; runs when none is
  pending and at least one is ``ok``; parents on untaken branches are ignored, so a node after
  a decision's branches joined with ``all_success`` runs after whichever branch ran.
* ``any_success``: runs as soon as one signal is ``ok``; otherwise, once none is pending,
  skipped (upstream when one failed).
* ``all_done``: runs once none is pending, whatever the parents did (a clean-up node runs even
  after failures above it).

Under every join a node whose signals are all ``not_taken`` is skipped as on an untaken branch,
and that skip passes on as ``not_taken``: a whole untaken branch is skipped down to the node
that joins it with the taken one.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from enum import Enum

from jobring.core.workflow.model import FailureRule, Join, Node, NodeKind, WorkflowGraph
from jobring.core.workflow.state import FRESH, NodeRun, NodeStatus, SkipReason

__all__ = ["Signal", "Verdict", "edge_signal", "incoming_signals", "join_verdict"]


class Signal(Enum):
    PENDING = "pending"
    OK = "ok"
    FAILED = "failed"
    NOT_TAKEN = "not_taken"


class Verdict(Enum):
    WAIT = "wait"
    RUN = "run"
    SKIP_BRANCH = "skip_branch"
    SKIP_UPSTREAM = "skip_upstream"


def edge_signal(parent: Node, record: NodeRun, child: str) -> Signal:
    """The signal the edge ``parent -> child`` gives, ``record`` being the parent's."""
    status = record.status
    if status is NodeStatus.SUCCESS:
        if parent.kind is NodeKind.DECISION and child not in record.taken:
            return Signal.NOT_TAKEN
        return Signal.OK
    if status is NodeStatus.FAILED:
        return Signal.OK if parent.on_failure is FailureRule.CONTINUE else Signal.FAILED
    if status is NodeStatus.SKIPPED:
        return Signal.NOT_TAKEN if record.skip is SkipReason.BRANCH else Signal.FAILED
    if status is NodeStatus.STOPPED:
        return Signal.FAILED
    return Signal.PENDING


def incoming_signals(graph: WorkflowGraph, records: Mapping[str, NodeRun], key: str) -> set[Signal]:
    """The distinct signals of the edges into ``key``; ``records`` are the run's node records (a
    node missing from them is waiting). A join node reads every parent's at each parent's end, so
    a wide join reads a thousand parents a thousand times in a run: the common cases (a parent
    waiting, running, or succeeded and not a decision) are told here by identity alone, without
    a call or a hash per parent."""
    pending = ok = False
    others: set[Signal] = set()
    nodes, get = graph.nodes, records.get
    waiting, running, success, decision = (
        NodeStatus.WAITING, NodeStatus.RUNNING, NodeStatus.SUCCESS, NodeKind.DECISION)
    for parent in graph.parents[key]:
        record = get(parent, FRESH)
        status = record.status
        if status is waiting or status is running:
            pending = True
        elif status is success and nodes[parent].kind is not decision:
            ok = True
        else:
            others.add(edge_signal(nodes[parent], record, key))
    if pending:
        others.add(Signal.PENDING)
    if ok:
        others.add(Signal.OK)
    return others


def join_verdict(join: Join, signals: Iterable[Signal]) -> Verdict:
    """What a waiting node with these incoming signals does now (see the module docstring)."""
    seen = set(signals)
    if not seen:
        return Verdict.RUN
    if join is Join.ANY_SUCCESS and Signal.OK in seen:
        return Verdict.RUN
    if join is Join.ALL_SUCCESS and Signal.FAILED in seen:
        return Verdict.SKIP_UPSTREAM
    if Signal.PENDING in seen:
        return Verdict.WAIT
    if seen == {Signal.NOT_TAKEN}:
        return Verdict.SKIP_BRANCH
    if join is Join.ALL_DONE or Signal.OK in seen:
        return Verdict.RUN
    return Verdict.SKIP_UPSTREAM
