"""TriggerService: turn fire requests into run-log rows and executor /run calls.

Every run gets its log row before the executor is called. The service composes a
:class:`~jobring.admin.trigger.recorder.FireRecorder` (plans fires, writes and withdraws
their log rows, writes trigger results) and a
:class:`~jobring.admin.trigger.dispatcher.FireDispatcher` (executor groups, routing, the
/run calls through the fast/slow lanes). ``fire_batch`` records, dispatches and records the
answers at once; ``prepare_batch`` + ``dispatch_prepared`` split it so the database work is
done before the planned instant and only the /run call is left at the instant (the
scheduling loop does this; with ``record_later`` the trigger results are then written in
batches every ``result_flush_ms``).
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Coroutine, Sequence
from typing import TYPE_CHECKING, Any

from jobring.admin.dispatch.client import ExecutorClient
from jobring.admin.store.records import TriggerResult
from jobring.admin.trigger.dispatcher import FireDispatcher
from jobring.admin.trigger.fires import (
    TRIGGER_TYPE_TITLES,
    FirePlan,
    FireRequest,
    FireResult,
    NotSent,
    PreparedBatch,
    TriggerRejected,
    dispatch_error_reason,
    fire_results,
)
from jobring.admin.trigger.flowgate import FlowGate
from jobring.admin.trigger.lanes import DispatchLanes
from jobring.admin.trigger.recorder import FireRecorder
from jobring.core.addresses import AddressPolicy
from jobring.core.clock import Clock
from jobring.core.routing import Router

if TYPE_CHECKING:
    from jobring.admin.store import Store

__all__ = ["TRIGGER_TYPE_TITLES", "FireRequest", "FireResult", "NotSent", "PreparedBatch", "TriggerRejected",
           "TriggerService", "dispatch_error_reason"]


class TriggerService:
    """Fires jobs: log rows first, then /run through the lanes, then the recorded answers.

    Calls without a group token carry the ``ExecutorClient``'s global token.
    """

    def __init__(
        self,
        store: Store,
        client: ExecutorClient,
        *,
        node_id: str,
        clock: Clock,
        admin_timezone: str,
        fast_pool: int = 1000,
        slow_pool: int = 100,
        rng: random.Random | None = None,
        router: Router | None = None,
        group_cache_ms: int = 1_000,
        result_flush_ms: int = 100,
        address_policy: AddressPolicy | None = None,
    ) -> None:
        self.node_id = node_id
        self.admin_timezone = admin_timezone
        self.dispatcher = FireDispatcher(
            store, client, node_id=node_id, clock=clock, fast_pool=fast_pool, slow_pool=slow_pool,
            rng=rng, router=router, group_cache_ms=group_cache_ms, address_policy=address_policy)
        self.recorder = FireRecorder(store, node_id=node_id, clock=clock, resolve=self.dispatcher.resolve,
                                     result_flush_ms=result_flush_ms, admin_timezone=admin_timezone)
        # Flow control: fires of jobs (or groups) with flow settings are admitted before sending.
        self.flow = FlowGate(store, clock, self.dispatcher, self.recorder, client)
        self._in_flight: set[asyncio.Task[list[FireResult]]] = set()
        self._closed = False
        # For metrics (read at scrape time): fires requested through ``fire_batch`` (manual,
        # API, retry, parent) by trigger type.
        self.requested: dict[str, int] = {}

    @property
    def lanes(self) -> DispatchLanes:
        return self.dispatcher.lanes

    @property
    def dispatch_errors(self) -> dict[str, int]:
        """Failed dispatches by reason (see ``dispatch_error_reason``)."""
        return self.dispatcher.dispatch_errors

    def address_gone(self, app_name: str, address: str) -> None:
        """An executor unregistered from ``app_name``: route nothing more of that appname's
        groups to it, and re-read groups."""
        self.dispatcher.address_gone(app_name, address)

    def address_back(self, app_name: str, address: str, *, v35: bool = False) -> None:
        """An executor (re)registered under ``app_name``; ``v35`` when it spoke XXL-JOB 3.5
        (see ``ExecutorClient.learn_dialect``)."""
        self.dispatcher.address_back(app_name, address, v35=v35)

    def forget_groups(self) -> None:
        """Drop the cached executor groups (an address was disabled, a group edited)."""
        self.dispatcher.forget_groups()

    async def warm_group(self, group_id: int) -> None:
        """Read an executor group ahead of workflow fires about to come (see
        ``GroupViews.warm``)."""
        await self.dispatcher.groups.warm(group_id)

    async def fire(self, req: FireRequest) -> FireResult:
        """Fire one request; raises TriggerRejected for a request that must not run."""
        return (await self.fire_batch([req]))[0]

    async def fire_batch(self, reqs: Sequence[FireRequest]) -> list[FireResult]:
        """Insert the batch's log rows in one go, dispatch them, record the answers.

        Planned fires already recorded (by this or another node) come back ``duplicate``
        and are not dispatched. Returns once every dispatch answer is recorded.
        """
        self._refuse_if_closed()
        if len(reqs) > 1 and any(r.send_check is not None for r in reqs):
            # A refused send raises for the whole batch: the others' answers would be lost.
            raise ValueError("a fire with a send check is fired alone")
        for req in reqs:
            self.requested[req.trigger_type] = self.requested.get(req.trigger_type, 0) + 1
        return await self._tracked(self._fire_batch(list(reqs)))

    async def fire_recorded(self, req: FireRequest, log_id: int, trigger_time_ms: int) -> FireResult:
        """:meth:`fire` for a request whose run-log row is recorded already (``log_id``,
        stamped ``trigger_time_ms``: a workflow node attempt's, recorded by the step that
        started it): routed and sent without a write first."""
        self._refuse_if_closed()
        self.requested[req.trigger_type] = self.requested.get(req.trigger_type, 0) + 1
        return (await self._tracked(self._fire_adopted(req, log_id, trigger_time_ms)))[0]

    async def prepare_batch(self, reqs: Sequence[FireRequest]) -> PreparedBatch:
        """Record the batch's log rows now and dispatch them later with ``dispatch_prepared``.

        For precision: the database work happens before the planned instant, so at the
        instant only routing and the /run call remain. Duplicates are known on return
        (``PreparedBatch.duplicates``). A prepared batch must be dispatched or cancelled;
        one left alone because the node died is settled by the node that takes the job over
        (see :mod:`jobring.admin.loop.loop`, "Takeover").
        """
        self._refuse_if_closed()
        return PreparedBatch(await self.recorder.prepare(reqs))

    async def dispatch_prepared(
        self, batch: PreparedBatch, *, record_later: bool = False
    ) -> list[FireResult]:
        """Dispatch a prepared batch (once); returns when the answers are recorded, or with
        ``record_later`` as soon as the executors answered (the answers are then written in
        batches every ``result_flush_ms``, and by ``flush_results`` / ``close``)."""
        if batch.state != "prepared":
            raise RuntimeError(f"prepared batch already {batch.state}")
        batch.state = "dispatched"
        if any(p.flow is not None for p in batch.plans):
            return await self._tracked(self._gated(batch.plans, record_later=record_later))
        # Scheduled fires (record_later) are written to their executors here, in the caller's
        # step; the task then waits for the answers.
        work = self.dispatcher.start(batch.plans, at_once=record_later)
        return await self._tracked(self._settle(batch.plans, work, record_later=record_later))

    async def cancel_prepared(self, batch: PreparedBatch) -> int:
        """Withdraw a prepared batch (e.g. its job was stopped or edited before the instant):
        its log rows are deleted, so the planned instants are free again, as long as this node
        holds the jobs' leases (see ``FireRepository.withdraw``). Returns the count."""
        if batch.state != "prepared":
            raise RuntimeError(f"prepared batch already {batch.state}")
        batch.state = "cancelled"
        return await self.recorder.withdraw(batch.plans)

    async def settled(self, timeout_s: float = 5.0) -> None:
        """Wait (up to ``timeout_s``) for the dispatches in flight, then write their answers."""
        if self._in_flight:
            await asyncio.wait(set(self._in_flight), timeout=timeout_s)
        await self.recorder.flush()

    async def flush_results(self) -> int:
        """Write the trigger results waiting to be recorded (``record_later``); returns how many."""
        return await self.recorder.flush()

    async def close(self) -> None:
        """Refuse new fires, wait for the ones in flight and record their results."""
        self._closed = True
        await self.flow.close()
        if self._in_flight:
            await asyncio.gather(*self._in_flight, return_exceptions=True)
        await self.recorder.close()

    def _refuse_if_closed(self) -> None:
        if self._closed:
            raise RuntimeError("TriggerService is closed")

    async def _tracked(self, work: Coroutine[Any, Any, list[FireResult]]) -> list[FireResult]:
        task = asyncio.ensure_future(work)
        self._in_flight.add(task)
        task.add_done_callback(self._in_flight.discard)
        # Shielded: a caller that is cancelled must not leave inserted rows undispatched.
        return await asyncio.shield(task)

    async def _fire_batch(self, reqs: list[FireRequest]) -> list[FireResult]:
        return await self._dispatched(await self.recorder.prepare(reqs))

    async def _fire_adopted(self, req: FireRequest, log_id: int, trigger_time_ms: int) -> list[FireResult]:
        return await self._dispatched([await self.recorder.adopt(req, log_id, trigger_time_ms)])

    async def _dispatched(self, plans: list[FirePlan]) -> list[FireResult]:
        """Send recorded plans (through flow control where they have flow settings) and write
        their answers."""
        if any(p.flow is not None for p in plans):
            return await self._gated(plans)
        return await self._settle(plans, self.dispatcher.start(plans))

    async def _gated(self, plans: list[FirePlan], *, record_later: bool = False) -> list[FireResult]:
        """Send the plans without flow settings at once, the others once admitted."""
        plain = [p for p in plans if p.flow is None]
        work = self.dispatcher.start(plain, at_once=record_later)
        gated = await self.flow.admit([p for p in plans if p.flow is not None])
        work += self.dispatcher.start(gated.send, at_once=record_later)
        answers = await self.dispatcher.settle(work) + gated.write
        if record_later:
            self.recorder.write_later(answers)
        else:
            await self.recorder.write_results(answers)
        return fire_results(plans, answers + gated.held)

    async def _settle(self, plans: list[FirePlan], work: list[Awaitable[TriggerResult]], *,
                      record_later: bool = False) -> list[FireResult]:
        answers = await self.dispatcher.settle(work)
        if record_later:
            self.recorder.write_later(answers)
        else:
            await self.recorder.write_results(answers)
        return fire_results(plans, answers)
