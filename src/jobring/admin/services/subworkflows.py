"""Sub-workflow nodes in the admin: a node attempt starts a child run of another workflow, the
child's end finishes the node, a stop of the node (the parent stopped, or its deadline passed)
stops the child.

Exactly once: the child run names the node attempt that started it under a unique key
(``jobring_workflow_run.parent_node_run_id``), so of two admins firing the same attempt (a
claim taken over) one creates the child and the other finds it. The child's end is handed to
the parent by the driver that stores it (:meth:`Children.hand_back`), and the sweep
(:meth:`Children.sweep`) hands over any end an admin did not (it stopped in between); the
engine ignores a second hand-over of the same attempt.

At the start of each child run the admin checks again what saving checked: the workflow
exists and is in the parent's group, it runs only jobs of that group (at any depth), and
it does not lead back to a workflow above it or nest more than five deep (counted along the
running runs, so an edit after the parent's start cannot make a loop run), and the tree of
the top run's workflow, as it is now, keeps within the job-run budget (so an edit after the
parent's start cannot multiply past it).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Protocol

from sqlalchemy.exc import IntegrityError

from jobring.admin.services.workflow_access import check_tree, check_tree_budget
from jobring.admin.services.workflow_steps import WorkflowRunGone
from jobring.admin.store.workflows import NodeRunRecord, NodeRunState, WorkflowRecord, WorkflowRunRecord
from jobring.core.clock import Clock
from jobring.core.expression import JsonValue
from jobring.core.workflow import (
    Event,
    NodeDispatched,
    NodeFinished,
    NodeStatus,
    NodeTimedOut,
    Outcome,
    Step,
    StopRun,
    StopSubworkflow,
    WorkflowGraph,
    WorkflowInvalid,
    context_changes,
    run_from_json,
)
from jobring.core.workflow.model import MAX_NESTING

if TYPE_CHECKING:
    from jobring.admin.store import Store

__all__ = ["Children", "DriverPort", "child_triggered_by"]

log = logging.getLogger(__name__)


def child_triggered_by(parent_run_id: int) -> str:
    """A child run's ``triggered_by``: the parent run."""
    return f"workflow run {parent_run_id}"


class DriverPort(Protocol):
    """What this module needs of the workflow driver."""

    async def graph(self, workflow_id: int, version: int) -> WorkflowGraph: ...

    async def apply(self, run_id: int, event: Event) -> Step: ...

    async def start_run(
        self,
        workflow: WorkflowRecord,
        params: Mapping[str, JsonValue],
        triggered_by: str | None,
        *,
        parent: NodeRunRecord | None = None,
    ) -> tuple[int, Step]: ...


