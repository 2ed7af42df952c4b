"""Executor callbacks: record each run's result once, then fire the job's child jobs.

A batch is recorded before it is answered, so a 200 means the results are stored (an
executor whose call fails keeps them in its retry spool). Each item is judged alone: a
log that already has a result is left unchanged (``log repeate callback.``), an unknown
log id is skipped (``log item not found.``). A success fires the job's children (trigger
type PARENT) in the background; the parent's handle message lists them as the reference
does.

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
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from sqlalchemy import select

from jobring.admin.scheduler.failures import alarm_recoveries
from jobring.admin.scheduler.trigger import FireRequest, TriggerService
from jobring.admin.store.records import HandleResult, JobInfo, ResultOutcome
from jobring.admin.store.tables import job_log
from jobring.core.clock import Clock
from jobring.core.enums import HandleCode, TriggerType
from jobring.core.runstate import run_state
from jobring.protocol.models import HandleCallbackParam

if TYPE_CHECKING:
    from jobring.admin.alarms.service import AlarmService
    from jobring.admin.scheduler.monitors import Monitor
    from jobring.admin.store import Store

log = logging.getLogger(__name__)

MSG_REPEAT = "log repeate callback."
MSG_NOT_FOUND = "log item not found."
CHILD_HEADER = ">>>>>>>>>>> Trigger child job <<<<<<<<<<<"


DEFAULT_CHILD_FIRE_BUDGET = 100


@dataclass(frozen=True)
class _ChildPlan:
    """Children to fire when the parent's result is applied, and the tree they belong to."""

    children: list[JobInfo]
    summary: str
    root_run_id: int
    depth: int


@dataclass(frozen=True)
class _ParentRun:
    job_id: int
    root_run_id: int | None
    child_depth: int


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


class CallbackService:
    """Handles ``api/callback`` batches."""

    def __init__(self, store: Store, trigger: TriggerService, clock: Clock, *,
                 alarms: AlarmService | None = None, fail_monitor: Monitor | None = None,
                 child_fire_budget: int = DEFAULT_CHILD_FIRE_BUDGET) -> None:
        self._store = store
        self._child_fire_budget = child_fire_budget
        self._trigger = trigger
        self._clock = clock
        self._alarms = alarms  # recovery alarms
        self._fail_monitor = fail_monitor  # woken by a failed result: retry/alarm without waiting
        self._children_tasks: set[asyncio.Task[None]] = set()
        # For metrics (read at scrape time): callback items received, runs ended by state.
        self.received = 0
        self.ended: dict[str, int] = {}

    async def handle(self, items: Sequence[HandleCallbackParam]) -> list[ResultOutcome]:
        """Record a batch of callbacks; returns one outcome per item."""
        if not items:
            return []
        now = datetime.fromtimestamp(self._clock.now_ms() / 1000, tz=UTC)
        plans = await self._child_plans(items)
        results = []
        for item in items:
            msg = item.handle_msg
            plan = plans.get(item.log_id)
            if plan is not None:
                msg = f"{msg}\n\n{plan.summary}" if msg else plan.summary
            results.append(HandleResult(item.log_id, item.handle_code, msg, now))
        outcomes = await self._store.logs.record_results(results)
        self.received += len(items)
        to_fire: list[FireRequest] = []
        for item, outcome in zip(items, outcomes, strict=True):
            if outcome is ResultOutcome.APPLIED:
                state = run_state(trigger_code=200, handle_code=item.handle_code, handle_msg=item.handle_msg,
                                  now_ms=0).value
                self.ended[state] = self.ended.get(state, 0) + 1
            if outcome is ResultOutcome.REPEAT:
                log.info("%s logId=%s", MSG_REPEAT, item.log_id, extra={"run_id": item.log_id})
            elif outcome is ResultOutcome.NOT_FOUND:
                log.info("%s logId=%s", MSG_NOT_FOUND, item.log_id, extra={"run_id": item.log_id})
            elif (plan := plans.get(item.log_id)) is not None:
                to_fire += [FireRequest(child, TriggerType.PARENT, root_run_id=plan.root_run_id,
                                        child_depth=plan.depth) for child in plan.children]
        if to_fire:
            self._spawn_children(to_fire)
        applied = [i for i, o in zip(items, outcomes, strict=True) if o is ResultOutcome.APPLIED]
        if self._fail_monitor is not None and any(i.handle_code != HandleCode.SUCCESS for i in applied):
            self._fail_monitor.wake()
        recovered = [i.log_id for i in applied if i.handle_code == HandleCode.SUCCESS]
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
        task = asyncio.create_task(work)
        self._children_tasks.add(task)
        task.add_done_callback(self._children_tasks.discard)

    async def _child_plans(self, items: Sequence[HandleCallbackParam]) -> dict[int, _ChildPlan]:
        successes = [i for i in items if i.handle_code == HandleCode.SUCCESS]
        if not successes:
            return {}
        runs = await self._unhandled_runs_of([i.log_id for i in successes])
        parents = await self._store.jobs.get_many({r.job_id for r in runs.values()})
        entries_of = {jid: parse_child_ids(job.child_jobid) for jid, job in parents.items()}
        wanted = {int(e) for entries in entries_of.values() for e in entries if e.isdigit()}
        known = await self._store.jobs.get_many(wanted) if wanted else {}
        plans: dict[int, _ChildPlan] = {}
        for log_id, run in runs.items():
            entries = entries_of.get(run.job_id)
            if entries:
                children = [known[int(e)] for e in entries if e.isdigit() and int(e) in known]
                plans[log_id] = await self._budgeted(log_id, run, entries, children, known)
        return plans

    async def _budgeted(self, log_id: int, run: _ParentRun, entries: list[str], children: list[JobInfo],
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

    async def foreign_logs(
        self, items: Sequence[HandleCallbackParam], allowed: Callable[[int], bool]
    ) -> list[int]:
        """The log ids among ``items`` whose run belongs to a group ``allowed`` refuses
        (unknown ids are not foreign: they are skipped as "not found" anyway)."""
        log_ids = sorted({i.log_id for i in items})
        foreign: list[int] = []
        async with self._store.db.read() as conn:
            for start in range(0, len(log_ids), 500):
                part = log_ids[start:start + 500]
                rows = await conn.execute(
                    select(job_log.c.id, job_log.c.job_group).where(job_log.c.id.in_(part))
                )
                foreign += [int(r.id) for r in rows if not allowed(int(r.job_group))]
        return sorted(foreign)

    async def _unhandled_runs_of(self, log_ids: list[int]) -> dict[int, _ParentRun]:
        """log id -> (job id, tree) for the logs among ``log_ids`` that have no result yet."""
        # One query for the whole batch (the store has no multi-get of logs yet).
        found: dict[int, _ParentRun] = {}
        async with self._store.db.read() as conn:
            for start in range(0, len(log_ids), 500):
                part = log_ids[start:start + 500]
                rows = await conn.execute(
                    select(job_log.c.id, job_log.c.job_id, job_log.c.root_run_id, job_log.c.child_depth)
                    .where(job_log.c.id.in_(part), job_log.c.handle_code == HandleCode.UNKNOWN)
                )
                found.update({int(r.id): _ParentRun(int(r.job_id), r.root_run_id, int(r.child_depth))
                              for r in rows})
        return found

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
        while self._children_tasks:
            await asyncio.gather(*list(self._children_tasks), return_exceptions=True)

    async def close(self) -> None:
        await self.wait_idle()
