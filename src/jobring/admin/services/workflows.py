"""The workflow driver: runs the pure engine (:mod:`jobring.core.workflow`) against the store.

Every event (a run started, a node's job run dispatched or ended, a repair) is applied to the
run's stored state and written back by compare-and-set on its revision, together with the node
attempts the step starts (``store.workflows.advance``); on a lost race the event is applied
again to the newer state, where the engine ignores what is already done. The attempts are an
outbox: each is claimed by one admin before it is fired, and its job run carries the attempt's
id under a unique key, so a node attempt runs at most once whichever admin fires it (firing
is in :mod:`~jobring.admin.services.workflow_fires`, the engine's steps in
:mod:`~jobring.admin.services.workflow_steps`).

Results come in promptly: the callback service hands this driver every result it records
(:meth:`WorkflowDriver.on_results`), a trigger failure is applied where it happens. The
periodic sweep (:meth:`tick`) catches the rest: attempts nobody fired (an admin died between
storing a step and firing), attempts claimed by a node that died, and job runs ended
without a callback (the lost-run monitor, a user's kill).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Coroutine, Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from jobring.admin.dispatch.client import ExecutorClient
from jobring.admin.monitors.base import Monitor
from jobring.admin.services.claim_fault import ClaimFault
from jobring.admin.services.settings import DEFAULT_STALE_CLAIM_MS
from jobring.admin.services.subworkflows import Children
from jobring.admin.services.workflow_fires import (
    MAX_CONCURRENT_FIRES,
    STOPPED_BY_WORKFLOW,
    ClaimKeeper,
    NodeFires,
)
from jobring.admin.services.workflow_steps import (
    KNOWN_STEP_ON_LOOP,
    Applied,
    KnownRun,
    StateEncoder,
    WorkflowRunGone,
    finished,
    first_step,
    new_attempts,
    off_loop_if_large,
    steps_of,
    steps_of_state,
    wanted_in,
)
from jobring.admin.store.workflow_records import (
    FireRows,
    NodeRunRecord,
    NodeRunState,
    WorkflowGone,
    WorkflowRecord,
    WorkflowRunRecord,
)
from jobring.admin.trigger.fires import sent_instant
from jobring.admin.trigger.trigger import TriggerService
from jobring.admin.trigger.unsure import UnsureFires
from jobring.background import Background
from jobring.core.clock import Clock
from jobring.core.enums import HandleCode, TriggerType
from jobring.core.expression import JsonValue
from jobring.core.workflow import (
    Command,
    Event,
    FinishRun,
    JobRef,
    KillJob,
    RunStarted,
    RunStatus,
    StartJob,
    StartSubworkflow,
    Step,
    StopSubworkflow,
    WorkflowGraph,
    inherited_retries,
    parse_workflow,
)

if TYPE_CHECKING:
    from jobring.admin.store import Store

log = logging.getLogger(__name__)

__all__ = ["MAX_CONCURRENT_FIRES", "STOPPED_BY_WORKFLOW", "WorkflowDriver", "WorkflowRunGone"]

_CONTENDED_TRIES = 50
_GRAPHS_KEPT = 256
_RUNS_KEPT = 64
_KEPT_STATE_CHARS = 262_144
"""Runs this driver remembers as it stored them (see ``WorkflowDriver._known``): up to this
many, each with a state up to this size (JSON characters)."""


class WorkflowDriver(Monitor):
    """Starts workflow runs, fires their nodes, applies results and repairs; sweeps periodically."""

    name = "workflow-driver"

    def __init__(
        self,
        store: Store,
        trigger: TriggerService,
        executors: ExecutorClient | None,
        clock: Clock,
        *,
        node_id: str,
        interval_s: float = 2.0,
        stale_ms: int = DEFAULT_STALE_CLAIM_MS,
        max_concurrent_fires: int = MAX_CONCURRENT_FIRES,
        unsure: UnsureFires | None = None,
    ) -> None:
        super().__init__(interval_s)
        self._store = store
        self._trigger = trigger
        self._clock = clock
        self._node_id = node_id
        self._graphs: dict[tuple[int, int], WorkflowGraph] = {}
        self._tasks = Background(log)
        # Events waiting to be applied, per run, and the runs whose queue is being drained.
        self._queued: dict[int, list[tuple[Event, asyncio.Future[Applied]]]] = {}
        # The runs this driver stored last, by id: the next event of one is applied to it and
        # stored over its revision without reading the run again. Another admin's write since
        # makes that compare-and-set fail; the run is then read as usual.
        self._known: dict[int, KnownRun] = {}
        self._draining: set[int] = set()
        self.lost_races = 0  # steps recomputed because another writer stored one first
        self.children = Children(store, clock, self)
        self.fires = NodeFires(store, trigger, executors, clock, self, self.children, node_id=node_id,
                               stale_ms=stale_ms, max_concurrent_fires=max_concurrent_fires,
                               unsure=unsure)
        self.claim_keeper = ClaimKeeper(self.fires)
        self._max_concurrent_fires = max_concurrent_fires

    @property
    def claim_fault(self) -> ClaimFault | None:
        """The test-only fault point of the claim window (services/claim_fault.py)."""
        return self.fires.claim_fault

    @claim_fault.setter
    def claim_fault(self, fault: ClaimFault | None) -> None:
        self.fires.claim_fault = fault

    # -- graphs -----------------------------------------------------------------------------------

    async def graph(self, workflow_id: int, version: int) -> WorkflowGraph:
        """The parsed graph of a saved version (versions never change: kept once parsed)."""
        key = (workflow_id, version)
        graph = self._graphs.get(key)
        if graph is None:
            doc = await self._store.workflows.definition(workflow_id, version)
            if doc is None:
                raise WorkflowRunGone(f"workflow {workflow_id} version {version} does not exist")
            graph = parse_workflow(doc)
            if len(self._graphs) >= _GRAPHS_KEPT:
                self._graphs.clear()
            self._graphs[key] = graph
        return graph

    # -- starting and applying ----------------------------------------------------------------------

    async def start_run(
        self,
        workflow: WorkflowRecord,
        params: Mapping[str, JsonValue],
        triggered_by: str | None,
        *,
        parent: NodeRunRecord | None = None,
        alone: bool = False,
    ) -> tuple[int, Step]:
        """Start a run of the workflow's current version; (run id, first step). A step that is
        not applied (bad params) records nothing: its note says why. WorkflowRunGone when the
        workflow has been deleted, or moved out of the group it was read in. ``parent``: the
        sub-workflow attempt this run is the child of (IntegrityError when that attempt has
        started a child already). ``alone``: only while none of the workflow's runs is
        running (WorkflowBusy otherwise, decided in the write)."""
        graph = await self.graph(workflow.id, workflow.version)
        job_ids = {n.job_id for n in graph.nodes.values() if n.job_id is not None}
        jobs = await self._store.jobs.get_many(job_ids)
        refs = {jid: JobRef(jid, job.job_group, job.executor_fail_retry_count) for jid, job in jobs.items()}
        now = self._clock.now_ms()
        event = RunStarted(now, workflow.version, params, inherited_retries(graph, refs.get))
        encoder = StateEncoder()
        step, state = await asyncio.to_thread(first_step, graph, event, encoder)  # see apply
        if step.run is None or state is None:
            return 0, step
        try:
            run_id = await self._store.workflows.start_run(
                workflow.id,
                workflow.version,
                workflow.job_group,
                step.run.status.value,
                state,
                triggered_by,
                now,
                new_attempts(step.commands),
                params=params,
                parent_run_id=None if parent is None else parent.workflow_run_id,
                parent_node_run_id=None if parent is None else parent.id,
                alone=alone,
            )
        except WorkflowGone as exc:  # deleted or moved to another group since it was read
            raise WorkflowRunGone(str(exc)) from None
        log.info("workflow %s run %s started (version %s)", workflow.id, run_id, workflow.version)
        if step.run.status is RunStatus.RUNNING and len(state) <= _KEPT_STATE_CHARS:
            record = WorkflowRunRecord(
                run_id, workflow.id, workflow.version, workflow.job_group, step.run.status.value, 0,
                triggered_by, now, None, None if parent is None else parent.workflow_run_id,
                None if parent is None else parent.id)
            self._remember(run_id, KnownRun(record, step.run, len(state), encoder))
        await self._carry_out(run_id, step.commands, None if parent is None else parent.id)
        return run_id, step

    async def apply(self, run_id: int, event: Event) -> Step:
        """Apply ``event`` to the stored run (compare-and-set, retried on a lost race) and carry
        out the commands of the step stored. WorkflowRunGone when the run does not exist.

        Events for one run are applied one batch at a time on this admin: those that arrive
        while a batch is being stored wait and go together into the next, read once and
        written once (a fan-in's results, a fan-out's dispatches). Applied one by one, each
        would read the state, lose the race to the others and read it again."""
        waiter: asyncio.Future[Applied] = asyncio.get_running_loop().create_future()
        self._queued.setdefault(run_id, []).append((event, waiter))
        if run_id not in self._draining:
            self._draining.add(run_id)
            self._spawn(self._drain(run_id))
        applied = await waiter
        if applied.stored_over is not None:
            await self._carry_out(run_id, applied.step.commands, applied.stored_over.parent_node_run_id,
                                  applied)
        return applied.step

    async def _drain(self, run_id: int) -> None:
        """Apply the run's queued events, a batch at a time, until none is left."""
        try:
            while queued := self._queued.pop(run_id, None):
                try:
                    results = await self._apply_batch(run_id, [event for event, _ in queued])
                except BaseException as exc:
                    for _, waiter in queued:
                        if not waiter.done():
                            waiter.set_exception(exc)
                    if not isinstance(exc, Exception):
                        raise
                else:
                    for (_, waiter), result in zip(queued, results, strict=True):
                        if not waiter.done():
                            waiter.set_result(result)
        finally:
            self._draining.discard(run_id)
            if run_id in self._queued:  # queued as this drain was ending (or failing)
                self._draining.add(run_id)
                self._spawn(self._drain(run_id))

    async def _apply_batch(self, run_id: int, events: Sequence[Event]) -> list[Applied]:
        """Per event: its step, and the run as read when the step was stored over it (None: the
        event changed nothing, no command of it is due)."""
        for _ in range(_CONTENDED_TRIES):
            known = self._known.pop(run_id, None)
            if known is not None:
                record, encoder = known.record, known.encoder
                graph = await self.graph(record.workflow_id, record.version)
                # A fan-out node's record holds its items (up to 1,000): encoded again whole
                # at each item's result, so such runs keep the rule of any other state.
                steps, run, text = await off_loop_if_large(
                    known.chars * len(events), steps_of, graph, known.run, events, encoder,
                    small=None if graph.fanouts else KNOWN_STEP_ON_LOOP)
            else:
                read = await self._store.workflows.get_run(run_id)
                if read is None or read.state is None:
                    raise WorkflowRunGone(f"workflow run {run_id} does not exist")
                record, encoder = read, StateEncoder()
                graph = await self.graph(record.workflow_id, record.version)
                # Reading, applying and writing back a large run's state takes tens of
                # milliseconds of CPU: done in a worker thread so the loop keeps serving. The
                # compare-and-set below is unchanged: the steps were computed from revision
                # record.rev, nothing else.
                steps, run, text = await off_loop_if_large(
                    record.state_chars, steps_of_state, graph, record.state, events, encoder)
            if text is None or run is None:
                if known is not None:
                    self._remember(run_id, known)
                return [Applied(step) for step, _ in steps]
            starts = new_attempts([c for step, changed in steps if changed for c in step.commands])
            now = self._clock.now_ms()
            fire_rows = None
            jobs_started = sum(1 for start in starts if start.job_id)
            if jobs_started:
                # Their group is read while the step is stored, not on their way to the
                # executor after it (its cached copy lasts a second: a join's last parent
                # often comes later than that).
                self._tasks.spawn(self._trigger.warm_group(record.job_group),
                                  f"reading executor group {record.job_group} ahead of run {run_id}'s fires")
            if 0 < jobs_started <= self._max_concurrent_fires:
                # Their run-log rows are recorded in the step's own write (no write of its own
                # at each fire), stamped as the trigger stamps a fire now. Not for more starts
                # than fire at once: the others wait their turn, and a row's stamp would age
                # while they wait (the trigger stamps each as it records it).
                fire_rows = FireRows(self._node_id, TriggerType.WORKFLOW.value, sent_instant(None, now),
                                     record.job_group)
            stored = await self._store.workflows.advance(
                run_id,
                record.rev,
                run.status.value,
                text,
                now,
                starts,
                claimed_by=self._node_id,  # see _carry_out
                fire_rows=fire_rows,
            )
            if stored is not None:
                after = replace(record, rev=record.rev + 1, status=run.status.value, state=None,
                                params=None)
                if run.status is RunStatus.RUNNING and len(text) <= _KEPT_STATE_CHARS:
                    self._remember(run_id, KnownRun(after, run, len(text), encoder))
                return [Applied(step, record, stored, run) if changed else Applied(step)
                        for step, changed in steps]
            self.lost_races += 1
        raise RuntimeError(f"workflow run {run_id}: {_CONTENDED_TRIES} writers in a row came first")

    def _remember(self, run_id: int, known: KnownRun) -> None:
        self._known[run_id] = known
        if len(self._known) > _RUNS_KEPT:
            del self._known[next(iter(self._known))]  # the least recently stored

    async def _carry_out(
        self,
        run_id: int,
        commands: Sequence[Command],
        parent_node_run_id: int | None,
        applied: Applied | None = None,
    ) -> None:
        starts = [c for c in commands if isinstance(c, StartJob | StartSubworkflow)]
        if starts:
            wanted = {c.key for c in starts}
            if (applied is not None and applied.stored is not None and applied.run is not None
                    and applied.stored_over is not None):
                # The attempts, the run and the jobs as this driver's write stored and read them,
                # the attempts claimed by that write: nothing to read or write before the fire.
                # (Should this node die first, another takes them over once the claim is stale,
                # as it would had it died just after a claim of its own.)
                run, group, stored = applied.run, applied.stored_over.job_group, applied.stored
                await asyncio.gather(*(
                    self.fires.fire(a, known=wanted_in(run, a, group, stored.jobs, stored), claimed=True)
                    for a in applied.stored.attempts if (a.node_key, a.attempt, a.item) in wanted))
            else:
                attempts = [
                    a
                    for a in await self._store.workflows.pending_node_runs(run_id)
                    if (a.node_key, a.attempt, a.item) in wanted
                ]
                await asyncio.gather(*(self.fires.fire(a) for a in attempts))
        for command in commands:
            if isinstance(command, KillJob):
                await self.fires.kill(run_id, command)
            elif isinstance(command, StopSubworkflow):
                await self.children.stop(run_id, command)
            elif isinstance(command, FinishRun):
                log.info("workflow run %s ended %s: %s", run_id, command.status.value, command.message)
                if parent_node_run_id is not None:
                    await self.children.on_child_end(parent_node_run_id)

    # -- results ------------------------------------------------------------------------------------

    async def on_results(
        self,
        results: Sequence[tuple[int, int, str | None]],
        contexts: Mapping[int, str] | None = None,
    ) -> None:
        """Job runs whose results were just recorded: ``(log id, handle code, handle message)``.
        ``contexts``: the context additions recorded with them, by log id (given by the
        callback service, which knows them all: the attempts this node linked are then not
        read again); None: each attempt is read, its additions with it."""
        by_log = {log_id: (code, msg) for log_id, code, msg in results}
        attempts: list[NodeRunRecord] = []
        unknown = list(by_log)
        if contexts is not None:
            unknown = []
            for log_id in by_log:
                linked = self.fires.running(log_id)
                if linked is None:
                    unknown.append(log_id)
                else:
                    attempts.append(replace(linked, context_added=contexts.get(log_id)))
        if unknown:
            attempts += [a for a in await self._store.workflows.node_runs_of_logs(unknown)
                         if a.state == NodeRunState.RUNNING]
        finishing = [self.finish(a, HandleCode.SUCCESS, None, *by_log[a.log_id])
                     for a in attempts if a.log_id is not None]
        if len(finishing) == 1:
            # Awaited in this task: a task of its own for it would be one more turn of the
            # loop before the step starts, and the callback's next read would come first.
            await finishing[0]
        else:  # together: the results of one run are applied as one step (see apply)
            await asyncio.gather(*finishing)

    def notify(self, results: Sequence[tuple[int, int, str | None]],
               contexts: Mapping[int, str] | None = None) -> None:
        """:meth:`on_results` in the background (the callback answers without waiting for it)."""
        self._spawn(self.on_results(results, contexts))

    async def finish(
        self,
        attempt: NodeRunRecord,
        trigger_code: int,
        trigger_msg: str | None,
        handle_code: int,
        handle_msg: str | None,
    ) -> None:
        """Apply the end of the attempt's job run (or its failed trigger) to its run."""
        self.fires.forget(attempt.log_id)
        event = finished(attempt, trigger_code, trigger_msg, handle_code, handle_msg, self._clock.now_ms())
        with contextlib.suppress(WorkflowRunGone):  # the workflow was deleted meanwhile
            await self.apply(attempt.workflow_run_id, event)
        await self._store.workflows.ended([attempt.id], self._clock.now_ms())

    # -- the sweep ----------------------------------------------------------------------------------

    async def tick(self) -> None:
        now = self._clock.now_ms()
        for attempt in await self._store.workflows.to_fire(now, self.fires.stale_ms):
            try:
                await self.fires.fire(attempt, stale=attempt.state == NodeRunState.FIRING)
            except WorkflowRunGone:
                await self._store.workflows.ended([attempt.id], now)
        for ended in await self._store.workflows.running_with_results():
            try:
                await self.finish(
                    ended.node_run, ended.trigger_code, ended.trigger_msg, ended.handle_code, ended.handle_msg
                )
            except WorkflowRunGone:
                await self._store.workflows.ended([ended.node_run.id], now)
        await self.children.sweep()

    def _spawn(self, work: Coroutine[Any, Any, None]) -> None:
        self._tasks.spawn(work, "advancing workflow runs (the sweep tries again)")

    async def wait_idle(self) -> None:
        """Wait for the background work started so far (tests, shutdown)."""
        await self._tasks.wait()

    def start(self) -> None:
        super().start()
        self.claim_keeper.start()

    async def stop(self) -> None:
        await super().stop()
        await self.wait_idle()
        await self.claim_keeper.stop()
