"""The workflow driver: runs the pure engine (:mod:`jobring.core.workflow`) against the store.

Every event (a run started, a node's job run dispatched or ended, a repair) is applied to the
run's stored state and written back by compare-and-set on its revision, together with the node
attempts the step starts (``store.workflows.advance``); on a lost race the event is applied
again to the newer state, where the engine ignores what is already done. The attempts are an
outbox: each is claimed by one admin before it is fired, and its job run carries the attempt's
id under a unique key, so a node attempt runs at most once whichever admin fires it.

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

from sqlalchemy.exc import IntegrityError

from jobring.admin.dispatch.client import ExecutorClient
from jobring.admin.monitors.base import Monitor
from jobring.admin.services.claim_fault import ClaimFault
from jobring.admin.services.subworkflows import Children
from jobring.admin.services.workflow_steps import (
    Applied,
    KnownRun,
    Wanted,
    finished,
    first_step,
    item_of,
    naive_utc,
    new_attempts,
    off_loop_if_large,
    steps_of,
    steps_of_state,
    unconfirmed,
    wanted_in,
)
from jobring.admin.store.records import HandleResult
from jobring.admin.store.workflow_records import (
    NodeRunRecord,
    NodeRunState,
    WorkflowGone,
    WorkflowRecord,
    WorkflowRunRecord,
)
from jobring.admin.trigger.fires import run_candidates
from jobring.admin.trigger.trigger import FireRequest, TriggerRejected, TriggerService
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
    NodeDispatched,
    NodeFinished,
    Outcome,
    RunStarted,
    RunStatus,
    StartJob,
    StartSubworkflow,
    Step,
    StopSubworkflow,
    WorkflowGraph,
    inherited_retries,
    parse_workflow,
    run_from_json,
)
from jobring.errors import JobringError

if TYPE_CHECKING:
    from jobring.admin.store import Store

log = logging.getLogger(__name__)

STOPPED_BY_WORKFLOW = "killed: its workflow run stopped"
_CONTENDED_TRIES = 50
MAX_CONCURRENT_FIRES = 50
"""Job starts one driver has in flight at once; the rest wait their turn (each is already a
durable pending attempt, so nothing is lost if the admin stops while they wait)."""
_GRAPHS_KEPT = 256
_RUNS_KEPT = 64
_KEPT_STATE_CHARS = 262_144
"""Runs this driver remembers as it stored them (see ``WorkflowDriver._known``): up to this
many, each with a state up to this size (JSON characters)."""


class WorkflowRunGone(JobringError, LookupError):
    """The run (or its workflow version) no longer exists."""


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
        stale_ms: int = 30_000,
        max_concurrent_fires: int = MAX_CONCURRENT_FIRES,
        unsure: UnsureFires | None = None,
    ) -> None:
        super().__init__(interval_s)
        self._store = store
        self._trigger = trigger
        self._executors = executors
        self._clock = clock
        self._node_id = node_id
        self._stale_ms = stale_ms
        # Asks the executor about a taken-over attempt's job run that its dead admin recorded
        # and perhaps never sent (and sends it then, under the same run id).
        self._unsure = unsure
        self._graphs: dict[tuple[int, int], WorkflowGraph] = {}
        self._tasks = Background(log)
        # Events waiting to be applied, per run, and the runs whose queue is being drained.
        self._queued: dict[int, list[tuple[Event, asyncio.Future[Applied]]]] = {}
        # The runs this driver stored last, by id: the next event of one is applied to it and
        # stored over its revision without reading the run again. Another admin's write since
        # makes that compare-and-set fail; the run is then read as usual.
        self._known: dict[int, KnownRun] = {}
        self._draining: set[int] = set()
        # Bounds the trigger calls only, not what follows them: a fire's result may start more
        # attempts, and holding a slot while waiting for another could use them all up.
        self._firing = asyncio.Semaphore(max_concurrent_fires)
        self.claim_fault: ClaimFault | None = None  # test-only (services/claim_fault.py)
        self.lost_races = 0  # steps recomputed because another writer stored one first
        self.children = Children(store, clock, self)

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
    ) -> tuple[int, Step]:
        """Start a run of the workflow's current version; (run id, first step). A step that is
        not applied (bad params) records nothing: its note says why. WorkflowRunGone when the
        workflow has been deleted. ``parent``: the sub-workflow attempt this run is the child
        of (IntegrityError when that attempt has started a child already)."""
        graph = await self.graph(workflow.id, workflow.version)
        job_ids = {n.job_id for n in graph.nodes.values() if n.job_id is not None}
        jobs = await self._store.jobs.get_many(job_ids)
        refs = {jid: JobRef(jid, job.job_group, job.executor_fail_retry_count) for jid, job in jobs.items()}
        now = self._clock.now_ms()
        event = RunStarted(now, workflow.version, params, inherited_retries(graph, refs.get))
        step, state = await asyncio.to_thread(first_step, graph, event)  # see apply
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
            )
        except WorkflowGone as exc:  # deleted since it was read
            raise WorkflowRunGone(str(exc)) from None
        log.info("workflow %s run %s started (version %s)", workflow.id, run_id, workflow.version)
        if step.run.status is RunStatus.RUNNING and len(state) <= _KEPT_STATE_CHARS:
            record = WorkflowRunRecord(
                run_id, workflow.id, workflow.version, workflow.job_group, step.run.status.value, 0,
                triggered_by, now, None, None if parent is None else parent.workflow_run_id,
                None if parent is None else parent.id)
            self._remember(run_id, KnownRun(record, step.run, len(state)))
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
                record = known.record
                graph = await self.graph(record.workflow_id, record.version)
                steps, run, text = await off_loop_if_large(known.chars, steps_of, graph, known.run, events)
            else:
                read = await self._store.workflows.get_run(run_id)
                if read is None or read.state is None:
                    raise WorkflowRunGone(f"workflow run {run_id} does not exist")
                record = read
                graph = await self.graph(record.workflow_id, record.version)
                # Reading, applying and writing back a large run's state takes tens of
                # milliseconds of CPU: done in a worker thread so the loop keeps serving. The
                # compare-and-set below is unchanged: the steps were computed from revision
                # record.rev, nothing else.
                steps, run, text = await off_loop_if_large(
                    record.state_chars, steps_of_state, graph, record.state, events)
            if text is None or run is None:
                if known is not None:
                    self._remember(run_id, known)
                return [Applied(step) for step, _ in steps]
            stored = await self._store.workflows.advance(
                run_id,
                record.rev,
                run.status.value,
                text,
                self._clock.now_ms(),
                new_attempts([c for step, changed in steps if changed for c in step.commands]),
                claimed_by=self._node_id,  # see _carry_out
            )
            if stored is not None:
                after = replace(record, rev=record.rev + 1, status=run.status.value, state=None,
                                params=None)
                if run.status is RunStatus.RUNNING and len(text) <= _KEPT_STATE_CHARS:
                    self._remember(run_id, KnownRun(after, run, len(text)))
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
                run, group, jobs = applied.run, applied.stored_over.job_group, applied.stored.jobs
                await asyncio.gather(*(
                    self._fire(a, known=wanted_in(run, a, group, jobs), claimed=True)
                    for a in applied.stored.attempts if (a.node_key, a.attempt, a.item) in wanted))
            else:
                attempts = [
                    a
                    for a in await self._store.workflows.pending_node_runs(run_id)
                    if (a.node_key, a.attempt, a.item) in wanted
                ]
                await asyncio.gather(*(self._fire(a) for a in attempts))
        for command in commands:
            if isinstance(command, KillJob):
                await self._kill(run_id, command)
            elif isinstance(command, StopSubworkflow):
                await self.children.stop(run_id, command)
            elif isinstance(command, FinishRun):
                log.info("workflow run %s ended %s: %s", run_id, command.status.value, command.message)
                if parent_node_run_id is not None:
                    await self.children.on_child_end(parent_node_run_id)

    # -- firing -------------------------------------------------------------------------------------

    async def _fire(
        self,
        attempt: NodeRunRecord,
        *,
        stale: bool = False,
        known: Wanted | None = None,
        claimed: bool = False,
    ) -> None:
        """Claim the attempt (unless ``claimed`` when stored) and fire it. ``known``: its run
        as the step that stored the attempt left it (else the run is read after the claim, as
        a stop or a repair may have superseded the attempt since it was stored)."""
        now = self._clock.now_ms()
        stale_before = now - self._stale_ms if stale else None
        if not claimed and not await self._store.workflows.claim(
            attempt.id, self._node_id, now, stale_before
        ):
            return  # another admin has it
        if self.claim_fault is not None:  # (a stored attempt's claim was its insert's)
            await self.claim_fault.claimed(attempt.id)
        wanted = known if known is not None else await self._wanted_context(attempt)
        if wanted is None or wanted.superseded:
            await self._store.workflows.ended([attempt.id], now)
            return
        if attempt.workflow_id is not None:
            await self.children.fire(attempt)
            return
        log_id = await self._store.workflows.log_of_node_run(attempt.id) if stale else None
        if log_id is None:
            try:
                log_id = await self._fire_job(attempt, wanted)
            except IntegrityError:  # a node we took over for dead had recorded it after all
                log_id = await self._store.workflows.log_of_node_run(attempt.id)
            if log_id is None:
                return
        await self._store.workflows.fired(attempt.id, log_id)
        await self.apply(
            attempt.workflow_run_id,
            NodeDispatched(
                attempt.node_key, attempt.attempt, log_id, self._clock.now_ms(), item_of(attempt.item)
            ),
        )
        # A result recorded before the link was (a fast executor, a failed trigger) is applied
        # here; one recorded after it reaches on_results.
        entry = await self._store.logs.get(log_id)
        if stale and self._unsure is not None and entry is not None and unconfirmed(entry):
            # Taken over from an admin that died between recording the run and hearing the
            # executor's answer: it may never have been sent. Left alone it would wait for the
            # lost-run monitor (10 minutes); asked now, it is sent again only if no executor
            # has it (the same run id: a jobring executor that does answers "already received").
            self._unsure.submit([log_id])
        if entry is not None and (
            entry.handle_code != 0 or entry.trigger_code not in (0, HandleCode.SUCCESS)
        ):
            # Read again: the callback stored the handler's context additions on the attempt.
            fresh = await self._store.workflows.node_run(attempt.id)
            linked = replace(fresh or attempt, state=NodeRunState.RUNNING, log_id=log_id)
            await self._finish(
                linked, entry.trigger_code, entry.trigger_msg, entry.handle_code, entry.handle_msg
            )

    async def _wanted_context(self, attempt: NodeRunRecord) -> Wanted | None:
        """The run's context and group, read now (None: the run is gone)."""
        record = await self._store.workflows.get_run(attempt.workflow_run_id)
        if record is None or record.state is None:
            return None
        run = await off_loop_if_large(record.state_chars, run_from_json, record.state)
        return wanted_in(run, attempt, record.job_group, None)

    async def _fire_job(self, attempt: NodeRunRecord, wanted: Wanted) -> int | None:
        """Fire the attempt's job (its own fail-retry off: the engine retries); its log id, or
        None when it could not even be recorded (the attempt is then failed here). The run's
        group is ``wanted.group``: a job moved to another group since the run started is not
        fired (a workflow runs only its own group's jobs: checked at the start, and here at
        each fire, on the job as read with the attempt's step or now)."""
        if wanted.jobs is None:
            job = await self._store.jobs.get(attempt.job_id)
        else:
            job = wanted.jobs.get(attempt.job_id)
        problem = None
        if job is None:
            problem = f"job {attempt.job_id} no longer exists"
        elif job.job_group != wanted.group:
            problem = (f"job {attempt.job_id} is now in another group: a workflow runs only its "
                       "own group's jobs")
        else:
            if attempt.timeout_s is not None:
                job = replace(job, executor_timeout=attempt.timeout_s)
            request = FireRequest(
                job,
                TriggerType.WORKFLOW,
                executor_param=attempt.params,
                fail_retry_count=0,
                workflow_node_run_id=attempt.id,
                workflow_context=wanted.context,
            )
            try:
                async with self._firing:
                    result = await self._trigger.fire(request)
            except TriggerRejected as exc:
                problem = str(exc)
            else:
                if result.log_ids:
                    return result.log_ids[0]
                problem = result.trigger_msg
        await self._store.workflows.ended([attempt.id], self._clock.now_ms())
        await self.apply(
            attempt.workflow_run_id,
            NodeFinished(
                attempt.node_key,
                attempt.attempt,
                Outcome.FAILED,
                self._clock.now_ms(),
                item_of(attempt.item),
                message=f"not fired: {problem}",
            ),
        )
        return None

    async def _kill(self, run_id: int, command: KillJob) -> None:
        attempts = [
            a
            for a in await self._store.workflows.node_runs(run_id)
            if (a.node_key, a.attempt, a.item) == command.key and a.state != NodeRunState.ENDED
        ]
        now = self._clock.now_ms()
        for attempt in attempts:
            await self._store.workflows.ended([attempt.id], now)
            log_id = attempt.log_id or command.run_id
            if log_id is None:
                continue
            entry = await self._store.logs.get(log_id)
            if entry is None or entry.handle_code != 0:
                continue
            if self._executors is not None and entry.executor_address:
                group = await self._store.groups.get(entry.job_group)
                token = (group.access_token if group else None) or None
                answer = await self._executors.kill(
                    entry.executor_address, entry.job_id, token, group.app_name if group else None,
                    runs=run_candidates(entry))
                if not answer.ok:
                    log.warning("workflow run %s: killing run %s failed: %s", run_id, log_id, answer.msg)
            await self._store.logs.record_results(
                [HandleResult(log_id, int(HandleCode.FAIL), STOPPED_BY_WORKFLOW, naive_utc(now))]
            )

    # -- results ------------------------------------------------------------------------------------

    async def on_results(self, results: Sequence[tuple[int, int, str | None]]) -> None:
        """Job runs whose results were just recorded: ``(log id, handle code, handle message)``."""
        by_log = {log_id: (code, msg) for log_id, code, msg in results}
        finishing = [
            self._finish(attempt, HandleCode.SUCCESS, None, *by_log[attempt.log_id])
            for attempt in await self._store.workflows.node_runs_of_logs(list(by_log))
            if attempt.state == NodeRunState.RUNNING and attempt.log_id is not None
        ]
        # Together: the results of one run are applied as one step (see apply).
        await asyncio.gather(*finishing)

    def notify(self, results: Sequence[tuple[int, int, str | None]]) -> None:
        """:meth:`on_results` in the background (the callback answers without waiting for it)."""
        self._spawn(self.on_results(results))

    async def _finish(
        self,
        attempt: NodeRunRecord,
        trigger_code: int,
        trigger_msg: str | None,
        handle_code: int,
        handle_msg: str | None,
    ) -> None:
        event = finished(attempt, trigger_code, trigger_msg, handle_code, handle_msg, self._clock.now_ms())
        with contextlib.suppress(WorkflowRunGone):  # the workflow was deleted meanwhile
            await self.apply(attempt.workflow_run_id, event)
        await self._store.workflows.ended([attempt.id], self._clock.now_ms())

    # -- the sweep ----------------------------------------------------------------------------------

    async def tick(self) -> None:
        now = self._clock.now_ms()
        for attempt in await self._store.workflows.to_fire(now, self._stale_ms):
            try:
                await self._fire(attempt, stale=attempt.state == NodeRunState.FIRING)
            except WorkflowRunGone:
                await self._store.workflows.ended([attempt.id], now)
        for ended in await self._store.workflows.running_with_results():
            try:
                await self._finish(
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

    async def stop(self) -> None:
        await super().stop()
        await self.wait_idle()
