"""FireRecorder: the trigger's run-log side.

Plans fires and records their log rows before anything is sent: one row per request in one
insert (the first row carries the fire's identity, job id + planned instant, a unique key:
a fire another node already recorded comes back ``duplicate``), then the other shards of a
broadcast. It withdraws rows of prepared fires that will not be sent, and writes trigger
results, at once or (``record_later``) in batches every ``result_flush_ms``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING

from jobring.admin.store.errors import public_reason
from jobring.admin.store.records import NewLog, TriggerResult
from jobring.admin.trigger.fires import FirePlan, FireRequest, TriggerRejected, sent_instant
from jobring.admin.trigger.logical import (
    default_logical_ms,
    logical_of,
    params_templated,
    render_params,
)
from jobring.core.clock import Clock
from jobring.core.enums import RouteStrategy, TriggerType
from jobring.core.routing import parse_strategy
from jobring.core.timefmt import naive_utc_ms

if TYPE_CHECKING:
    from jobring.admin.store import Store

# The trigger's lines keep the logger name they had before the recorder/dispatcher split
# (log filters and alerting name it).
log = logging.getLogger("jobring.admin.trigger.trigger")

_MANUAL_KINDS = (TriggerType.MANUAL, TriggerType.DELAYED)  # fires a person asked for

Resolver = Callable[[list[FirePlan]], Awaitable[None]]
"""Resolves plans against their executor groups (the dispatcher's ``resolve``)."""


def _unresolved(plans: Sequence[FirePlan], exc: BaseException) -> None:
    """Recorded but no addresses: each fire fails visibly (and is retried/alarmed)."""
    log.error("reading executor groups failed: %s", exc)
    # The run's message is shown in the console: a database error's text (its SQL and
    # parameters) stays in this log.
    problem = f"could not read the executor group: {public_reason(exc)}"
    for plan in plans:
        plan.problem = problem


class FireRecorder:
    """Plans fires and writes (or withdraws) their run-log rows and trigger results."""

    def __init__(self, store: Store, *, node_id: str, clock: Clock, resolve: Resolver,
                 result_flush_ms: int = 100, admin_timezone: str = "UTC") -> None:
        self._store = store
        self._admin_timezone = admin_timezone  # the zone of jobs without their own
        self.node_id = node_id
        self._clock = clock
        self._resolve = resolve
        # Trigger results of scheduled fires are written in batches off the fire's path.
        self._result_flush_s = result_flush_ms / 1000
        self._pending: list[TriggerResult] = []
        self._wanted = asyncio.Event()
        self._writer: asyncio.Task[None] | None = None
        self._flush_lock = asyncio.Lock()

    # -- log rows -----------------------------------------------------------------------------

    async def prepare(self, reqs: Sequence[FireRequest]) -> list[FirePlan]:
        """Plan the requests and record their log rows (resolving their groups meanwhile).
        TriggerRejected for a request that must not run; raising otherwise: none recorded."""
        now_ms = self._clock.now_ms()
        plans = [self._plan(r, now_ms, self._admin_timezone) for r in reqs]
        if any(r.address_override for r in reqs):
            # A manual address list is checked against the group before anything is recorded.
            await self._resolve(plans)
            await self._insert_identities(plans)
        else:
            resolved, inserted = await asyncio.gather(
                self._resolve(plans), self._insert_identities(plans), return_exceptions=True)
            if isinstance(inserted, BaseException):
                raise inserted  # nothing recorded
            if isinstance(resolved, BaseException):
                _unresolved(plans, resolved)
        await self._insert_other_shards(plans)
        return plans

    async def adopt(self, req: FireRequest, log_id: int, trigger_time_ms: int) -> FirePlan:
        """Plan a request whose run-log row is recorded already (``log_id``, stamped
        ``trigger_time_ms``: a workflow step recorded it with its node attempt, see
        ``store.workflows.FireRows``) and resolve its group, as :meth:`prepare` does."""
        plan = self._plan(req, trigger_time_ms, self._admin_timezone)
        plan.trigger_time_ms = trigger_time_ms  # the row's stamp is the run's identity
        plan.log_ids.append(log_id)
        try:
            await self._resolve([plan])
        except Exception as exc:
            _unresolved([plan], exc)
        await self._insert_other_shards([plan])
        return plan

    async def withdraw(self, plans: Sequence[FirePlan]) -> int:
        """Delete the plans' log rows (while this node holds the jobs' leases); the count."""
        ids = [i for plan in plans for i in plan.log_ids]
        if not ids:
            return 0
        return await self._store.fires.withdraw(ids, holder=self.node_id)

    @staticmethod
    def _plan(req: FireRequest, now_ms: int, admin_timezone: str) -> FirePlan:
        job = req.job
        if req.address_override and req.trigger_type not in _MANUAL_KINDS:
            raise TriggerRejected("an address list may be given only with a manual or delayed trigger")
        param = req.executor_param if req.executor_param is not None else (job.executor_param or "")
        retry = req.fail_retry_count if req.fail_retry_count is not None else job.executor_fail_retry_count
        # A scheduled fire prepared ahead is logged at its planned instant (the executor files
        # its run log under that day); a late one (misfire) at the second it really runs.
        planned = req.planned_time
        plan = FirePlan(req, parse_strategy(job.executor_route_strategy), param, max(retry, 0),
                        sent_instant(planned, now_ms))
        logical = req.logical_time
        if logical is None:
            logical = default_logical_ms(req.trigger_type, planned)
        plan.logical_ms, plan.interval_start_ms = logical, req.data_interval_start
        if job.timing is not None and params_templated(job):
            when = logical_of(job, logical, req.data_interval_start, now_ms, admin_timezone)
            plan.logical_ms, plan.interval_start_ms = when.logical_ms, when.interval_start_ms
            try:
                plan.param = render_params(param, when)
            except ValueError as exc:
                # Recorded and failed visibly (never sent with the unrendered text).
                plan.refusal = f"Trigger Fail: the params template does not render: {exc}"
        return plan

    def _new_log(self, plan: FirePlan, shard: tuple[int, int] | None, identity: bool) -> NewLog:
        job = plan.req.job
        broadcast = plan.strategy is RouteStrategy.SHARDING_BROADCAST
        return NewLog(
            job_group=job.job_group,
            job_id=job.id,
            trigger_time=naive_utc_ms(plan.trigger_time_ms),
            executor_handler=job.executor_handler,
            executor_param=plan.param,
            executor_sharding_param=f"{shard[0]}/{shard[1]}" if broadcast and shard else None,
            executor_fail_retry_count=plan.retry_count,
            trigger_type=plan.req.trigger_type.value,
            attempt=plan.req.attempt,
            # Only the first row of a broadcast carries the identity (the key is unique).
            planned_time=plan.req.planned_time if identity else None,
            admin_node=self.node_id,
            root_run_id=plan.req.root_run_id,
            child_depth=plan.req.child_depth,
            retry_of=plan.req.retry_of,
            workflow_node_run_id=plan.req.workflow_node_run_id if identity else None,
            # Kept on the row when it is not the planned instant (backfills, templated params).
            logical_time=plan.logical_ms if plan.logical_ms != plan.req.planned_time else None,
            data_interval_start=plan.interval_start_ms,
            backfill_id=plan.req.backfill_id if identity else None,
            sent_time=plan.trigger_time_ms,
        )

    async def _insert_identities(self, plans: list[FirePlan]) -> None:
        """One row per request, in one insert: the fire's identity; duplicates are marked."""
        firsts = [self._new_log(p, p.req.sharding, identity=True) for p in plans]
        for plan, log_id in zip(plans, await self._store.logs.insert_fires(firsts), strict=True):
            if log_id is None:
                plan.duplicate = True
            else:
                plan.log_ids.append(log_id)

    async def _insert_other_shards(self, plans: list[FirePlan]) -> None:
        owners = [(p, shard) for p in plans if not p.duplicate for shard in p.shards[1:]]
        if not owners:
            return
        try:
            rows = [self._new_log(p, s, identity=False) for p, s in owners]
            ids = await self._store.logs.insert_fires(rows)
        except Exception as exc:
            # The fires are recorded (first shards): run those, say why the others did not.
            log.exception("recording the other shards of a broadcast failed")
            for plan, _ in owners:
                plan.shards = plan.shards[:1]
                plan.problem = f"the other shards could not be recorded: {public_reason(exc)}"
            return
        for (plan, _), log_id in zip(owners, ids, strict=True):
            if log_id is None:  # cannot happen without an identity; keep the count honest
                raise RuntimeError(f"shard log of job {plan.req.job.id} was not inserted")
            plan.log_ids.append(log_id)

    # -- trigger results ----------------------------------------------------------------------

    async def write_results(self, results: list[TriggerResult]) -> None:
        """Write trigger results now."""
        if results:
            await self._store.logs.update_trigger_results(results)

    def write_later(self, results: list[TriggerResult]) -> None:
        """Write trigger results with the next batch (every ``result_flush_ms``)."""
        if not results:
            return
        self._pending.extend(results)
        self._wanted.set()
        if self._writer is None or self._writer.done():
            self._writer = asyncio.get_running_loop().create_task(
                self._run_writer(), name="jobring-trigger-results")

    async def flush(self) -> int:
        """Write the trigger results waiting to be recorded; returns how many."""
        async with self._flush_lock:
            pending, self._pending = self._pending, []
            if not pending:
                return 0
            try:
                await self._store.logs.update_trigger_results(pending)
            except BaseException:
                self._pending[:0] = pending  # kept for the next flush
                raise
            return len(pending)

    async def _run_writer(self) -> None:
        backoff = self._result_flush_s
        while True:
            await self._wanted.wait()
            await asyncio.sleep(backoff)  # gather a flush interval's worth of results
            self._wanted.clear()
            try:
                await self.flush()
                backoff = self._result_flush_s
            except asyncio.CancelledError:
                raise
            except Exception:
                backoff = min(5.0, max(backoff * 2, 0.2))
                log.exception("recording trigger results failed; retrying in %.1f s", backoff)
                self._wanted.set()

    async def close(self) -> None:
        """Stop the batch writer and write what is pending."""
        if self._writer is not None:
            self._writer.cancel()
            await asyncio.gather(self._writer, return_exceptions=True)
            self._writer = None
        await self.flush()
