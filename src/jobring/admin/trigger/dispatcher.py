"""FireDispatcher: the trigger's executor side.

Resolves fire plans against their executor groups (read by :mod:`.groups`, scheduled and
workflow fires through a short cache, ``group_cache_ms``; addresses refused by the address
policy or unregistered on this node are never called), routes each recorded shard and sends
its /run call through the fast/slow lanes, and turns each answer into the trigger result to
record.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import random
from collections.abc import Awaitable, Sequence
from datetime import UTC
from typing import TYPE_CHECKING, Protocol

from jobring.admin.dispatch.client import ExecutorClient
from jobring.admin.store.records import JobInfo, TriggerResult
from jobring.admin.trigger.fires import (
    MSG_ADDRESS_EMPTY,
    TRIGGER_TYPE_TITLES,
    FirePlan,
    GroupView,
    NotSent,
    TriggerRejected,
    bean_handler,
    dispatch_error_reason,
    msg_no_handler,
)
from jobring.admin.trigger.groups import GroupViews
from jobring.admin.trigger.lanes import DispatchLanes, Lane
from jobring.core.addresses import AddressPolicy, address_key, refused_addresses
from jobring.core.clock import Clock
from jobring.core.enums import AddressType, BlockStrategy, RouteStrategy
from jobring.core.routing import PINNED_STRATEGIES, Router, RouteResult
from jobring.protocol.models import FAIL_CODE, WORKFLOW_CONTEXT_FIELD, ReturnT, TriggerParam, dumps

if TYPE_CHECKING:
    from jobring.admin.store import Store

# The trigger's lines keep the logger name they had before the recorder/dispatcher split
# (log filters and alerting name it).
log = logging.getLogger("jobring.admin.trigger.trigger")

_PROBING = (RouteStrategy.FAILOVER, RouteStrategy.BUSYOVER)  # strategies that call executors first
_SERIAL = BlockStrategy.SERIAL_EXECUTION.value
_MARK_LATE_MS = 1_000  # a scheduled fire sent this late says so in its trigger message
_PER_FIRE = ("logId", "logDateTime", "broadcastIndex", "broadcastTotal", "logicalTime", "dataIntervalStart",
             WORKFLOW_CONTEXT_FIELD)
_BODY_TAIL = b'%s,"logId":%d,"logDateTime":%d,"broadcastIndex":%d,"broadcastTotal":%d}'
# A run's logical time for executors that read it (jobring's); others ignore unknown fields.
_LOGICAL = b',"logicalTime":%d}'
_LOGICAL_INTERVAL = b',"logicalTime":%d,"dataIntervalStart":%d}'
_WORKFLOW_CONTEXT = b',"' + WORKFLOW_CONTEXT_FIELD.encode() + b'":'
_BODIES_KEPT = 20_000  # encoded /run heads kept (one per job fired); all dropped past that


class ShardStarter(Protocol):
    """Turns a recorded run of a job with a shard count into sub-tasks (admin/distributed)."""

    async def start_sharded(self, log_id: int, job: JobInfo, param: str | None) -> str: ...

    async def start_broadcast(
        self, log_id: int, job: JobInfo, param: str | None, executors: Sequence[str]
    ) -> str: ...


def _pinned(plan: FirePlan) -> bool:
    """Whether the plan's runs must run on the executor routed to (a broker executor then gets
    them through its own queue): its strategy chooses one on purpose, or the trigger named the
    addresses."""
    return plan.strategy in PINNED_STRATEGIES or bool(plan.req.address_override)


async def _check_send(plan: FirePlan) -> None:
    """NotSent when the plan's ``send_check`` says no."""
    check = plan.req.send_check
    if check is not None and not await check():
        raise NotSent(f"run of job {plan.req.job.id} not sent: its send check said no")


def _hooked(job: JobInfo) -> bool:
    """A broadcast with hooks: one parent run, not one run per executor."""
    return bool(job.broadcast_pre or job.broadcast_post)


