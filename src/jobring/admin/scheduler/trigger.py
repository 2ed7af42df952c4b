"""TriggerService: turn fire requests into run-log rows and executor /run calls.

Every run gets its log row before the executor is called. Scheduled fires carry their
planned instant; with the job id it is the fire's identity (a unique key of the log), so
a fire that another admin node already recorded is dropped here, not dispatched twice.
Rows are inserted in one batch, then dispatched concurrently through the fast/slow lanes,
then their trigger results are recorded in one batch. ``fire_batch`` does all of it at
once; ``prepare_batch`` + ``dispatch_prepared`` split it so the database work can be done
before the planned instant and only the /run call is left at the instant (the scheduling
loop does this; with ``record_later`` the trigger results are then written in batches
every ``result_flush_ms`` instead of one update per dispatch). Scheduled fires read their
executor group through a short cache (``group_cache_ms``).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import random
from collections.abc import Awaitable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from jobring.admin.scheduler.dispatch import ExecutorClient
from jobring.admin.scheduler.lanes import DispatchLanes, Lane
from jobring.admin.store.records import JobGroup, JobInfo, NewLog, TriggerResult
from jobring.core.addresses import AddressPolicy, refused_addresses
from jobring.core.clock import Clock
from jobring.core.enums import AddressType, BlockStrategy, RouteStrategy, TriggerType
from jobring.core.routing import Router, RouteResult, parse_strategy
from jobring.protocol.models import FAIL_CODE, ReturnT, TriggerParam

if TYPE_CHECKING:
    from jobring.admin.store import Store

log = logging.getLogger(__name__)

TRIGGER_TYPE_TITLES = {
    TriggerType.MANUAL: "Manual trigger",
    TriggerType.CRON: "Cron trigger",
    TriggerType.RETRY: "Fail retry trigger",
    TriggerType.PARENT: "Parent job trigger",
    TriggerType.API: "Api trigger",
    TriggerType.MISFIRE: "Misfire compensation trigger",
    TriggerType.DELAYED: "Delayed trigger",
}
MSG_ADDRESS_EMPTY = "Trigger Fail: registry address is empty"
_MANUAL_KINDS = (TriggerType.MANUAL, TriggerType.DELAYED)  # fires a person asked for
_PROBING = (RouteStrategy.FAILOVER, RouteStrategy.BUSYOVER)  # strategies that call executors first


class TriggerRejected(ValueError):
    """A fire request that must not be carried out (e.g. an address outside the group)."""


@dataclass(frozen=True)
class FireRequest:
    """One fire of one job.

    ``planned_time`` (epoch ms) is set for scheduled fires: with ``job.id`` it is the fire's
    identity. ``address_override`` (MANUAL only) must be a subset of the group's addresses.
    ``fail_retry_count`` None means the job's own count.
    """

    job: JobInfo
    trigger_type: TriggerType
    planned_time: int | None = None
    executor_param: str | None = None
    address_override: list[str] | None = None
    fail_retry_count: int | None = None
    sharding: tuple[int, int] | None = None  # a retry re-runs one shard (index, total)
    attempt: int = 1  # 1 = first run, 2 = first retry, ...
    preferred_address: str | None = None  # a shard's retry goes back there while it is routable


@dataclass(frozen=True)
class FireResult:
    """What became of one request: its log ids, or ``duplicate`` when another node fired it."""

    log_ids: list[int]
    duplicate: bool
    trigger_code: int
    trigger_msg: str


@dataclass(frozen=True)
class _GroupView:
    """A group as dispatch uses it: the addresses the policy admits and the token to send."""

    group: JobGroup
    addresses: list[str]
    refused: list[str]
    token: str | None


@dataclass
class _Plan:
    """A request, then resolved against its group: the address list and the shards to run."""

    req: FireRequest
    strategy: RouteStrategy | None
    param: str
    retry_count: int
    trigger_time_ms: int
    addresses: list[str] = field(default_factory=list)
    manual_addresses: bool = False
    shards: list[tuple[int, int]] = field(default_factory=lambda: [(0, 1)])
    problem: str | None = None  # why no address could be had (shown in the trigger message)
    token: str | None = None  # the executor token of the job's group (else the global one)
    app_name: str | None = None  # the group's appname (a 3.5 executor wants it in a header)
    log_ids: list[int] = field(default_factory=list)
    duplicate: bool = False


class PreparedBatch:
    """Fires whose log rows are recorded and not yet dispatched (see ``prepare_batch``)."""

    def __init__(self, plans: list[_Plan]) -> None:
        self.plans = plans
        self.state = "prepared"

    def split(self) -> list[PreparedBatch]:
        """One prepared batch per request (in order), so each can be sent at its own instant.
        This batch is then used up (state "split")."""
        if self.state != "prepared":
            raise RuntimeError(f"prepared batch already {self.state}")
        self.state = "split"
        return [PreparedBatch([plan]) for plan in self.plans]

    @staticmethod
    def merge(batches: Sequence[PreparedBatch]) -> PreparedBatch:
        """The prepared batches as one (each is used up, state "merged")."""
        plans: list[_Plan] = []
        for batch in batches:
            if batch.state != "prepared":
                raise RuntimeError(f"prepared batch already {batch.state}")
            batch.state = "merged"
            plans.extend(batch.plans)
        return PreparedBatch(plans)

    @property
    def duplicates(self) -> list[bool]:
        """Per request: True when the planned fire was already recorded (it will not run)."""
        return [p.duplicate for p in self.plans]

    @property
    def log_ids(self) -> list[list[int]]:
        return [list(p.log_ids) for p in self.plans]


@dataclass(frozen=True)
class _Dispatched:
    result: TriggerResult
    plan: _Plan


def dispatch_error_reason(address: str | None, msg: str | None) -> str:
    """A failed dispatch's reason, for metrics: no_address, unreachable, timeout, http_error,
    bad_answer or refused (the executor answered with a failure code)."""
    if address is None:
        return "no_address"
    text = msg or ""
    for marker, reason in ((" unreachable (", "unreachable"), (" timed out (", "timeout"),
                           (" answered HTTP ", "http_error"), ("not a ReturnT", "bad_answer")):
        if marker in text:
            return reason
    return "refused"


def _ms_to_datetime(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, tz=UTC).replace(tzinfo=None)


def _datetime_to_ms(value: datetime | None) -> int:
    if value is None:
        return 0
    return int(value.replace(tzinfo=UTC).timestamp() * 1000)


class TriggerService:
    """Fires jobs: log rows first, then /run through the lanes, then the recorded answers."""

    def __init__(
        self,
        store: Store,
        client: ExecutorClient,
        *,
        access_token: str | None,
        node_id: str,
        clock: Clock,
        admin_timezone: str,
        fast_pool: int = 200,
        slow_pool: int = 100,
        rng: random.Random | None = None,
        router: Router | None = None,
        group_cache_ms: int = 1_000,
        result_flush_ms: int = 100,
        address_policy: AddressPolicy | None = None,
    ) -> None:
        self._store = store
        self._client = client
        # The global token (None: not enabled); a group's own token goes out instead when it
        # has one (resolved with the cached group, so no extra query per fire).
        self.access_token = access_token
        # Addresses stored before validation existed (or under a stricter policy now) are
        # not called: checked once per group read, not per fire.
        self._policy = address_policy or AddressPolicy()
        self.node_id = node_id
        self._clock = clock
        self.admin_timezone = admin_timezone
        self._lanes = DispatchLanes(clock, fast_size=fast_pool, slow_size=slow_pool)
        self._router = router or Router(
            rng=rng, beat=client.beat_probe, idle_beat=client.idle_beat_probe
        )
        self._in_flight: set[asyncio.Task[list[FireResult]]] = set()
        self._closed = False
        # Scheduled fires read executor groups through a short-lived cache (one read per
        # group per ``group_cache_ms`` instead of one per batch); manual and API fires, and
        # every address override check, read the group fresh.
        self._group_cache_ms = group_cache_ms
        self._group_cache: dict[int, tuple[int, _GroupView | None]] = {}
        # Addresses that unregistered (api/registryRemove) on this node: never routed to,
        # even by fires prepared before they left, until they register again.
        self._gone: set[str] = set()
        # Trigger results of scheduled fires are written in batches off the fire's path.
        self._result_flush_s = result_flush_ms / 1000
        self._pending_results: list[TriggerResult] = []
        self._results_wanted = asyncio.Event()
        self._recorder: asyncio.Task[None] | None = None
        self._flush_lock = asyncio.Lock()
        # For metrics (read at scrape time): failed dispatches by reason; fires requested
        # through ``fire_batch`` (manual, API, retry, parent) by trigger type.
        self.dispatch_errors: dict[str, int] = {}
        self.requested: dict[str, int] = {}

    @property
    def lanes(self) -> DispatchLanes:
        return self._lanes

    def address_gone(self, address: str) -> None:
        """An executor unregistered: route nothing more to it, and re-read groups."""
        self._gone.add(address)
        self._group_cache.clear()

    def address_back(self, address: str, app_name: str | None = None) -> None:
        """An executor (re)registered; ``app_name`` when it spoke XXL-JOB 3.5 (see
        ``ExecutorClient.learn_dialect``)."""
        self._client.learn_dialect(address, app_name)
        if address in self._gone:
            self._gone.discard(address)
            self._group_cache.clear()

    def forget_groups(self) -> None:
        """Drop the cached executor groups (an address was disabled, a group edited)."""
        self._group_cache.clear()

    async def fire(self, req: FireRequest) -> FireResult:
        """Fire one request; raises TriggerRejected for a request that must not run."""
        return (await self.fire_batch([req]))[0]

    async def fire_batch(self, reqs: Sequence[FireRequest]) -> list[FireResult]:
        """Insert the batch's log rows in one go, dispatch them, record the answers.

        Planned fires already recorded (by this or another node) come back ``duplicate``
        and are not dispatched. Returns once every dispatch answer is recorded.
        """
        if self._closed:
            raise RuntimeError("TriggerService is closed")
        for req in reqs:
            self.requested[req.trigger_type] = self.requested.get(req.trigger_type, 0) + 1
        task = asyncio.ensure_future(self._fire_batch(list(reqs)))
        self._in_flight.add(task)
        task.add_done_callback(self._in_flight.discard)
        # Shielded: a caller that is cancelled must not leave inserted rows undispatched.
        return await asyncio.shield(task)

    async def prepare_batch(self, reqs: Sequence[FireRequest]) -> PreparedBatch:
        """Record the batch's log rows now and dispatch them later with ``dispatch_prepared``.

        For precision: the database work happens before the planned instant, so at the
        instant only routing and the /run call remain. Duplicates are known on return
        (``PreparedBatch.duplicates``). A prepared batch must be dispatched or cancelled;
        one left alone because the node died is settled by the node that takes the job over
        (see :mod:`jobring.admin.scheduler.loop`, "Takeover").
        """
        if self._closed:
            raise RuntimeError("TriggerService is closed")
        plans = await self._prepare(list(reqs))
        return PreparedBatch(plans)

    async def dispatch_prepared(
        self, batch: PreparedBatch, *, record_later: bool = False
    ) -> list[FireResult]:
        """Dispatch a prepared batch (once); returns when the answers are recorded, or with
        ``record_later`` as soon as the executors answered (the answers are then written in
        batches every ``result_flush_ms``, and by ``flush_results`` / ``close``)."""
        if batch.state != "prepared":
            raise RuntimeError(f"prepared batch already {batch.state}")
        batch.state = "dispatched"
        task = asyncio.ensure_future(self._dispatch_plans(batch.plans, record_later=record_later))
        self._in_flight.add(task)
        task.add_done_callback(self._in_flight.discard)
        return await asyncio.shield(task)

    async def cancel_prepared(self, batch: PreparedBatch) -> int:
        """Withdraw a prepared batch (e.g. its job was stopped or edited before the instant):
        its log rows are deleted, so the planned instants are free again, as long as this node
        holds the jobs' leases (see ``FireRepository.withdraw``). Returns the count."""
        if batch.state != "prepared":
            raise RuntimeError(f"prepared batch already {batch.state}")
        batch.state = "cancelled"
        ids = [i for plan in batch.plans for i in plan.log_ids]
        if not ids:
            return 0
        return await self._store.fires.withdraw(ids, holder=self.node_id)

    async def flush_results(self) -> int:
        """Write the trigger results waiting to be recorded (``record_later``); returns how many."""
        async with self._flush_lock:
            pending, self._pending_results = self._pending_results, []
            if not pending:
                return 0
            try:
                await self._store.logs.update_trigger_results(pending)
            except BaseException:
                self._pending_results[:0] = pending  # kept for the next flush
                raise
            return len(pending)

    async def _run_recorder(self) -> None:
        backoff = self._result_flush_s
        while True:
            await self._results_wanted.wait()
            await asyncio.sleep(backoff)  # gather a flush interval's worth of results
            self._results_wanted.clear()
            try:
                await self.flush_results()
                backoff = self._result_flush_s
            except asyncio.CancelledError:
                raise
            except Exception:
                backoff = min(5.0, max(backoff * 2, 0.2))
                log.exception("recording trigger results failed; retrying in %.1f s", backoff)
                self._results_wanted.set()

    def _record_later(self, results: list[TriggerResult]) -> None:
        self._pending_results.extend(results)
        self._results_wanted.set()
        if self._recorder is None or self._recorder.done():
            self._recorder = asyncio.get_running_loop().create_task(
                self._run_recorder(), name="jobring-trigger-results")

    async def close(self) -> None:
        """Refuse new fires, wait for the ones in flight and record their results."""
        self._closed = True
        if self._in_flight:
            await asyncio.gather(*self._in_flight, return_exceptions=True)
        if self._recorder is not None:
            self._recorder.cancel()
            await asyncio.gather(self._recorder, return_exceptions=True)
            self._recorder = None
        await self.flush_results()

    # -- planning ---------------------------------------------------------------------------

    def _view(self, group: JobGroup | None) -> _GroupView | None:
        if group is None:
            return None
        addresses = group.routable_addresses
        refused = refused_addresses(addresses, self._policy) if addresses else []
        if refused:
            log.warning("executor group %s: not calling refused addresses %s", group.id, refused)
            addresses = [a for a in addresses if a not in refused]
        return _GroupView(group, addresses, refused, group.access_token or self.access_token)

    async def _groups(self, reqs: Sequence[FireRequest]) -> dict[int, _GroupView | None]:
        ids = {r.job.job_group for r in reqs}
        cacheable = self._group_cache_ms > 0 and all(
            r.planned_time is not None and not r.address_override for r in reqs)
        now = self._clock.now_ms()
        groups: dict[int, _GroupView | None] = {}
        for group_id in ids:
            cached = self._group_cache.get(group_id) if cacheable else None
            if cached is not None and now - cached[0] < self._group_cache_ms:
                groups[group_id] = cached[1]
                continue
            groups[group_id] = view = self._view(await self._store.groups.get(group_id))
            self._group_cache[group_id] = (now, view)
        return groups

    def _plan(self, req: FireRequest, now_ms: int) -> _Plan:
        job = req.job
        if req.address_override and req.trigger_type not in _MANUAL_KINDS:
            raise TriggerRejected("an address list may be given only with a manual or delayed trigger")
        param = req.executor_param if req.executor_param is not None else (job.executor_param or "")
        retry = req.fail_retry_count if req.fail_retry_count is not None else job.executor_fail_retry_count
        # A scheduled fire prepared ahead is logged at its planned instant (the executor files
        # its run log under that day); a late one (misfire) at the time it really runs.
        trigger_time = max(now_ms, req.planned_time) if req.planned_time is not None else now_ms
        plan = _Plan(req, parse_strategy(job.executor_route_strategy), param, max(retry, 0), trigger_time)
        if req.sharding is not None:
            plan.shards = [req.sharding]
        return plan

    def _resolve(self, plan: _Plan, view: _GroupView | None) -> None:
        """Fill in the plan's addresses, shards and token from its group (TriggerRejected for
        an override outside the group or refused by the address policy: the SSRF guard)."""
        req = plan.req
        addresses = view.addresses if view else []
        manual = bool(view and view.group.address_type == AddressType.MANUAL)
        plan.token = view.token if view else self.access_token
        plan.app_name = view.group.app_name if view else None
        if view is None:
            plan.problem = f"executor group {req.job.job_group} not found"
        elif view.refused:
            plan.problem = f"refused executor addresses not called: {', '.join(view.refused)}"
        if req.address_override:
            override = [a.strip() for a in req.address_override if a.strip()]
            disabled = sorted(set(override) & set(view.group.disabled if view else []))
            if disabled:
                raise TriggerRejected(
                    f"addresses disabled in the job's executor group: {', '.join(disabled)}")
            outside = sorted(set(override) - set(addresses))
            outside += [a for a in refused_addresses(override, self._policy) if a not in outside]
            if outside:
                raise TriggerRejected(
                    f"addresses not registered in the job's executor group: {', '.join(outside)}"
                )
            addresses, manual = override, True
        plan.addresses, plan.manual_addresses = addresses, manual
        if req.sharding is None and plan.strategy is RouteStrategy.SHARDING_BROADCAST and addresses:
            plan.shards = [(i, len(addresses)) for i in range(len(addresses))]

    def _new_log(self, plan: _Plan, shard: tuple[int, int] | None, identity: bool) -> NewLog:
        job = plan.req.job
        broadcast = plan.strategy is RouteStrategy.SHARDING_BROADCAST
        return NewLog(
            job_group=job.job_group,
            job_id=job.id,
            trigger_time=_ms_to_datetime(plan.trigger_time_ms),
            executor_handler=job.executor_handler,
            executor_param=plan.param,
            executor_sharding_param=f"{shard[0]}/{shard[1]}" if broadcast and shard else None,
            executor_fail_retry_count=plan.retry_count,
            trigger_type=plan.req.trigger_type.value,
            attempt=plan.req.attempt,
            # Only the first row of a broadcast carries the identity (the key is unique).
            planned_time=plan.req.planned_time if identity else None,
            admin_node=self.node_id,
        )

    async def _insert_identities(self, plans: list[_Plan]) -> None:
        """One row per request, in one insert: the fire's identity; duplicates are marked."""
        firsts = [self._new_log(p, p.req.sharding, identity=True) for p in plans]
        for plan, log_id in zip(plans, await self._store.logs.insert_fires(firsts), strict=True):
            if log_id is None:
                plan.duplicate = True
            else:
                plan.log_ids.append(log_id)

    async def _insert_other_shards(self, plans: list[_Plan]) -> None:
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
                plan.problem = f"the other shards could not be recorded: {type(exc).__name__}: {exc}"
            return
        for (plan, _), log_id in zip(owners, ids, strict=True):
            if log_id is None:  # cannot happen without an identity; keep the count honest
                raise RuntimeError(f"shard log of job {plan.req.job.id} was not inserted")
            plan.log_ids.append(log_id)

    async def _record(self, plans: list[_Plan], reqs: list[FireRequest]) -> None:
        """Insert the log rows. The group lookup runs alongside the insert unless a manual
        address list must be checked against the group first."""
        if any(r.address_override for r in reqs):
            groups = await self._groups(reqs)
            for plan in plans:
                self._resolve(plan, groups.get(plan.req.job.job_group))
            await self._insert_identities(plans)
        else:
            looked_up, inserted = await asyncio.gather(
                self._groups(reqs), self._insert_identities(plans), return_exceptions=True
            )
            if isinstance(inserted, BaseException):
                raise inserted  # nothing recorded
            if isinstance(looked_up, BaseException):
                # Recorded but no addresses: each fire fails visibly (and is retried/alarmed).
                log.error("reading executor groups failed: %s", looked_up)
                problem = f"could not read the executor group: {type(looked_up).__name__}: {looked_up}"
                for plan in plans:
                    plan.problem = problem
            else:
                for plan in plans:
                    self._resolve(plan, looked_up.get(plan.req.job.job_group))
        await self._insert_other_shards(plans)

    # -- dispatch ---------------------------------------------------------------------------

    async def _prepare(self, reqs: list[FireRequest]) -> list[_Plan]:
        now_ms = self._clock.now_ms()
        plans = [self._plan(r, now_ms) for r in reqs]
        await self._record(plans, reqs)
        return plans

    async def _fire_batch(self, reqs: list[FireRequest]) -> list[FireResult]:
        return await self._dispatch_plans(await self._prepare(reqs))

    async def _dispatch_plans(self, plans: list[_Plan], *, record_later: bool = False) -> list[FireResult]:
        work: list[Awaitable[_Dispatched]] = []
        for plan in plans:
            if plan.duplicate:
                continue
            for shard, log_id in zip(plan.shards, plan.log_ids, strict=True):
                # Scheduled fires at their instant: written to the executor in this step
                # where possible, so a burst due at one instant leaves without waiting for
                # a task per fire to be scheduled.
                sent = self._send_now(plan, shard, log_id) if record_later else None
                work.append(sent or self._lanes.run(
                    plan.req.job.id, functools.partial(self._dispatch, plan, shard, log_id)))
        done: list[_Dispatched] = list(await asyncio.gather(*work))
        if done and record_later:
            self._record_later([d.result for d in done])
        elif done:
            await self._store.logs.update_trigger_results([d.result for d in done])
        by_log = {d.result.log_id: d.result for d in done}
        results: list[FireResult] = []
        for plan in plans:
            if plan.duplicate:
                results.append(FireResult([], True, 0, "duplicate fire: already recorded"))
                continue
            answers = [by_log[i] for i in plan.log_ids]
            code = FAIL_CODE if any(a.trigger_code != 200 for a in answers) else 200
            msg = "\n\n".join(a.trigger_msg or "" for a in answers)
            results.append(FireResult(list(plan.log_ids), False, code, msg))
        return results

    def _live(self, plan: _Plan) -> list[str]:
        """The plan's addresses without those that unregistered since it was prepared."""
        if not self._gone or plan.manual_addresses:
            return plan.addresses
        return [a for a in plan.addresses if a not in self._gone]

    def _route_now(self, plan: _Plan, shard: tuple[int, int], now_ms: int) -> RouteResult | None:
        """The route, or why there is none, when no probe is needed; None for the strategies
        that probe executors (FAILOVER, BUSYOVER)."""
        addresses = self._live(plan)
        if not addresses:
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

    async def _route(self, plan: _Plan, shard: tuple[int, int]) -> RouteResult:
        now = self._clock.now_ms()
        route = self._route_now(plan, shard, now)
        if route is None:
            assert plan.strategy is not None
            route = await self._router.route(plan.strategy, plan.req.job.id, self._live(plan), now,
                                             self._client.probes(plan.token, plan.app_name))
        return route

    async def _dispatch(self, plan: _Plan, shard: tuple[int, int], log_id: int) -> _Dispatched:
        route = await self._route(plan, shard)
        address = route.address
        dispatch_time: int | None = None
        if address is None:
            answer = ReturnT(FAIL_CODE, None)
        else:
            param = self._run_param(plan, shard, log_id)
            dispatch_time = self._clock.now_ms()
            answer = await self._client.run(address, param, plan.token)
            if not answer.ok:
                answer = await self._client.rerun_if_35(address, param, plan.token, plan.app_name, answer)
        return self._dispatched(plan, shard, log_id, route, answer, dispatch_time)

    def _send_now(self, plan: _Plan, shard: tuple[int, int], log_id: int) -> Awaitable[_Dispatched] | None:
        """Route and write the /run call now when that needs no waiting (a lane slot is
        free, the strategy needs no probe); None otherwise (the caller takes the slow way)."""
        if not self._live(plan) or plan.strategy is None or plan.strategy in _PROBING:
            return None
        job_id = plan.req.job.id
        lane = self._lanes.enter_now(job_id)
        if lane is None:
            return None
        try:
            now = self._clock.now_ms()
            route = self._route_now(plan, shard, now)
            assert route is not None and route.address is not None
            pending = self._client.run_now(route.address, self._run_param(plan, shard, log_id), plan.token)
        except BaseException:
            self._lanes.leave(lane, job_id, 0)
            raise
        return self._answered(plan, shard, log_id, route, pending, now, lane)

    async def _answered(
        self, plan: _Plan, shard: tuple[int, int], log_id: int, route: RouteResult,
        pending: Awaitable[ReturnT], dispatch_time: int, lane: Lane,
    ) -> _Dispatched:
        try:
            answer = await pending
            if not answer.ok and route.address is not None:
                answer = await self._client.rerun_if_35(
                    route.address, self._run_param(plan, shard, log_id), plan.token, plan.app_name, answer)
        finally:
            self._lanes.leave(lane, plan.req.job.id, self._clock.now_ms() - dispatch_time)
        return self._dispatched(plan, shard, log_id, route, answer, dispatch_time)

    @staticmethod
    def _run_param(plan: _Plan, shard: tuple[int, int], log_id: int) -> TriggerParam:
        job = plan.req.job
        return TriggerParam(
            job_id=job.id,
            executor_handler=job.executor_handler or "",
            executor_params=plan.param,
            executor_block_strategy=job.executor_block_strategy or BlockStrategy.SERIAL_EXECUTION.value,
            executor_timeout=job.executor_timeout,
            log_id=log_id,
            log_date_time=plan.trigger_time_ms,
            glue_type=job.glue_type,
            glue_source=job.glue_source or "",
            glue_updatetime=_datetime_to_ms(job.glue_updatetime),
            broadcast_index=shard[0],
            broadcast_total=shard[1],
        )

    def _dispatched(
        self, plan: _Plan, shard: tuple[int, int], log_id: int, route: RouteResult, answer: ReturnT,
        dispatch_time: int | None,
    ) -> _Dispatched:
        address = route.address
        if not answer.ok:
            reason = dispatch_error_reason(address, answer.msg)
            self.dispatch_errors[reason] = self.dispatch_errors.get(reason, 0) + 1
        if address is not None and not answer.ok:
            log.warning("trigger of job %s (log %s) at %s failed: %s",
                        plan.req.job.id, log_id, address, answer.msg,
                        extra={"job_id": plan.req.job.id, "run_id": log_id, "address": address,
                               "node": self.node_id})
        broadcast = plan.strategy is RouteStrategy.SHARDING_BROADCAST
        result = TriggerResult(
            log_id=log_id,
            executor_address=address,
            trigger_code=answer.code,
            trigger_msg=self._trigger_msg(plan, shard, route, address, answer),
            dispatch_time=dispatch_time,
            executor_sharding_param=f"{shard[0]}/{shard[1]}" if broadcast else None,
        )
        return _Dispatched(result, plan)

    def _trigger_msg(
        self, plan: _Plan, shard: tuple[int, int], route: RouteResult, address: str | None, answer: ReturnT
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
            f"Route strategy: {strategy}",
            f"Block strategy: {job.executor_block_strategy or BlockStrategy.SERIAL_EXECUTION.value}",
            f"Timeout: {job.executor_timeout}",
            f"Fail retry count: {plan.retry_count}",
        ]
        if plan.problem:
            lines.append(f"Problem: {plan.problem}")
        lines += ["", ">>>>>>>>>>> Trigger Job <<<<<<<<<<<"]
        if route.msg:
            lines += [route.msg, ""]
        if address is not None:
            lines += [f"address: {address}", f"code: {answer.code}"]
            if answer.msg:  # a successful /run has no message: no "msg: None" line
                lines.append(f"msg: {answer.msg}")
        return "\n".join(lines)
