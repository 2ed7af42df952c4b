"""Executor callbacks: record each run's result once, then fire the job's child jobs.

A batch is recorded before it is answered, so a 200 means the results are stored (an
executor whose call fails keeps them in its retry spool). Each item is judged alone: a
log that already has a result is left unchanged (``log repeate callback.``), an unknown
log id (or, with a token's ``GroupGuard``, a run of a group the token may not report) is
not found and never written (``log item not found.``; the executor API refuses it). The
guard is part of the UPDATE itself, so a run created after the batch was read can never
be written by it. A success fires the job's children (trigger type PARENT) in the
background, once its result is written; the parent's handle message lists them as the
reference does.

Child fires are budgeted per root trigger: each child run records the run its tree started
from (``root_run_id``) and its depth, and the root run counts the child fires of its whole
tree (``child_fires``). Beyond ``child_fire_budget`` (``JOBRING_CHILD_FIRE_BUDGET``) further
children are not fired and the parent's message says why, so a tree of children that fans
out (or a cycle stored before cycles were refused) cannot multiply one trigger into
thousands of runs.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Protocol

import orjson

from jobring.admin.monitors.failures import alarm_recoveries
from jobring.admin.store.records import GroupGuard, HandleResult, JobInfo, ParentLink, ResultOutcome, RunLink
from jobring.admin.trigger.trigger import FireRequest, TriggerService
from jobring.background import Background
from jobring.core.clock import Clock
from jobring.core.enums import HandleCode, TriggerType
from jobring.core.runstate import run_state
from jobring.core.runtext import CHILD_HEADER
from jobring.core.workflow.context import CONTEXT_MAX_BYTES, ContextError, merge_context
from jobring.protocol.models import HandleCallbackParam

if TYPE_CHECKING:
    from jobring.admin.alarms.service import AlarmService
    from jobring.admin.monitors.base import Monitor
    from jobring.admin.store import Store

log = logging.getLogger(__name__)

MSG_REPEAT = "log repeate callback."
MSG_NOT_FOUND = "log item not found."


DEFAULT_CHILD_FIRE_BUDGET = 100
# Items per transaction of a callback batch (the executors send up to 1,000 per request).
CALLBACK_CHUNK = 200
# How long a stop waits for the child fires and recovery alarms in flight.
STOP_WAIT_S = 5.0


@dataclass(frozen=True)
class _ChildPlan:
    """Children to fire when the parent's result is applied, and the tree they belong to."""

    children: list[JobInfo]
    summary: str
    root_run_id: int
    depth: int


def budget_refusal(root_run_id: int, budget: int) -> str:
    """Why a child was not fired: its tree used up the child fires of its root trigger."""
    return (f"not fired: the child jobs of root run {root_run_id} used up their budget of {budget} "
            "child fires (JOBRING_CHILD_FIRE_BUDGET)")


def parse_child_ids(child_jobid: str | None) -> list[str]:
    """The raw comma-separated entries of ``child_jobid`` (blanks dropped)."""
    return [p.strip() for p in (child_jobid or "").split(",") if p.strip()]


def child_summary(entries: Sequence[str], known: dict[int, JobInfo], granted: int | None = None,
                  refusal: str = "") -> str:
    """The lines appended to a successful parent's handle message, one per child entry; of
    the existing children only the first ``granted`` (None: all) are fired, the others
    are reported with ``refusal``."""
    lines = [CHILD_HEADER]
    total = len(entries)
    fired = 0
    for n, entry in enumerate(entries, start=1):
        child = known.get(int(entry)) if entry.isdigit() else None
        if child is None:
            lines.append(f"{n}/{total} [Job ID={entry}], Trigger Fail, Trigger msg: Job ID is illegal")
        elif granted is not None and fired >= granted:
            lines.append(f"{n}/{total} [Job ID={entry}], Trigger Fail, Trigger msg: {refusal}")
        else:
            fired += 1
            lines.append(f"{n}/{total} [Job ID={entry}], Trigger success, Trigger msg: submitted")
    return "\n".join(lines)


def _context_text(item: HandleCallbackParam) -> str | None:
    """A success's workflow context additions as stored (JSON text); None when there are none."""
    if not item.workflow_context or item.handle_code != HandleCode.SUCCESS:
        return None  # additions count only when the attempt succeeds
    return orjson.dumps(item.workflow_context).decode()