class FireDispatcher:
    """Routes recorded fires and sends their /run calls."""

    # Set by the app: a job with a shard count runs as sub-tasks, not one /run.
    sharding: ShardStarter | None = None

    def __init__(
        self,
        store: Store,
        client: ExecutorClient,
        *,
        node_id: str,
        clock: Clock,
        fast_pool: int = 1000,
        slow_pool: int = 100,
        rng: random.Random | None = None,
        router: Router | None = None,
        group_cache_ms: int = 1_000,
        address_policy: AddressPolicy | None = None,
    ) -> None:
        self._store = store
        self._client = client
        self.node_id = node_id
        self._clock = clock
        # Addresses stored before validation existed (or under a stricter policy now) are
        # not called: checked once per group read, not per fire.
        self._policy = address_policy or AddressPolicy()
        self.lanes = DispatchLanes(clock, fast_size=fast_pool, slow_size=slow_pool)
        self._router = router or Router(rng=rng, beat=client.beat_probe, idle_beat=client.idle_beat_probe)
        self.groups = GroupViews(store, clock, self._policy, group_cache_ms)
        # (appname, address key) of the addresses that unregistered (api/registryRemove)
        # from an appname on this node: never routed to for that appname's groups, even by
        # fires prepared before they left, until they register there again. Per appname: a
        # token of one group registering and removing another group's executor under its
        # own appname takes nothing from the other group.
        self._gone: set[tuple[str, str]] = set()
        # Per job: the fields its /run head was encoded from, and the head.
        self._bodies: dict[int, tuple[tuple[object, ...], bytes]] = {}
        # For metrics (read at scrape time): failed dispatches by reason.
        self.dispatch_errors: dict[str, int] = {}

    # -- executor groups ----------------------------------------------------------------------

    def address_gone(self, app_name: str, address: str) -> None:
        """An executor unregistered from ``app_name``: route nothing more of that appname's
        groups to it, and re-read groups."""
        self._gone.add((app_name, address_key(address)))
        self.groups.forget()

    def address_back(self, app_name: str, address: str, *, v35: bool = False) -> None:
        """An executor (re)registered under ``app_name`` with a token of that appname;
        ``v35`` when it spoke XXL-JOB 3.5 (learned for that appname only)."""
        self._client.learn_dialect(app_name, address, v35=v35)
        key = (app_name, address_key(address))
        if key in self._gone:
            self._gone.discard(key)
            self.groups.forget()

    def forget_groups(self) -> None:
        """Drop the cached executor groups (an address was disabled, a group edited)."""
        self.groups.forget()

    async def resolve(self, plans: list[FirePlan]) -> None:
        """Fill in each plan's addresses, shards and token from its group (TriggerRejected
        for an override outside the group or refused by the address policy: the SSRF guard)."""
        groups = await self.groups.views(plans)
        for plan in plans:
            self._resolve(plan, groups.get(plan.req.job.job_group))

    def _resolve(self, plan: FirePlan, view: GroupView | None) -> None:
        req = plan.req
        handler = bean_handler(req.job)
        addresses, plan.undeclared = view.for_handler(handler) if view else ([], [])
        manual = bool(view and view.group.address_type == AddressType.MANUAL)
        if view is None:
            plan.problem = f"executor group {req.job.job_group} not found"
        else:
            plan.token, plan.app_name = view.token, view.group.app_name
            if req.job.flow is not None or view.group.flow is not None:
                plan.flow = (req.job.flow, view.group.flow)
            if view.refused:
                plan.problem = f"refused executor addresses not called: {', '.join(view.refused)}"
        if req.address_override:
            override = [a.strip() for a in req.address_override if a.strip()]
            off = {address_key(a) for a in (view.group.disabled if view else [])}
            disabled = sorted(a for a in set(override) if address_key(a) in off)
            if disabled:
                raise TriggerRejected(
                    f"addresses disabled in the job's executor group: {', '.join(disabled)}")
            outside = sorted(set(override) - set(view.addresses if view else []))
            outside += [a for a in refused_addresses(override, self._policy) if a not in outside]
            if outside:
                raise TriggerRejected(
                    f"addresses not registered in the job's executor group: {', '.join(outside)}"
                )
            lacking = sorted(set(override) & set(plan.undeclared))
            if lacking:
                raise TriggerRejected(
                    f"executors that do not declare handler '{handler}': {', '.join(lacking)}")
            addresses, manual, plan.undeclared = override, True, []
        plan.addresses, plan.manual_addresses = addresses, manual
        if (req.sharding is None and plan.strategy is RouteStrategy.SHARDING_BROADCAST and addresses
                and not (_hooked(req.job) and self.sharding is not None)):
            plan.shards = [(i, len(addresses)) for i in range(len(addresses))]

    # -- sending --------------------------------------------------------------------------------

    def start(self, plans: Sequence[FirePlan], *, at_once: bool = False) -> list[Awaitable[TriggerResult]]:
        """Start sending every recorded shard of the plans (duplicates skipped); ``settle``
        the returned work for the trigger results. ``at_once``: scheduled fires at their
        instant, written to the executor in this step where possible (no task per fire)."""
        work: list[Awaitable[TriggerResult]] = []
        for plan in plans:
            if plan.duplicate:
                continue
            for shard, log_id in zip(plan.shards, plan.log_ids, strict=True):
                if plan.req.job.shard_count > 0 and self.sharding is not None and self._live(plan):
                    work.append(self._sharded(plan, shard, log_id))
                    continue
                if (plan.strategy is RouteStrategy.SHARDING_BROADCAST and _hooked(plan.req.job)
                        and self.sharding is not None and self._live(plan)):
                    work.append(self._broadcast(plan, shard, log_id))
                    continue
                sent = self._send_now(plan, shard, log_id) if at_once else None
                work.append(sent or self.lanes.run(
                    plan.req.job.id, functools.partial(self._dispatch, plan, shard, log_id)))
        return work

    @staticmethod
    async def settle(work: list[Awaitable[TriggerResult]]) -> list[TriggerResult]:
        """The trigger results of ``start``'s work, in order."""
        if len(work) == 1:  # the usual case at an instant: no task and gather for one call
            return [await work[0]]
        return list(await asyncio.gather(*work)) if work else []

    def _live(self, plan: FirePlan) -> list[str]:
        """The plan's addresses without those that unregistered since it was prepared."""
        if not self._gone or plan.manual_addresses:
            return plan.addresses
        app = plan.app_name or ""
        return [a for a in plan.addresses if (app, address_key(a)) not in self._gone]

    def _route_now(self, plan: FirePlan, shard: tuple[int, int], now_ms: int) -> RouteResult | None:
        """The route, or why there is none, when no probe is needed; None for the strategies
        that probe executors (FAILOVER, BUSYOVER)."""
        if plan.refusal is not None:
            return RouteResult((), plan.refusal)
        addresses = self._live(plan)
        if not addresses:
            handler = bean_handler(plan.req.job)
            if plan.undeclared and handler is not None:
                return RouteResult((), msg_no_handler(plan.app_name, handler))
            return RouteResult((), MSG_ADDRESS_EMPTY)
        if plan.strategy is None:
            return RouteResult((), f"unknown route strategy {plan.req.job.executor_route_strategy!r}")
        preferred = plan.req.preferred_address
        if plan.strategy is RouteStrategy.SHARDING_BROADCAST:
            if preferred is not None and preferred in addresses:
                return RouteResult((preferred,))
            index = shard[0] if shard[0] < len(addresses) else 0
            return RouteResult((addresses[index],))
        if plan.strategy in _PROBING:
            return None
        return self._router.route_now(plan.strategy, plan.req.job.id, addresses, now_ms)

    async def _route(self, plan: FirePlan, shard: tuple[int, int]) -> RouteResult:
        now = self._clock.now_ms()
        route = self._route_now(plan, shard, now)
        if route is None:
            assert plan.strategy is not None
            route = await self._router.route(plan.strategy, plan.req.job.id, self._live(plan), now,
                                             self._client.probes(plan.token, plan.app_name))
        return route

    async def _dispatch(self, plan: FirePlan, shard: tuple[int, int], log_id: int) -> TriggerResult:
        route = await self._route(plan, shard)
        # After the wait for a lane and the probes, if any; before a result is recorded too.
        await _check_send(plan)
        address = route.address
        dispatch_time: int | None = None
        if address is None:
            answer = ReturnT(FAIL_CODE, None)
        else:
            body = self._run_body(plan, shard, log_id)
            dispatch_time = self._clock.now_ms()
            answer = await self._client.run_body_now(address, body, plan.token, plan.app_name,
                                                      pinned=_pinned(plan))
            if not answer.ok:
                answer = await self._client.rerun_if_35(
                    address, self._run_param(plan, shard, log_id), plan.token, plan.app_name, answer)
        return self._result(plan, shard, log_id, route, answer, dispatch_time)

    async def _sharded(self, plan: FirePlan, shard: tuple[int, int], log_id: int) -> TriggerResult:
        assert self.sharding is not None
        await _check_send(plan)
        msg = await self.sharding.start_sharded(log_id, plan.req.job, plan.param)
        route = RouteResult((), msg)  # no one executor: the sub-tasks go to all
        return self._result(plan, shard, log_id, route, ReturnT.success(), self._clock.now_ms())

    async def _broadcast(self, plan: FirePlan, shard: tuple[int, int], log_id: int) -> TriggerResult:
        assert self.sharding is not None
        await _check_send(plan)
        msg = await self.sharding.start_broadcast(log_id, plan.req.job, plan.param, self._live(plan))
        route = RouteResult((), msg)  # every executor, through the parent's parts
        return self._result(plan, shard, log_id, route, ReturnT.success(), self._clock.now_ms())

    def _send_now(
        self, plan: FirePlan, shard: tuple[int, int], log_id: int
    ) -> Awaitable[TriggerResult] | None:
        """Route and write the /run call now when that needs no waiting (a lane slot is
        free, the strategy needs no probe); None otherwise (the caller takes the slow way)."""
        if (not self._live(plan) or plan.strategy is None or plan.strategy in _PROBING
                or plan.req.send_check is not None):
            return None
        job_id = plan.req.job.id
        lane = self.lanes.enter_now(job_id)
        if lane is None:
            return None
        try:
            now = self._clock.now_ms()
            route = self._route_now(plan, shard, now)
            assert route is not None and route.address is not None
            body = self._run_body(plan, shard, log_id)
            pending = self._client.run_body_now(route.address, body, plan.token, plan.app_name,
                                                 pinned=_pinned(plan))
        except BaseException:
            self.lanes.leave(lane, job_id, 0)
            raise
        return self._answered(plan, shard, log_id, route, pending, now, lane)

    async def _answered(
        self, plan: FirePlan, shard: tuple[int, int], log_id: int, route: RouteResult,
        pending: Awaitable[ReturnT], dispatch_time: int, lane: Lane,
    ) -> TriggerResult:
        try:
            answer = await pending
            if not answer.ok and route.address is not None:
                answer = await self._client.rerun_if_35(
                    route.address, self._run_param(plan, shard, log_id), plan.token, plan.app_name, answer)
        finally:
            self.lanes.leave(lane, plan.req.job.id, self._clock.now_ms() - dispatch_time)
        return self._result(plan, shard, log_id, route, answer, dispatch_time)

    def _run_body(self, plan: FirePlan, shard: tuple[int, int], log_id: int) -> bytes:
        """The /run body (a TriggerParam's JSON): the job's constant part is encoded once and
        the fire's own fields spliced in."""
        job = plan.req.job
        key = (job.executor_handler, plan.param, job.executor_block_strategy, job.executor_timeout,
               job.glue_type, job.glue_source, job.glue_updatetime)
        cached = self._bodies.get(job.id)
        if cached is None or cached[0] != key:
            if len(self._bodies) >= _BODIES_KEPT:
                self._bodies.clear()
            constant = self._run_param(plan, shard, log_id).to_dict()
            for name in _PER_FIRE:
                constant.pop(name, None)
            cached = self._bodies[job.id] = (key, dumps(constant)[:-1])
        body = _BODY_TAIL % (cached[1], log_id, plan.trigger_time_ms, shard[0], shard[1])
        logical = plan.logical_ms
        if logical is not None:
            if plan.interval_start_ms is None:
                body = body[:-1] + _LOGICAL % logical
            else:
                body = body[:-1] + _LOGICAL_INTERVAL % (logical, plan.interval_start_ms)
        context = plan.req.workflow_context
        if context is None:  # every run but a workflow node's: nothing more to do
            return body
        return body[:-1] + _WORKFLOW_CONTEXT + dumps(context) + b"}"

    @staticmethod
    def _run_param(plan: FirePlan, shard: tuple[int, int], log_id: int) -> TriggerParam:
        job = plan.req.job
        glue_time = job.glue_updatetime
        return TriggerParam(
            job_id=job.id,
            executor_handler=job.executor_handler or "",
            executor_params=plan.param,
            executor_block_strategy=job.executor_block_strategy or _SERIAL,
            executor_timeout=job.executor_timeout,
            log_id=log_id,
            log_date_time=plan.trigger_time_ms,
            glue_type=job.glue_type,
            glue_source=job.glue_source or "",
            glue_updatetime=0 if glue_time is None else int(glue_time.replace(tzinfo=UTC).timestamp() * 1000),
            broadcast_index=shard[0],
            broadcast_total=shard[1],
            logical_time=plan.logical_ms,
            data_interval_start=plan.interval_start_ms,
            workflow_context=None if plan.req.workflow_context is None else dict(plan.req.workflow_context),
        )

    def _result(
        self, plan: FirePlan, shard: tuple[int, int], log_id: int, route: RouteResult, answer: ReturnT,
        dispatch_time: int | None,
    ) -> TriggerResult:
        address = route.address
        if not answer.ok:
            reason = dispatch_error_reason(address, answer.msg)
            self.dispatch_errors[reason] = self.dispatch_errors.get(reason, 0) + 1
            if address is not None:
                log.warning("trigger of job %s (log %s) at %s failed: %s",
                            plan.req.job.id, log_id, address, answer.msg,
                            extra={"job_id": plan.req.job.id, "run_id": log_id, "address": address,
                                   "node": self.node_id})
        broadcast = plan.strategy is RouteStrategy.SHARDING_BROADCAST
        return TriggerResult(
            log_id=log_id,
            executor_address=address,
            trigger_code=answer.code,
            trigger_msg=self._trigger_msg(plan, shard, route, address, answer, dispatch_time),
            dispatch_time=dispatch_time,
            executor_sharding_param=f"{shard[0]}/{shard[1]}" if broadcast else None,
        )

    def _trigger_msg(
        self, plan: FirePlan, shard: tuple[int, int], route: RouteResult, address: str | None,
        answer: ReturnT, dispatch_time: int | None = None,
    ) -> str:
        job = plan.req.job
        strategy = plan.strategy.value if plan.strategy else str(job.executor_route_strategy)
        if plan.strategy is RouteStrategy.SHARDING_BROADCAST:
            strategy += f"({shard[0]}/{shard[1]})"
        lines = [
            f"Trigger type: {TRIGGER_TYPE_TITLES[plan.req.trigger_type]}",
            f"Admin node: {self.node_id}",
            "Executor registry type: " + ("manual" if plan.manual_addresses else "automatic"),
            f"Executor addresses: [{', '.join(plan.addresses)}]",
            *([f"Executors without handler '{job.executor_handler}': [{', '.join(plan.undeclared)}]"]
              if plan.undeclared else []),
            f"Route strategy: {strategy}",
            f"Block strategy: {job.executor_block_strategy or _SERIAL}",
            f"Timeout: {job.executor_timeout}",
            f"Fail retry count: {plan.retry_count}",
        ]
        if plan.problem:
            lines.append(f"Problem: {plan.problem}")
        planned = plan.req.planned_time
        if planned is not None and dispatch_time is not None and dispatch_time - planned >= _MARK_LATE_MS:
            # Sent late, within the misfire threshold (a database or node outage): says so.
            lines.append(f"Late: sent {dispatch_time - planned} ms after its planned instant")
        lines += ["", ">>>>>>>>>>> Trigger Job <<<<<<<<<<<"]
        if route.msg:
            lines += [route.msg, ""]
        if address is not None:
            lines += [f"address: {address}", f"code: {answer.code}"]
            if answer.msg:  # a successful /run has no message: no "msg: None" line
                lines.append(f"msg: {answer.msg}")
        return "\n".join(lines)
