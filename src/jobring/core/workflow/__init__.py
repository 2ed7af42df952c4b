"""Workflows: jobs wired into a graph, run by a pure engine (no I/O, time passed in).

What the integrator calls:

* save: :func:`parse_workflow` (JSON -> :class:`WorkflowGraph`, structure checked),
  :func:`check_run_budget` (fan-out items a run could hold), then :func:`check_access`
  (jobs exist, groups the user may operate, sub-workflows) through lookups;
  :meth:`WorkflowGraph.to_json` is the canonical form to store as a version;
* run: :func:`apply` (``(graph, run, event) -> Step``) for every event, starting with
  :class:`RunStarted` (``retries`` from :func:`inherited_retries`); store
  :func:`run_to_json` of ``step.run`` and carry out ``step.commands``; :func:`run_from_json`
  reads the stored run back;
* context: :func:`context_changes` (what a sub-workflow run hands back to its parent);
* schedule: :func:`on_fire` / :func:`on_run_end` (the overlap rule of a workflow's fires).

The model (joins, failure rules, decisions, fan-out, context, repairs) is described in
docs/workflows.md.
"""

from jobring.core.workflow.access import (
    GroupPermission,
    JobLookup,
    JobRef,
    WorkflowLookup,
    check_access,
    inherited_retries,
)
from jobring.core.workflow.context import CONTEXT_MAX_BYTES, ContextError, context_changes
from jobring.core.workflow.diff import definition_changes, definition_summary
from jobring.core.workflow.engine import apply
from jobring.core.workflow.events import (
    Command,
    Event,
    FinishRun,
    KillJob,
    MarkSucceeded,
    NodeDispatched,
    NodeFinished,
    NodeTimedOut,
    Outcome,
    RerunFrom,
    RetryFailed,
    RunStarted,
    StartJob,
    StartSubworkflow,
    Step,
    StopRun,
    StopSubworkflow,
)
from jobring.core.workflow.model import (
    MAX_RUN_ITEMS,
    FailureRule,
    Join,
    Node,
    NodeKind,
    WorkflowGraph,
    WorkflowInvalid,
)
from jobring.core.workflow.overlap import Overlap, OverlapAction, on_fire, on_run_end
from jobring.core.workflow.parse import check_run_budget, parse_workflow
from jobring.core.workflow.state import (
    NodeRun,
    NodeStatus,
    RunStatus,
    SkipReason,
    Unit,
    WorkflowRun,
    node_to_json,
    run_from_json,
    run_head_json,
    run_to_json,
)

__all__ = [
    "MAX_RUN_ITEMS",
    "CONTEXT_MAX_BYTES",
    "Command",
    "ContextError",
    "Event",
    "FailureRule",
    "FinishRun",
    "GroupPermission",
    "JobLookup",
    "JobRef",
    "Join",
    "KillJob",
    "MarkSucceeded",
    "Node",
    "NodeDispatched",
    "NodeFinished",
    "NodeKind",
    "NodeRun",
    "NodeStatus",
    "NodeTimedOut",
    "Outcome",
    "Overlap",
    "OverlapAction",
    "RerunFrom",
    "RetryFailed",
    "RunStarted",
    "RunStatus",
    "SkipReason",
    "StartJob",
    "StartSubworkflow",
    "Step",
    "StopRun",
    "StopSubworkflow",
    "Unit",
    "WorkflowGraph",
    "WorkflowInvalid",
    "WorkflowLookup",
    "WorkflowRun",
    "apply",
    "check_access",
    "check_run_budget",
    "context_changes",
    "definition_changes",
    "definition_summary",
    "inherited_retries",
    "node_to_json",
    "on_fire",
    "on_run_end",
    "parse_workflow",
    "run_from_json",
    "run_head_json",
    "run_to_json",
]
