"""What one running admin node holds (built by :func:`jobring.admin.runtime.app.start_runtime`),
apart from the app module so that the health and metrics views that read it sit below the
app that serves them."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass

from jobring.admin.alarms.base import Alarmer
from jobring.admin.dispatch.client import ExecutorClient
from jobring.admin.distributed.service import DistributedService
from jobring.admin.loop.adapters import StoreLeases
from jobring.admin.loop.delayed import DelayedFireRunner
from jobring.admin.loop.liveness import NodeLiveness
from jobring.admin.loop.loop import ScheduleLoop
from jobring.admin.monitors.backfills import BackfillRunner
from jobring.admin.monitors.monitors import Monitors, RegistryService
from jobring.admin.runtime.metrics import AdminMetrics
from jobring.admin.services.bootstrap import Secrets
from jobring.admin.services.callbacks import CallbackService
from jobring.admin.services.executor_tokens import ExecutorTokens
from jobring.admin.services.settings import AdminSettings
from jobring.admin.services.workflows import WorkflowDriver
from jobring.admin.store import Store
from jobring.admin.trigger.trigger import TriggerService
from jobring.core.bounded import within
from jobring.core.clock import Clock

log = logging.getLogger(__name__)

# A SIGTERM'd admin is gone within this (plus a moment per step left) whatever the database
# does; the scheduling loop gets what its stop needs first (in-flight fires, lease release).
STOP_BUDGET_S = 8.0
_STEP_MIN_S = 0.5


@dataclass
class AdminRuntime:
    """Everything one running admin node holds; built by :func:`start_runtime`."""

    settings: AdminSettings
    node_id: str
    clock: Clock
    store: Store
    secrets: Secrets
    executors: ExecutorClient
    trigger: TriggerService
    registry: RegistryService
    callbacks: CallbackService
    monitors: Monitors
    loop: ScheduleLoop
    executor_tokens: ExecutorTokens
    leases: StoreLeases
    alarmer: Alarmer
    delayed: DelayedFireRunner
    metrics: AdminMetrics | None = None
    liveness: NodeLiveness | None = None
    workflows: WorkflowDriver | None = None
    backfills: BackfillRunner | None = None
    distributed: DistributedService | None = None

    async def stop(self) -> None:
        """Stop claiming, finish in-flight fires, release leases, stop monitors, close the DB;
        within STOP_BUDGET_S (or the loop's ``stop_timeout_s`` if longer, and a moment per
        later step) even when the database hangs."""
        clock = asyncio.get_running_loop().time
        deadline = clock() + max(STOP_BUDGET_S, self.loop.config.stop_timeout_s)

        def left() -> float:
            return max(_STEP_MIN_S, deadline - clock())

        try:
            await within(self.loop.stop(), left(), "stopping the scheduling loop")
        finally:
            try:
                if self.liveness is not None:
                    # After the loop: its leases are released and it no longer counts as live.
                    await within(self.liveness.stop(), left(), "closing the liveness lock session")
                await within(self.delayed.stop(), left(), "stopping the delayed fires")
                # Before the trigger service and the alarms: child fires and recovery alarms use them.
                await within(self.callbacks.close(), left(), "finishing the child fires")
                await within(self.monitors.stop(), left(), "stopping the monitors")
                if self.leases.unsure is not None:
                    await within(self.leases.unsure.close(), left(), "stopping the fire resolutions")
                await within(self.trigger.close(), left(), "recording the last trigger results")
                await within(self.executor_tokens.close(), left(), "ending the executor tokens' re-read")
            finally:
                await within(self.executors.aclose(), left(), "closing the executor client")
                await within(self.store.close(), left(), "closing the database pool")
        log.info("admin node %s stopped", self.node_id)