def _with_context_checked(item: HandleCallbackParam) -> HandleCallbackParam:
    """A success whose additions are not a valid context (over the cap, nested deeper than the
    context allows, bad keys) becomes a failure saying so (the executor's ``set`` checks
    first; this holds for any executor). A failure's additions are dropped unread: they
    count only on success, and a body nested deeper than the JSON writer goes (the reader
    takes 1,024 levels) must not fail the whole callback batch."""
    if item.handle_code != HandleCode.SUCCESS or item.workflow_context is None:
        return replace(item, workflow_context=None)
    try:
        merge_context({}, item.workflow_context, max_bytes=CONTEXT_MAX_BYTES)
    except ContextError as exc:
        refusal = f"workflow context additions refused: {exc}"
    else:
        return item
    return replace(item, handle_code=int(HandleCode.FAIL), workflow_context=None,
                   handle_msg=f"{item.handle_msg}; {refusal}" if item.handle_msg else refusal)


ResultsListener = Callable[[Sequence[tuple[int, int, str | None]], Mapping[int, str]], None]
"""Told the results a callback batch recorded, and their workflow context additions."""


class CallbackTaker(Protocol):
    """Takes the callbacks that are not a run's result (admin/distributed)."""

    async def take_callbacks(self, items: Sequence[HandleCallbackParam], guard: GroupGuard | None
                             ) -> tuple[list[HandleCallbackParam], set[int]]: ...


