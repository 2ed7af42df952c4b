"""The store-bound side of :func:`jobring.core.workflow.check_access`: load what a workflow's
graph reaches (its nodes' jobs, its sub-workflows' current graphs, at any depth), then run the
pure check over what was loaded.

A sub-workflow must be in the same executor group as the workflow that runs it: its run, its
nodes' job runs and the context it hands back are shown to the parent's viewers, so a
workflow of another group is looked up as missing (one refusal for both, naming no group).
Together with "a workflow runs only its own group's jobs" a whole tree of workflows is one
group's, and the right to operate that group is the right to run every job in it.

Nesting is capped (five deep), but each level may hold up to 1,000 sub-workflow nodes: the
job runs one run of a tree may start multiply level by level (1,000 ** 5 at most). The tree
is refused when it could start more than :data:`MAX_TREE_JOB_RUNS` job runs (each job node
counted once, each fan-out node as its most items, each sub-workflow node as its workflow's
tree): a denial of service otherwise open to any writer of one group with one trigger.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from jobring.core.workflow import (
    GroupPermission,
    JobRef,
    NodeKind,
    WorkflowGraph,
    WorkflowInvalid,
    check_access,
    parse_workflow,
)
from jobring.core.workflow.model import MAX_FANOUT_ITEMS, MAX_NESTING

if TYPE_CHECKING:
    from jobring.admin.store import Store

__all__ = ["MAX_TREE_JOB_RUNS", "GraphSource", "check_tree", "check_tree_budget", "store_graphs"]

MAX_TREE_JOB_RUNS = 100_000

GraphSource = Callable[[int, int], Awaitable[WorkflowGraph]]
"""``graph(workflow_id, version)``: a saved version's parsed graph (the driver's cache)."""


def store_graphs(store: Store) -> GraphSource:
    """A :data:`GraphSource` reading the store (no cache: for a node without the driver)."""

    async def graph(workflow_id: int, version: int) -> WorkflowGraph:
        doc = await store.workflows.definition(workflow_id, version)
        if doc is None:  # deleted between two reads
            raise WorkflowInvalid("workflow_id", None, f"workflow {workflow_id} does not exist")
        return parse_workflow(doc)

    return graph


def _children(graph: WorkflowGraph) -> set[int]:
    return {
        n.workflow_id
        for n in graph.nodes.values()
        if n.kind is NodeKind.SUBWORKFLOW and n.workflow_id is not None
    }


async def check_tree(
    store: Store,
    graphs: GraphSource,
    graph: WorkflowGraph,
    *,
    workflow_id: int | None,
    owner_group: int,
    may_operate: GroupPermission,
) -> None:
    """Raise :class:`~jobring.core.workflow.WorkflowInvalid` (naming the node) when ``graph``,
    the graph of ``workflow_id`` (None: not saved yet) owned by ``owner_group``, may not run:
    see :func:`~jobring.core.workflow.check_access` and the module docstring."""
    found = await _load(store, graphs, graph, workflow_id, owner_group)
    job_ids = {
        n.job_id
        for g in (graph, *(g for g in found.values() if g is not None))
        for n in g.nodes.values()
        if n.job_id is not None
    }
    jobs = await store.jobs.get_many(job_ids)
    refs = {jid: JobRef(jid, job.job_group, job.executor_fail_retry_count) for jid, job in jobs.items()}
    check_access(
        graph,
        job_lookup=refs.get,
        may_operate=may_operate,
        workflow_lookup=found.get,
        workflow_id=workflow_id,
        owner_group=owner_group,
    )
    _check_budget(graph, found)


async def check_tree_budget(
    store: Store, graphs: GraphSource, graph: WorkflowGraph, *, workflow_id: int, owner_group: int
) -> None:
    """Only the budget part of :func:`check_tree` (a child's start counts its top run's tree
    as it is now: WorkflowInvalid when one run of it could start too many job runs)."""
    _check_budget(graph, await _load(store, graphs, graph, workflow_id, owner_group))


async def _load(
    store: Store, graphs: GraphSource, graph: WorkflowGraph, workflow_id: int | None, owner_group: int
) -> dict[int, WorkflowGraph | None]:
    """The current graphs of the sub-workflows ``graph`` reaches (None: missing or in another
    group), one level more than the nesting cap deep."""
    found: dict[int, WorkflowGraph | None] = {}
    level = _children(graph)
    # One level more than the nesting cap: enough for the check to see a tree too deep.
    for _ in range(MAX_NESTING + 1):
        level -= set(found)
        if workflow_id is not None:
            level.discard(workflow_id)
        if not level:
            break
        following: set[int] = set()
        for wid in sorted(level):
            record = await store.workflows.get(wid)
            if record is None or record.job_group != owner_group:
                found[wid] = None
                continue
            sub = await graphs(wid, record.version)
            found[wid] = sub
            following |= _children(sub)
        level = following
    return found


def _check_budget(graph: WorkflowGraph, found: dict[int, WorkflowGraph | None]) -> None:
    """Refuse ``graph`` when one run of its tree could start more than MAX_TREE_JOB_RUNS job
    runs, naming the node that passes the budget (after check_access: no loops, nesting capped)."""
    memo: dict[int, int] = {}

    def weight(node_kind: NodeKind, workflow_id: int | None) -> int:
        if node_kind is NodeKind.JOB:
            return 1
        if node_kind is NodeKind.FANOUT:
            return MAX_FANOUT_ITEMS
        if node_kind is NodeKind.SUBWORKFLOW and workflow_id is not None:
            return tree(workflow_id)
        return 0

    def tree(workflow_id: int) -> int:
        if workflow_id not in memo:
            memo[workflow_id] = 0  # no loops here (check_access refused them); a guard all the same
            sub = found.get(workflow_id)
            memo[workflow_id] = 0 if sub is None else min(
                sum(weight(n.kind, n.workflow_id) for n in sub.nodes.values()), MAX_TREE_JOB_RUNS + 1)
        return memo[workflow_id]

    total = 0
    for node in graph.nodes.values():
        total += weight(node.kind, node.workflow_id)
        if total > MAX_TREE_JOB_RUNS:
            field = f"{node.field}.workflow_id" if node.kind is NodeKind.SUBWORKFLOW else node.field
            raise WorkflowInvalid(
                field, node.key,
                f"one run of this workflow and its sub-workflows could start more than "
                f"{MAX_TREE_JOB_RUNS:,} job runs (the budget of a tree of workflows: job nodes, "
                f"fan-out items at most, and each sub-workflow node's workflow, multiplied level by level)")
