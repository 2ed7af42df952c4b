"""Firing node attempts (:mod:`jobring.admin.services.workflows`): claim an attempt, fire its
job (or hand a sub-workflow attempt to :class:`~jobring.admin.services.subworkflows.Children`),
link the job run to the attempt, and kill the job runs of attempts a step stops.

Exactly once: an attempt is claimed by one admin before it is fired (or inserted claimed by the
step that stores it), and its job run carries the attempt's id under a unique key, so of two
admins firing the same attempt (a stale claim taken over) only one records a job run; the other
finds it. A claim is stale ``stale_ms`` after it was taken when its attempt was never reported
fired: its admin may have died in between (the ``workflow_stale_claim_ms`` setting).

An admin still alive but slow to fire (its fire waiting for a dispatch lane, FAILOVER probing
one executor after another) must not be taken over: with XXL-JOB executors, which cannot be
asked whether they got a run, the node would run twice. So while it fires, the admin renews
its claims every third of ``stale_ms`` (:class:`ClaimKeeper`), and right before each /run it
makes sure it still holds the claim (:meth:`NodeFires.still_claimed`): at once when it renewed
it within that third (no other admin may take a claim younger than ``stale_ms``), else by a
write that renews the claim only if it is still its own. A claim taken over all the same (this
admin's writes failed or its loop stalled that long) is not sent: the admin that took it over
sends it.

The job runs this admin linked are remembered (:meth:`NodeFires.running`, the latest
``_LINKS_KEPT``), so a result that reaches this admin finds its attempt without a read.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from dataclasses import replace
from typing import TYPE_CHECKING, Protocol

from sqlalchemy.exc import IntegrityError

from jobring.admin.dispatch.client import ExecutorClient
from jobring.admin.monitors.base import Monitor
from jobring.admin.services.claim_fault import ClaimFault
from jobring.admin.services.settings import DEFAULT_STALE_CLAIM_MS
from jobring.admin.services.subworkflows import Children
from jobring.admin.services.workflow_steps import (
    Wanted,
    item_of,
    naive_utc,
    off_loop_if_large,
    unconfirmed,
    wanted_in,
)
from jobring.admin.store.errors import is_transient
from jobring.admin.store.records import HandleResult
from jobring.admin.store.workflow_records import NodeRunRecord, NodeRunState, Withdrawal
from jobring.admin.trigger.fires import NodeFire, run_candidates
from jobring.admin.trigger.trigger import FireRequest, NotSent, TriggerRejected, TriggerService
from jobring.admin.trigger.unsure import UnsureFires
from jobring.core.clock import Clock
from jobring.core.enums import HandleCode, TriggerType
from jobring.core.workflow import (
    Event,
    KillJob,
    NodeDispatched,
    NodeFinished,
    Outcome,
    Step,
    run_from_json,
)

if TYPE_CHECKING:
    from jobring.admin.store import Store

__all__ = ["MAX_CONCURRENT_FIRES", "STOPPED_BY_WORKFLOW", "ClaimKeeper", "FiringPort", "NodeFires"]

log = logging.getLogger("jobring.admin.services.workflows")  # the driver's lines keep their logger

STOPPED_BY_WORKFLOW = "killed: its workflow run stopped"
MAX_CONCURRENT_FIRES = 50
"""Job starts one driver has in flight at once; the rest wait their turn (each is already a
durable pending attempt, so nothing is lost if the admin stops while they wait)."""
_LINKS_KEPT = 4_096
_RENEW_TRIES = 3  # the claim's renewal right before a /run
_RENEW_BACKOFF_S = 0.1


class FiringPort(Protocol):
    """What firing needs of the workflow driver."""

    async def apply(self, run_id: int, event: Event) -> Step: ...

    async def finish(self, attempt: NodeRunRecord, trigger_code: int, trigger_msg: str | None,
                     handle_code: int, handle_msg: str | None) -> None: ...


class NodeFires:
    """Claims and fires node attempts for one admin node."""

    def __init__(
        self,
        store: Store,
        trigger: TriggerService,
        executors: ExecutorClient | None,
        clock: Clock,
        driver: FiringPort,
        children: Children,
        *,
        node_id: str,
        stale_ms: int = DEFAULT_STALE_CLAIM_MS,
        max_concurrent_fires: int = MAX_CONCURRENT_FIRES,
        unsure: UnsureFires | None = None,
    ) -> None:
        self._store = store
        self._trigger = trigger
        self._executors = executors
        self._clock = clock
        self._driver = driver
        self._children = children
        self._node_id = node_id
        self.stale_ms = stale_ms
        # Asks the executor about a taken-over attempt's job run that its dead admin recorded
        # and perhaps never sent (and sends it then, under the same run id).
        self._unsure = unsure
        # Bounds the trigger calls only, not what follows them: a fire's result may start more
        # attempts, and holding a slot while waiting for another could use them all up.
        self._firing = asyncio.Semaphore(max_concurrent_fires)
        # The attempts this node linked to their job runs, by job run (oldest first).
        self._links: dict[int, NodeRunRecord] = {}
        # The attempts whose job this node is firing (claimed, waiting for their turn or
        # being sent): when it last made sure of each claim (the claimed_at it wrote).
        self._held: dict[int, int] = {}
        # The attempts a fire() of this node is working on (claiming, firing, linking).
        self._in_fire: set[int] = set()
        self.claim_fault: ClaimFault | None = None  # test-only (services/claim_fault.py)

    def running(self, log_id: int) -> NodeRunRecord | None:
        """The attempt this node linked to job run ``log_id`` (as linked: running; forgotten
        once asked for), or None when it does not remember one."""
        return self._links.pop(log_id, None)

    def forget(self, log_id: int | None) -> None:
        """The attempt of job run ``log_id`` has ended (its result was applied otherwise)."""
        if log_id is not None:
            self._links.pop(log_id, None)

    async def fire(
        self,
        attempt: NodeRunRecord,
        *,
        stale: bool = False,
        known: Wanted | None = None,
        claimed: bool = False,
    ) -> None:
        """Claim the attempt (unless ``claimed`` when stored) and fire it. ``known``: its run
        as the step that stored the attempt left it (else the run is read after the claim, as
        a stop or a repair may have superseded the attempt since it was stored).

        An attempt this node is still firing is left alone, even when its claim went stale
        (its renewals failed, its loop stalled): taken over by this node's own sweep, the
        claim would still be this node's, so the first fire's check before its /run could
        not tell, and the second fire, finding the recorded run, would mark the attempt
        running (then the first fire's check says no: nothing sent). Another admin may take
        it over; the first fire's check then refuses to send."""
        if attempt.id in self._in_fire:
            return
        self._in_fire.add(attempt.id)
        try:
            await self._claim_and_fire(attempt, stale=stale, known=known, claimed=claimed)
        finally:
            self._in_fire.discard(attempt.id)

    async def _claim_and_fire(
        self, attempt: NodeRunRecord, *, stale: bool, known: Wanted | None, claimed: bool
    ) -> None:
        now = self._clock.now_ms()
        stale_before = now - self.stale_ms if stale else None
        if not claimed and not await self._store.workflows.claim(
            attempt.id, self._node_id, now, stale_before
        ):
            return  # another admin has it
        if self.claim_fault is not None:  # (a stored attempt's claim was its insert's)
            await self.claim_fault.claimed(attempt.id)
        wanted = known if known is not None else await self._wanted_context(attempt)
        if wanted is None or wanted.superseded:
            await self._store.workflows.ended([attempt.id], now)
            if wanted is not None and wanted.recorded is not None:  # recorded with it, never sent
                await self._not_sent(attempt, wanted.recorded[0], "its node attempt was stopped first")
            elif stale and (left := await self._store.workflows.log_of_node_run(attempt.id)) is not None:
                await self._end_as_stopped(left, now)  # a dead admin's run of it, perhaps sent
            return
        if attempt.workflow_id is not None:
            await self._children.fire(attempt)
            return
        log_id = await self._store.workflows.log_of_node_run(attempt.id) if stale else None
        if log_id is None:
            claimed_at = attempt.claimed_at if claimed and attempt.claimed_at is not None else now
            try:
                log_id = await self._fire_job(attempt, wanted, claimed_at)
            except IntegrityError:  # a node we took over for dead had recorded it after all
                log_id = await self._store.workflows.log_of_node_run(attempt.id)
            if log_id is None:
                return
        linked = replace(attempt, state=NodeRunState.RUNNING, log_id=log_id)
        if await self._store.workflows.fired(attempt.id, log_id):
            self._remember(log_id, linked)
        await self._driver.apply(
            attempt.workflow_run_id,
            NodeDispatched(
                attempt.node_key, attempt.attempt, log_id, self._clock.now_ms(), item_of(attempt.item)
            ),
        )
        # A result recorded before the link was (a fast executor, a failed trigger) is applied
        # here; one recorded after it reaches the driver's on_results.
        entry = await self._store.logs.get(log_id)
        if stale and self._unsure is not None and entry is not None and unconfirmed(entry):
            # Taken over from an admin that died between recording the run and hearing the
            # executor's answer: it may never have been sent. Left alone it would wait for the
            # lost-run monitor (10 minutes); asked now, it is sent again only if no executor
            # has it (the same run id: a jobring executor that does answers "already received").
            self._unsure.submit([log_id], {log_id: NodeFire(wanted.context, attempt.timeout_s)})
        if entry is not None and (
            entry.handle_code != 0 or entry.trigger_code not in (0, HandleCode.SUCCESS)
        ):
            # Read again: the callback stored the handler's context additions on the attempt.
            fresh = await self._store.workflows.node_run(attempt.id)
            await self._driver.finish(
                replace(fresh or attempt, state=NodeRunState.RUNNING, log_id=log_id),
                entry.trigger_code, entry.trigger_msg, entry.handle_code, entry.handle_msg
            )

    async def keep_claims(self) -> None:
        """Renew the claims of the attempts this node is still firing (see the module
        docstring); the ClaimKeeper calls it every third of ``stale_ms``."""
        if not self._held:
            return
        now = self._clock.now_ms()
        kept = await self._store.workflows.keep_claims(list(self._held), self._node_id, now)
        for attempt_id in kept:
            if attempt_id in self._held:
                self._held[attempt_id] = now

    async def still_claimed(self, attempt_id: int) -> bool:
        """Whether this node still holds the attempt's claim, asked right before its /run is
        sent: yes at once when it made sure of it within the last third of ``stale_ms``,
        else the claim is renewed in one write if it is still this node's (False: another
        admin took the attempt over, or it was fired)."""
        now = self._clock.now_ms()
        since = self._held.get(attempt_id)
        if since is not None and now - since < self.stale_ms // 3:
            return True
        renewed_at = await self._renew_before_send(attempt_id)
        if renewed_at is not None:
            if attempt_id in self._held:
                self._held[attempt_id] = renewed_at
            return True
        log.warning("workflow node attempt %s: taken over by another admin before its job was sent "
                    "(its claim was not renewed for workflow_stale_claim_ms, %s ms); not sent here",
                    attempt_id, self.stale_ms)
        return False

    async def _renew_before_send(self, attempt_id: int) -> int | None:
        """The instant the claim was renewed at (None: it is no longer this node's), in one
        conditional write, tried again on a transient database error (a locked SQLite file, a
        dropped connection) while a third of ``stale_ms`` has not passed since the first try:
        given up, the run waits for another admin's sweep and the unsure-fire resolution
        (``stale_ms`` and more); past that third, another admin may take it over anyway."""
        tried, first = 1, self._clock.now_ms()
        while True:
            now = self._clock.now_ms()
            try:
                kept = await self._store.workflows.keep_claims([attempt_id], self._node_id, now)
                return now if attempt_id in kept else None
            except Exception as exc:
                pause_s = _RENEW_BACKOFF_S * 2 ** (tried - 1)
                late = self._clock.now_ms() + pause_s * 1000 - first >= self.stale_ms // 3
                if tried == _RENEW_TRIES or late or not is_transient(exc):
                    raise
                log.warning("workflow node attempt %s: renewing its claim before the send failed (%s: %s); "
                            "trying again in %.2f s", attempt_id, type(exc).__name__, exc, pause_s)
                await asyncio.sleep(pause_s)
                tried += 1

    def _remember(self, log_id: int, linked: NodeRunRecord) -> None:
        self._links[log_id] = linked
        if len(self._links) > _LINKS_KEPT:
            # Results of runs long gone, or that reached another admin: found by a read there.
            del self._links[next(iter(self._links))]

    async def _wanted_context(self, attempt: NodeRunRecord) -> Wanted | None:
        """The run's context and group, read now (None: the run is gone)."""
        record = await self._store.workflows.get_run(attempt.workflow_run_id)
        if record is None or record.state is None:
            return None
        run = await off_loop_if_large(record.state_chars, run_from_json, record.state)
        return wanted_in(run, attempt, record.job_group, None)

    async def _fire_job(self, attempt: NodeRunRecord, wanted: Wanted, claimed_at: int) -> int | None:
        """Fire the attempt's job (its own fail-retry off: the engine retries) under the run
        its step recorded (``wanted.recorded``) or one recorded now; its log id, or None when
        it could not be fired (the attempt is then failed here, and a run its step recorded
        withdrawn). The run's
        group is ``wanted.group``: a job moved to another group since the run started is not
        fired (a workflow runs only its own group's jobs: checked at the start, and here at
        each fire, on the job as read with the attempt's step or now). None too, and nothing
        sent nor failed, when another admin took the attempt over meanwhile: its claim, taken
        at ``claimed_at``, is held (renewed) while the fire waits for its turn and is sent."""
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
                send_check=functools.partial(self.still_claimed, attempt.id),
            )
            self._held[attempt.id] = claimed_at
            try:
                async with self._firing:
                    if wanted.recorded is None:
                        result = await self._trigger.fire(request)
                    else:  # its run-log row was recorded with the step that stored it
                        result = await self._trigger.fire_recorded(request, *wanted.recorded)
            except TriggerRejected as exc:
                problem = str(exc)
            except NotSent:
                return None  # taken over: the admin that has the claim fires it
            else:
                if result.log_ids:
                    return result.log_ids[0]
                problem = result.trigger_msg
            finally:
                self._held.pop(attempt.id, None)
        if wanted.recorded is None:
            await self._store.workflows.ended([attempt.id], self._clock.now_ms())
        elif not await self._not_sent(attempt, wanted.recorded[0], problem):  # (which ends the attempt)
            return None  # taken over: the admin that has the claim settles the attempt and its run
        await self._driver.apply(
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

    async def _not_sent(self, attempt: NodeRunRecord, log_id: int, why: str | None) -> bool:
        """The run-log row the attempt's step recorded, for a job this node decided not to send
        (the attempt was stopped first, or its job cannot run): withdrawn, as if the trigger
        had never recorded it (no run, no failure alarm, nothing for the lost-run monitor), and
        the attempt ended in the same write. False when the attempt is another admin's claim by
        now (this one stalled past the claim window): the attempt and its run are that admin's
        to settle."""
        now = self._clock.now_ms()
        done = await self._store.workflows.withdraw_unsent(attempt.id, log_id, self._node_id, now)
        if done is Withdrawal.WITHDRAWN:
            log.info("workflow node attempt %s: its recorded run %s withdrawn, not sent: %s", attempt.id,
                     log_id, why, extra={"run_id": log_id})
        elif done is Withdrawal.TAKEN_OVER:
            log.warning("workflow node attempt %s was taken over by another admin before its recorded run %s "
                        "was withdrawn: left to that admin", attempt.id, log_id, extra={"run_id": log_id})
        return done is not Withdrawal.TAKEN_OVER

    async def kill(self, run_id: int, command: KillJob) -> None:
        """End the attempts ``command`` stops and kill their job runs on their executors."""
        attempts = [
            a
            for a in await self._store.workflows.node_runs(run_id)
            if (a.node_key, a.attempt, a.item) == command.key and a.state != NodeRunState.ENDED
        ]
        now = self._clock.now_ms()
        for attempt in attempts:
            await self._store.workflows.ended([attempt.id], now)
            # An attempt not linked yet may have its run recorded by its step (FireRows): the
            # run is ended as killed too (not left for the lost-run monitor).
            log_id = (attempt.log_id or command.run_id
                      or await self._store.workflows.log_of_node_run(attempt.id))
            self.forget(log_id)
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
            await self._end_as_stopped(log_id, now)

    async def _end_as_stopped(self, log_id: int, now: int) -> None:
        """Record the end of a job run its workflow stopped (unless it has a result already)."""
        await self._store.logs.record_results(
            [HandleResult(log_id, int(HandleCode.FAIL), STOPPED_BY_WORKFLOW, naive_utc(now))]
        )


class ClaimKeeper(Monitor):
    """Renews the claims of the attempts a :class:`NodeFires` is still firing, every third of
    its ``stale_ms`` (a fire may take that long: a full dispatch lane, FAILOVER probes)."""

    name = "workflow-claims"

    def __init__(self, fires: NodeFires) -> None:
        super().__init__(fires.stale_ms / 3 / 1000)
        self._fires = fires

    async def tick(self) -> None:
        await self._fires.keep_claims()