class CallbackService:
    """Handles ``api/callback`` batches."""

    def __init__(self, store: Store, trigger: TriggerService, clock: Clock, *,
                 alarms: AlarmService | None = None, fail_monitor: Monitor | None = None,
                 child_fire_budget: int = DEFAULT_CHILD_FIRE_BUDGET, concurrency: int = 2) -> None:
        self._store = store
        self._child_fire_budget = child_fire_budget
        self._trigger = trigger
        self._clock = clock
        self._alarms = alarms  # recovery alarms
        self._fail_monitor = fail_monitor  # woken by a failed result: retry/alarm without waiting
        self._children_tasks = Background(log)
        self._slots = asyncio.Semaphore(concurrency)
        # Told every result this node records, as (log id, handle code, handle message), and
        # the workflow context additions recorded with them by log id: the workflow driver
        # advances the runs whose nodes these are (set by the app).
        self.results_listener: ResultsListener | None = None
        # Takes the root tasks' results of distributed parents (admin/distributed; set by the app).
        self.distributed: CallbackTaker | None = None
        # For metrics (read at scrape time): callback items received, runs ended by state.
        self.received = 0
        self.ended: dict[str, int] = {}

    async def handle(
        self, items: Sequence[HandleCallbackParam], guard: GroupGuard | None = None
    ) -> list[ResultOutcome]:
        """Record a batch of callbacks; returns one outcome per item. ``guard``: the groups
        whose runs the caller's token may report (see ``LogRepository.record_results``).

        The batch is worked through in chunks, each its own short transaction, at most
        ``concurrency`` chunks of all callers at a time and a yield to the event loop between
        chunks: a flood of callbacks neither holds the database nor the loop for long."""
        if not items or (self.distributed is None and guard is None):
            return await self._handle(items, guard)
        if len(items) == 1 and await self._store.logs.writes_lone_result_first():
            # A lone result (what executors send as each run ends) is written at once when it
            # is its run's first, the read below only when it was not (see record_first_result).
            first = await self._handle_first(items[0], guard)
            if first is not None:
                return first
        # One read for what the write needs read first (the runs' groups, for the guard) and
        # for which runs are distributed parents (usually none: then nothing more is read).
        seen, parents = await self._store.logs.callback_targets(
            [i.log_id for i in items], parents=self.distributed is not None)
        if parents and self.distributed is not None:
            # A distributed parent's root task does not end its run: its join does.
            kept, taken = await self.distributed.take_callbacks(items, guard)
            if taken:
                recorded = iter(await self._handle(kept, guard))
                return [ResultOutcome.APPLIED if i.log_id in taken else next(recorded) for i in items]
            return await self._handle(kept, guard)
        return await self._handle(items, guard, seen)

    async def _handle(
        self, items: Sequence[HandleCallbackParam], guard: GroupGuard | None,
        seen: Mapping[int, tuple[int, int]] | None = None,
    ) -> list[ResultOutcome]:
        outcomes: list[ResultOutcome] = []
        for start in range(0, len(items), CALLBACK_CHUNK):
            if start:
                await asyncio.sleep(0)
            async with self._slots:
                outcomes += await self._handle_chunk(items[start:start + CALLBACK_CHUNK], guard, seen)
        return outcomes

    async def _handle_chunk(
        self, items: Sequence[HandleCallbackParam], guard: GroupGuard | None,
        seen: Mapping[int, tuple[int, int]] | None,
    ) -> list[ResultOutcome]:
        items, results = self._results_of(items)
        outcomes = await self._store.logs.record_results(results, guard=guard, seen=seen)
        return await self._follow(items, outcomes)

    async def _handle_first(
        self, item: HandleCallbackParam, guard: GroupGuard | None
    ) -> list[ResultOutcome] | None:
        """The one item recorded and followed if it is its run's first result, of a run the
        guard allows and no distributed parent (see ``LogRepository.record_first_result``);
        None, nothing done, otherwise."""
        items, results = self._results_of([item])
        async with self._slots:
            written = await self._store.logs.record_first_result(results[0], guard)
            if written is None:
                return None
            # Its job's child jobs and recovery alarm came back with the write: not read again
            # while the workflow driver applies the result on the same loop.
            success = items[0].handle_code == HandleCode.SUCCESS
            parents = {item.log_id: written.parent} if success and written.parent is not None else {}
            return await self._follow(items, [ResultOutcome.APPLIED], parents)

    def _results_of(
        self, items: Sequence[HandleCallbackParam]
    ) -> tuple[list[HandleCallbackParam], list[HandleResult]]:
        """The items (their context additions checked) and the results to record of them."""
        now = datetime.fromtimestamp(self._clock.now_ms() / 1000, tz=UTC)
        checked = [_with_context_checked(i) if i.workflow_context is not None else i for i in items]
        return checked, [HandleResult(i.log_id, i.handle_code, i.handle_msg, now, _context_text(i))
                         for i in checked]

    async def _follow(
        self, items: Sequence[HandleCallbackParam], outcomes: list[ResultOutcome],
        parents: Mapping[int, ParentLink] | None = None,
    ) -> list[ResultOutcome]:
        """What follows the recorded results (logs, counts, listeners, children, alarms);
        ``parents``: the successes' parent links when known (None: read here)."""
        self.received += len(items)
        applied = [i for i, o in zip(items, outcomes, strict=True) if o is ResultOutcome.APPLIED]
        missing = [i.log_id for i, o in zip(items, outcomes, strict=True) if o is ResultOutcome.NOT_FOUND]
        if len(missing) > 1:
            # One line for a chunk of unknown ids (a flood must not become a flood of log lines).
            log.info("%s logIds=%s (%d)", MSG_NOT_FOUND, missing[:10], len(missing))
        for item, outcome in zip(items, outcomes, strict=True):
            if outcome is ResultOutcome.REPEAT:
                log.info("%s logId=%s", MSG_REPEAT, item.log_id, extra={"run_id": item.log_id})
            elif outcome is ResultOutcome.NOT_FOUND and len(missing) == 1:
                log.info("%s logId=%s", MSG_NOT_FOUND, item.log_id, extra={"run_id": item.log_id})
        for item in applied:
            state = run_state(trigger_code=200, handle_code=item.handle_code, handle_msg=item.handle_msg,
                              now_ms=0).value
            self.ended[state] = self.ended.get(state, 0) + 1
        # What follows a result (children, retry wake-up, recovery alarms, workflows) follows
        # only the rows this node's write really changed.
        if self.results_listener is not None and applied:
            # With the context additions each result recorded: the workflow driver then applies
            # a result of an attempt it fired itself without reading the attempt back.
            contexts = {i.log_id: text for i in applied if (text := _context_text(i)) is not None}
            self.results_listener([(i.log_id, i.handle_code, i.handle_msg) for i in applied], contexts)
        successes = [i for i in applied if i.handle_code == HandleCode.SUCCESS]
        if parents is None:
            parents = await self._store.logs.parent_links({i.log_id for i in successes}) if successes else {}
        plans = await self._child_plans(parents)
        if plans:
            messages = {i.log_id: f"{i.handle_msg}\n\n{plan.summary}" if i.handle_msg else plan.summary
                        for i in applied if (plan := plans.get(i.log_id)) is not None}
            await self._store.logs.append_handle_msgs(messages)
            to_fire = [FireRequest(child, TriggerType.PARENT, root_run_id=p.root_run_id, child_depth=p.depth)
                       for p in plans.values() for child in p.children]
            if to_fire:
                self._spawn_children(to_fire)
        if self._fail_monitor is not None and any(i.handle_code != HandleCode.SUCCESS for i in applied):
            self._fail_monitor.wake()
        # Only the jobs that ask for recovery alarms (read with the children, just above).
        recovered = [i.log_id for i in successes
                     if (parent := parents.get(i.log_id)) is not None and parent.alarm_recovery]
        if self._alarms is not None and recovered:
            self._spawn(self._recoveries(recovered))
        return outcomes

    async def _recoveries(self, log_ids: list[int]) -> None:
        assert self._alarms is not None
        try:
            await alarm_recoveries(self._store, self._alarms, log_ids, self._clock.now_ms())
        except Exception:
            log.exception("recovery alarms for runs %s failed", log_ids[:10])

    def _spawn(self, work: Coroutine[Any, Any, None]) -> None:
        self._children_tasks.spawn(work, "child jobs or recovery alarms")

    async def _child_plans(self, parents: Mapping[int, ParentLink]) -> dict[int, _ChildPlan]:
        """The children of the runs whose success was just recorded (their budget taken)."""
        entries_of = {log_id: parse_child_ids(p.child_jobid) for log_id, p in parents.items()}
        wanted = {int(e) for entries in entries_of.values() for e in entries if e.isdigit()}
        known = await self._store.jobs.get_many(wanted) if wanted else {}
        plans: dict[int, _ChildPlan] = {}
        for log_id, parent in parents.items():
            entries = entries_of[log_id]
            if entries:
                children = [known[int(e)] for e in entries if e.isdigit() and int(e) in known]
                plans[log_id] = await self._budgeted(log_id, parent.link, entries, children, known)
        return plans

    async def _budgeted(self, log_id: int, run: RunLink, entries: list[str], children: list[JobInfo],
                        known: dict[int, JobInfo]) -> _ChildPlan:
        """The plan of one parent run: as many children as its tree's budget still allows."""
        root = run.root_run_id or log_id
        budget = self._child_fire_budget
        granted = await self._store.logs.reserve_child_fires(root, len(children), budget)
        refusal = ""
        if granted < len(children):
            refusal = budget_refusal(root, budget)
            log.warning("run %s of job %s: %d of %d child jobs not fired (root run %s, budget %d)", log_id,
                        run.job_id, len(children) - granted, len(children), root, budget,
                        extra={"run_id": log_id, "job_id": run.job_id})
        summary = child_summary(entries, known, granted, refusal)
        return _ChildPlan(children[:granted], summary, root, run.child_depth + 1)

    def _spawn_children(self, reqs: list[FireRequest]) -> None:
        self._spawn(self._fire_children(reqs))

    async def _fire_children(self, reqs: list[FireRequest]) -> None:
        try:
            results = await self._trigger.fire_batch(reqs)
        except Exception:
            log.exception("firing child jobs %s failed", [r.job.id for r in reqs])
            return
        for req, result in zip(reqs, results, strict=True):
            if result.trigger_code != 200:
                log.warning("child job %s trigger failed (logs %s)", req.job.id, result.log_ids,
                            extra={"job_id": req.job.id})

    async def wait_idle(self) -> None:
        """Wait until the child fires started so far are done (tests, shutdown)."""
        await self._children_tasks.wait()

    async def close(self) -> None:
        """At the admin's stop: wait briefly (``STOP_WAIT_S``) for the child fires and recovery
        alarms started so far, then cancel those still running (they must not outlive the
        trigger service, the alarms and the store they use)."""
        await self._children_tasks.stop(STOP_WAIT_S, "child jobs or recovery alarms")