class Children:
    """Starts, stops and finishes the child runs of sub-workflow nodes (module docstring)."""

    def __init__(self, store: Store, clock: Clock, driver: DriverPort) -> None:
        self._store, self._clock, self._driver = store, clock, driver

    async def fire(self, attempt: NodeRunRecord) -> None:
        """Start the child run of a claimed sub-workflow attempt (or find the one started)."""
        child = await self._store.workflow_children.child_of(attempt.id)
        if child is None:
            child_id = await self._start(attempt)
            if child_id is None:
                return
            child = await self._store.workflow_children.child_of(attempt.id)
            if child is None:  # deleted at once: nothing to link
                return
        await self._store.workflow_children.link(attempt.id)
        await self._driver.apply(
            attempt.workflow_run_id,
            NodeDispatched(attempt.node_key, attempt.attempt, child.id, self._clock.now_ms()),
        )
        if child.status != "running":  # ended in its first step, or before this link
            await self.hand_back(attempt, child)
        elif not await self._still_running(attempt):  # the parent stopped meanwhile
            await self._stop_child(child.id, attempt.workflow_run_id)

    async def _start(self, attempt: NodeRunRecord) -> int | None:
        parent = await self._store.workflows.get_run(attempt.workflow_run_id)
        if parent is None or parent.state is None:
            await self._store.workflows.ended([attempt.id], self._clock.now_ms())
            return None
        record, problem = await self._startable(attempt, parent)
        if record is None:
            await self._fail(attempt, f"not started: {problem}")
            return None
        context = run_from_json(parent.state).context
        try:
            child_id, step = await self._driver.start_run(
                record, context, child_triggered_by(parent.id), parent=attempt
            )
        except IntegrityError:  # another admin started it (a claim taken over)
            found = await self._store.workflow_children.child_of(attempt.id)
            return None if found is None else found.id
        except WorkflowRunGone as exc:  # deleted or moved to another group since it was read
            await self._fail(attempt, f"not started: {exc}")
            return None
        if not step.applied:
            await self._fail(attempt, f"not started: {step.note}")
            return None
        return child_id

    async def _startable(
        self, attempt: NodeRunRecord, parent: WorkflowRunRecord
    ) -> tuple[WorkflowRecord | None, str]:
        wid = attempt.workflow_id
        assert wid is not None
        above = await self._store.workflow_children.ancestors(parent.id, MAX_NESTING + 1)
        if wid in above:
            chain = " -> ".join(f"workflow {w}" for w in (*reversed(above), wid))
            return None, f"sub-workflows may not recurse: {chain}"
        if len(above) > MAX_NESTING:
            return None, f"sub-workflows nest more than {MAX_NESTING} deep"
        record = await self._store.workflows.get(wid)
        if record is None or record.job_group != parent.job_group:
            return None, f"workflow {wid} does not exist or is not in this workflow's group"
        group = parent.job_group
        try:
            await check_tree(
                self._store,
                self._driver.graph,
                await self._driver.graph(wid, record.version),
                workflow_id=wid,
                owner_group=group,
                may_operate=lambda g: g == group,
            )
            # The budget over the whole tree, from the top run's workflow as it is now: the
            # child's own tree alone could be edited after the parent's start to multiply.
            top = await self._store.workflows.get(above[-1])
            if top is not None and top.job_group == group:
                await check_tree_budget(self._store, self._driver.graph,
                                        await self._driver.graph(top.id, top.version),
                                        workflow_id=top.id, owner_group=group)
        except WorkflowInvalid as exc:
            return None, f"workflow {wid}: {exc}"
        return record, ""

    async def _fail(self, attempt: NodeRunRecord, message: str) -> None:
        await self._store.workflows.ended([attempt.id], self._clock.now_ms())
        await self._driver.apply(
            attempt.workflow_run_id,
            NodeFinished(
                attempt.node_key, attempt.attempt, Outcome.FAILED, self._clock.now_ms(), message=message
            ),
        )

    async def _still_running(self, attempt: NodeRunRecord) -> bool:
        record = await self._store.workflows.get_run(attempt.workflow_run_id)
        if record is None or record.state is None:
            return False
        unit = run_from_json(record.state).node(attempt.node_key)
        return unit.status is NodeStatus.RUNNING and unit.attempt == attempt.attempt

    async def hand_back(self, attempt: NodeRunRecord, child: WorkflowRunRecord) -> None:
        """The ended ``child`` finishes the node attempt that started it."""
        if child.state is None:
            loaded = await self._store.workflows.get_run(child.id)
            if loaded is None or loaded.state is None:
                return
            child = loaded
        assert child.state is not None
        run = run_from_json(child.state)
        changes: dict[str, Any] | None = None
        if child.status == "success":
            outcome = Outcome.SUCCESS
            changes = context_changes(child.params or {}, run.context)
        else:
            # A user's stop of the child is not retried, as a user's kill of a job run is not.
            outcome = Outcome.KILLED if child.status == "stopped" else Outcome.FAILED
        message = f"workflow run {child.id} {child.status}" + (f": {run.message}" if run.message else "")
        event = NodeFinished(
            attempt.node_key,
            attempt.attempt,
            outcome,
            self._clock.now_ms(),
            run_id=child.id,
            message=message,
            context=changes,
        )
        with contextlib.suppress(LookupError):  # the parent run was deleted meanwhile
            await self._driver.apply(attempt.workflow_run_id, event)
        await self._store.workflows.ended([attempt.id], self._clock.now_ms())

    async def on_child_end(self, parent_node_run_id: int) -> None:
        """A run with a parent has just ended: finish the parent's node attempt."""
        attempt = await self._store.workflows.node_run(parent_node_run_id)
        if attempt is None or attempt.state == NodeRunState.ENDED:
            return  # a child repaired on its own after its node was over: the parent is not changed
        child = await self._store.workflow_children.child_of(parent_node_run_id)
        if child is not None and child.status != "running":
            await self.hand_back(attempt, child)

    async def stop(self, run_id: int, command: StopSubworkflow) -> None:
        """The engine stopped a sub-workflow node: stop its child run."""
        attempts = [
            a
            for a in await self._store.workflows.node_runs(run_id)
            if (a.node_key, a.attempt) == (command.node, command.attempt) and a.state != NodeRunState.ENDED
        ]
        for attempt in attempts:
            await self._store.workflows.ended([attempt.id], self._clock.now_ms())
            child = await self._store.workflow_children.child_of(attempt.id)
            if child is not None and child.status == "running":
                await self._stop_child(child.id, run_id)

    async def _stop_child(self, child_id: int, parent_run_id: int) -> None:
        step = await self._driver.apply(
            child_id, StopRun(self._clock.now_ms(), note=f"its parent workflow run {parent_run_id} stopped")
        )
        if not step.applied:
            log.info("workflow run %s: stop of child run %s: %s", parent_run_id, child_id, step.note)

    async def sweep(self) -> None:
        """Hand over child ends no admin handed over; time out children past their node's deadline."""
        for ended in await self._store.workflow_children.running_with_ended_child():
            child = await self._store.workflows.get_run(ended.child_run_id)
            if child is not None:
                await self.hand_back(ended.node_run, child)
        now = self._clock.now_ms()
        for attempt in await self._store.workflow_children.running_subworkflows():
            if attempt.timeout_s and attempt.created_at + attempt.timeout_s * 1000 <= now:
                await self._driver.apply(
                    attempt.workflow_run_id, NodeTimedOut(attempt.node_key, attempt.attempt, now)
                )
