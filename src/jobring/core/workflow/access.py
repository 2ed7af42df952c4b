"""The checks of a workflow that need the store, through callbacks (this module reads nothing).

At save time the integrator calls :func:`check_access` with lookups bound to the store and the
acting user. Every refusal names the node:

* a job or fan-out node whose job does not exist, or is in a group the user may not operate
  (one refusal for both, naming no group, so it tells nothing about other groups' jobs);
* a job or fan-out node whose job is outside the workflow's own group, whoever saves it: the
  group's viewers see every node's job, params and runs, so a workflow may hold only its
  group's jobs;
* a sub-workflow node whose workflow does not exist, that leads back to the workflow being
  saved or into a loop of workflows, that nests deeper than :data:`MAX_NESTING`, or whose
  workflows (at any depth) run a job the user may not operate: running a workflow must not
  let a user run jobs they could not run directly.

Each workflow is looked at once and each job looked up once, however often they are referenced.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from jobring.core.workflow.model import MAX_NESTING, NodeKind, WorkflowGraph, WorkflowInvalid

__all__ = ["GroupPermission", "JobLookup", "JobRef", "WorkflowLookup", "check_access", "inherited_retries"]


@dataclass(frozen=True, slots=True)
class JobRef:
    """What the checks and the engine need of a job: its group and its own retry count."""

    job_id: int
    group_id: int
    retries: int = 0


JobLookup = Callable[[int], "JobRef | None"]
"""``job_lookup(job_id)``: the job, or None when there is no such job."""
GroupPermission = Callable[[int], bool]
"""``may_operate(group_id)``: may the acting user run jobs of this group."""
WorkflowLookup = Callable[[int], "WorkflowGraph | None"]
"""``workflow_lookup(workflow_id)``: another workflow's current graph, or None when there is none
(or, as the admin binds it, when it is in another group than the workflow being checked: a
sub-workflow's run and the context it hands back are seen by the parent's viewers)."""


class _Checker:
    def __init__(self, job_lookup: JobLookup, may_operate: GroupPermission,
                 workflow_lookup: WorkflowLookup, own_id: int | None) -> None:
        self.job_lookup, self.may_operate, self.workflow_lookup = job_lookup, may_operate, workflow_lookup
        self.own_id = own_id
        self.jobs: dict[int, str | None] = {}  # job id -> refusal (None: fine)
        self.job_groups: dict[int, int] = {}  # job id -> its group, for the jobs found
        self.done: dict[int, tuple[str | None, int]] = {}  # workflow id -> (refusal, nesting below it)

    def job_refusal(self, job_id: int) -> str | None:
        if job_id not in self.jobs:
            job = self.job_lookup(job_id)
            if job is not None:
                self.job_groups[job_id] = job.group_id
            if job is None or not self.may_operate(job.group_id):
                self.jobs[job_id] = f"job {job_id} does not exist or is in a group you may not operate"
            else:
                self.jobs[job_id] = None
        return self.jobs[job_id]

    def graph_refusal(self, graph: WorkflowGraph, path: tuple[int, ...]) -> tuple[str | None, int]:
        """The first refusal inside ``graph`` (the last workflow of ``path``) and how deep
        sub-workflows nest below it."""
        depth = 0
        for node in graph.nodes.values():
            if node.kind in (NodeKind.JOB, NodeKind.FANOUT) and node.job_id is not None:
                refusal = self.job_refusal(node.job_id)
                if refusal is not None:
                    return f"{_chain(path)} runs node {node.key!r}: {refusal}", depth
            elif node.kind is NodeKind.SUBWORKFLOW and node.workflow_id is not None:
                refusal, below = self.workflow_refusal(node.workflow_id, path)
                if refusal is not None:
                    return refusal, depth
                depth = max(depth, below + 1)
        return None, depth

    def workflow_refusal(self, workflow_id: int, path: tuple[int, ...]) -> tuple[str | None, int]:
        chain = _chain((*path, workflow_id))
        if workflow_id == self.own_id:
            return f"sub-workflows may not recurse: {chain} is this workflow", 0
        if workflow_id in path:
            return f"sub-workflows may not recurse: {chain}", 0
        if workflow_id in self.done:
            return self.done[workflow_id]
        if len(path) >= MAX_NESTING:
            return f"sub-workflows nest more than {MAX_NESTING} deep: {chain}", 0
        graph = self.workflow_lookup(workflow_id)
        if graph is None:
            result: tuple[str | None, int] = (
                f"{chain} does not exist or is not in this workflow's group", 0)
        else:
            result = self.graph_refusal(graph, (*path, workflow_id))
        # A refusal aborts the whole check, so caching one found along a particular path is safe.
        self.done[workflow_id] = result
        return result


def _chain(path: tuple[int, ...]) -> str:
    return " -> ".join(f"workflow {w}" for w in path)


def check_access(
    graph: WorkflowGraph,
    *,
    job_lookup: JobLookup,
    may_operate: GroupPermission,
    workflow_lookup: WorkflowLookup,
    workflow_id: int | None = None,
    owner_group: int | None = None,
) -> None:
    """Refuse (:class:`WorkflowInvalid`) what ``graph`` may not run for this user.

    ``workflow_id`` is the id of the workflow being saved (None for a new one), so that a
    sub-workflow leading back to it is refused. ``owner_group`` is the workflow's own group:
    a job or fan-out node whose job is in another group is refused (None: not checked)."""
    checker = _Checker(job_lookup, may_operate, workflow_lookup, workflow_id)
    for node in graph.nodes.values():
        if node.kind in (NodeKind.JOB, NodeKind.FANOUT) and node.job_id is not None:
            refusal = checker.job_refusal(node.job_id)
            outside = checker.job_groups.get(node.job_id, owner_group) != owner_group
            if refusal is None and owner_group is not None and outside:
                refusal = (f"job {node.job_id} is not in this workflow's group "
                           f"{owner_group}: a workflow runs only its own group's jobs")
            if refusal is not None:
                raise WorkflowInvalid(f"{node.field}.job_id", node.key, refusal)
        elif node.kind is NodeKind.SUBWORKFLOW and node.workflow_id is not None:
            refusal, depth = checker.workflow_refusal(node.workflow_id, ())
            if refusal is None and depth + 1 > MAX_NESTING:
                refusal = f"sub-workflows nest more than {MAX_NESTING} deep below this workflow"
            if refusal is not None:
                raise WorkflowInvalid(f"{node.field}.workflow_id", node.key, refusal)


def inherited_retries(graph: WorkflowGraph, job_lookup: JobLookup) -> dict[str, int]:
    """For the run-start event: the retry count of each job or fan-out node that does not set
    its own, taken from its job now (nodes whose job is gone or retries nothing are left out)."""
    out: dict[str, int] = {}
    for node in graph.nodes.values():
        if node.retries is None and node.job_id is not None:
            job = job_lookup(node.job_id)
            if job is not None and job.retries > 0:
                out[node.key] = job.retries
    return out
