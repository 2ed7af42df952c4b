"""Fires workflows on their schedules (docs/workflows.md#scheduling).

Every admin sweeps the due schedules; each planned instant is fired by the one admin whose
compare-and-set moves the schedule past it (``store.workflow_schedules.claim``). The misfire
rules are the jobs' (:func:`jobring.core.planning.decide_fire`; a one-shot ``ONCE`` schedule
plans nothing after its instant, so it is spent once fired or missed), the overlap rule is the
workflow's own (:func:`jobring.core.workflow.overlap.on_fire`): a fire while a run is going is
skipped, waits (``queue_one``: started by the sweep once the running run has ended) or starts
another run. A scheduled run is started by the driver as a trigger from the API is, with the
schedule's params as its starting context; its nodes must run jobs of the workflow's own group.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from jobring.admin.monitors.base import Monitor
from jobring.admin.services.workflow_access import check_tree
from jobring.admin.services.workflows import WorkflowDriver, WorkflowRunGone
from jobring.admin.store.workflow_schedules import WorkflowSchedule
from jobring.admin.store.workflows import WorkflowBusy
from jobring.core.clock import Clock
from jobring.core.oneshot import workflow_schedule
from jobring.core.planning import decide_fire
from jobring.core.schedule import ScheduleError
from jobring.core.timefmt import iso_ms
from jobring.core.workflow import WorkflowInvalid
from jobring.core.workflow.overlap import Overlap, OverlapAction, on_fire

if TYPE_CHECKING:
    from jobring.admin.store import Store

log = logging.getLogger(__name__)

SCHEDULED_BY = "schedule"


class WorkflowScheduler(Monitor):
    """Starts workflow runs at their schedules' instants; one admin fires each instant."""

    name = "workflow-scheduler"

    def __init__(
        self,
        store: Store,
        driver: WorkflowDriver,
        clock: Clock,
        *,
        default_zone: str,
        interval_s: float = 1.0,
    ) -> None:
        super().__init__(interval_s)
        self._store = store
        self._driver = driver
        self._clock = clock
        self._default_zone = default_zone
        self._earliest: int | None = None

    def next_wait_s(self) -> float:
        # Sooner than the interval when an instant is due before it (schedules saved on another
        # admin are seen within the interval).
        if self._earliest is None:
            return self.interval_s
        return max(0.0, min(self.interval_s, (self._earliest - self._clock.now_ms()) / 1000))

    async def tick(self) -> None:
        now = self._clock.now_ms()
        for schedule in await self._store.workflow_schedules.due(now):
            try:
                await self._handle(schedule, now)
            except Exception:  # one workflow's trouble must not hold up the others'
                log.exception("workflow %s: scheduled fire failed", schedule.workflow_id)
        self._earliest = await self._store.workflow_schedules.earliest()

    async def _handle(self, schedule: WorkflowSchedule, now: int) -> None:
        wid = schedule.workflow_id
        running = len(await self._store.workflows.running_run_ids(wid))
        if (
            schedule.queued_at
            and running == 0
            and await self._store.workflow_schedules.take_queued(wid, schedule.queued_at)
        ):
            await self._start(schedule, f"queued fire of {iso_ms(schedule.queued_at)}")
        if not (schedule.enabled and 0 < schedule.next_fire_at <= now):
            return
        planned = schedule.next_fire_at
        try:
            plan = workflow_schedule(schedule.schedule_type, schedule.schedule_conf,
                                  schedule.time_zone or self._default_zone)
        except ScheduleError as exc:  # saved valid; a zone database change could make it not
            await self._store.workflow_schedules.claim(wid, planned, 0, queued_at=0, result=f"stopped: {exc}")
            log.warning("workflow %s: schedule no longer valid, not planned further: %s", wid, exc)
            return
        decision = decide_fire(planned, now, schedule.misfire_strategy, plan.next_fire_ms)
        next_ms = decision.next_ms or 0
        if not decision.fires:
            await self._store.workflow_schedules.claim(
                wid, planned, next_ms, queued_at=schedule.queued_at, result=f"missed {iso_ms(planned)}"
            )
            return
        queued = 1 if schedule.queued_at else 0
        action, why = on_fire(Overlap(schedule.overlap), running=running, queued=queued)
        queued_at = planned if action is OverlapAction.QUEUE else schedule.queued_at
        result = f"{iso_ms(planned)}: {why or 'starting'}"
        claimed = await self._store.workflow_schedules.claim(
            wid, planned, next_ms, queued_at=queued_at, result=result
        )
        if not claimed:
            return  # another admin fired this instant
        if action is OverlapAction.START:
            await self._start(schedule, iso_ms(planned))
        else:
            log.info("workflow %s: fire of %s %s", wid, iso_ms(planned), why)

    async def _start(self, schedule: WorkflowSchedule, what: str) -> None:
        wid = schedule.workflow_id
        record = await self._store.workflows.get(wid)
        if record is None:  # deleted since the sweep read its schedule
            await self._store.workflow_schedules.delete(wid)
            return
        problem = await self._refusal(record.id, record.version, record.job_group)
        if problem is not None:
            await self._store.workflow_schedules.note(wid, f"{what}: not started: {problem}")
            log.warning("workflow %s: scheduled run not started: %s", wid, problem)
            return
        try:
            # One at a time unless allowed, decided in the start's write: a manual trigger may
            # have started a run since the running ones were counted.
            alone = Overlap(schedule.overlap) is not Overlap.ALLOW
            run_id, step = await self._driver.start_run(record, schedule.params, SCHEDULED_BY, alone=alone)
        except WorkflowBusy as exc:
            text = f"{what}: skipped: run {exc.run_ids[0]} started meanwhile (overlap {schedule.overlap})"
            await self._store.workflow_schedules.note(wid, text)
            log.info("workflow %s: %s", wid, text)
            return
        except WorkflowRunGone:
            if await self._store.workflows.get(wid) is None:
                await self._store.workflow_schedules.delete(wid)
            else:  # moved to another group since it was read: its schedule stays
                await self._store.workflow_schedules.note(
                    wid, f"{what}: not started: the workflow moved to another group meanwhile")
            return
        text = f"{what}: started run {run_id}" if step.applied else f"{what}: not started: {step.note}"
        await self._store.workflow_schedules.note(wid, text)
        log.info("workflow %s: %s", wid, text)

    async def _refusal(self, workflow_id: int, version: int, owner_group: int) -> str | None:
        """Why the workflow may not run now (a node's job deleted or moved to another group, a
        sub-workflow gone or changed)."""
        graph = await self._driver.graph(workflow_id, version)
        try:
            await check_tree(self._store, self._driver.graph, graph, workflow_id=workflow_id,
                             owner_group=owner_group, may_operate=lambda group: group == owner_group)
        except WorkflowInvalid as exc:
            return str(exc)
        return None
