"""Sends pending sub-tasks to the executors of their group, in batches, and takes back the
ones whose executor is gone.

Each executor holds at most ``window`` running sub-tasks (counted in the database, so every
admin node sees the same load); a round claims for each live executor of the group what its
window has room for (at most ``batch``), spread over the executors with the most room first,
and POSTs each executor's part to its ``jobring/subtasks`` endpoint through the admin's
executor client (push, or the poll of a pull executor). A refused or unanswered batch is
lost at once (dispatched again elsewhere, within the re-dispatch budget). A sub-task
running on an address that left its group is lost too (:meth:`SubTaskPump.take_back`), and
so is one a dead admin node claimed that its executor does not hold (``recovery.py``).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from jobring.admin.dispatch.client import ExecutorClient
from jobring.admin.distributed.recovery import DeadNodeSubTasks
from jobring.admin.store import JobGroup, Store
from jobring.admin.store.subtasks import ClaimedTask, DistributedRun, TaskUpdate
from jobring.core.clock import Clock
from jobring.core.distributed import CancelRequested, Lost, ParentPhase

__all__ = ["SubTaskPump"]

log = logging.getLogger(__name__)

SUBTASKS_PATH = "jobring/subtasks"
Ended = Callable[[Sequence[DistributedRun]], Awaitable[None]]


class SubTaskPump:
    """Claims and sends sub-tasks; one per admin node."""

    def __init__(
        self,
        store: Store,
        client: ExecutorClient,
        clock: Clock,
        ended: Ended,
        *,
        window: int = 2_000,
        batch: int = 500,
        node_id: str = "",
    ) -> None:
        self._store = store
        self._node = node_id
        self._client = client
        self._clock = clock
        self._ended = ended
        self.window = window
        self.batch = batch
        self._sends: set[asyncio.Task[None]] = set()
        self.dead_nodes = DeadNodeSubTasks(store, client, clock, ended, node_id) if node_id else None
        self.sent = 0  # sub-tasks sent by this node (metrics, benches)

    async def round(self) -> int:
        """Claim and send for every parent with pending sub-tasks; returns how many were sent."""
        sent = 0
        groups: dict[int, JobGroup | None] = {}
        for run in await self._store.distributed.pending_runs():
            if run.job_group not in groups:
                groups[run.job_group] = await self._store.groups.get(run.job_group)
            group = groups[run.job_group]
            if group is None:
                continue
            sent += await self._pump(run, group)
        return sent

    async def _pump(self, run: DistributedRun, group: JobGroup) -> int:
        addresses = group.routable_addresses
        if not addresses:
            return 0
        load = await self._store.distributed.load(group.id)
        room = sorted(((self.window - load.get(a, 0), a) for a in addresses), key=lambda x: (-x[0], x[1]))
        slots = [(a, min(free, self.batch)) for free, a in room if free > 0]
        if not slots:
            return 0
        claimed = await self._store.distributed.claim(
            run.run_id,
            slots,
            self._clock.now_ms(),
            parts=run.phase != ParentPhase.PRE.value,
            node=self._node or None,
        )
        by_address: dict[str, list[ClaimedTask]] = {}
        for task in claimed:
            by_address.setdefault(task.executor_address, []).append(task)
        for address, tasks in by_address.items():
            work = asyncio.create_task(self._send(run, group, address, tasks))
            self._sends.add(work)
            work.add_done_callback(self._sends.discard)
        self.sent += len(claimed)
        return len(claimed)

    async def _send(
        self, run: DistributedRun, group: JobGroup, address: str, tasks: list[ClaimedTask]
    ) -> None:
        body: dict[str, Any] = {
            "runId": run.run_id,
            "jobId": run.job_id,
            "params": run.params or "",
            "tasks": [
                {
                    "id": t.id,
                    "attempt": t.attempt,
                    "key": t.key,
                    "task": t.task_name,
                    "kind": t.kind,
                    "item": t.item,
                    "index": t.shard_index,
                    "total": t.shard_total,
                }
                for t in tasks
            ],
        }
        try:
            answer = await self._client.call(
                address, SUBTASKS_PATH, body, group.access_token or None, group.app_name
            )
            if answer.ok:
                return
            reason = f"executor {address} refused the sub-tasks: {answer.msg}"
            log.warning(
                "run %s: %d sub-task(s) not taken by %s: %s",
                run.run_id,
                len(tasks),
                address,
                answer.msg,
                extra={"run_id": run.run_id, "address": address},
            )
            updates = [TaskUpdate(t.id, Lost(t.attempt), message=reason[:500]) for t in tasks]
            _, ended = await self._store.distributed.apply(updates, self._clock.now_ms())
            if ended:
                await self._ended(ended)
        except Exception:
            log.exception("run %s: sending %d sub-task(s) to %s failed", run.run_id, len(tasks), address)

    async def take_back(self) -> int:
        """Lose the running sub-tasks of executors no longer in their group (dead or gone),
        and cancel the waiting broadcast parts of those executors (a part is not moved)."""
        lives: dict[int, set[str]] = {}

        async def live_of(group_id: int) -> set[str]:
            if group_id not in lives:
                group = await self._store.groups.get(group_id)
                lives[group_id] = set(group.routable_addresses) if group is not None else set()
            return lives[group_id]

        # The sub-tasks a dead admin node claimed: their executors are asked first.
        lost = await self.dead_nodes.round() if self.dead_nodes is not None else 0
        stranded = [
            TaskUpdate(i, CancelRequested(), message=f"executor {address} left the group before its part ran")
            for i, group_id, address in await self._store.distributed.pending_parts()
            if address not in await live_of(group_id)
        ]
        if stranded:
            changed, ended = await self._store.distributed.apply(stranded, self._clock.now_ms())
            lost += changed
            if ended:
                await self._ended(ended)
        for group_id in await self._store.distributed.running_groups():
            live = await live_of(group_id)
            orphans = [
                (i, attempt, address)
                for i, attempt, address in await self._store.distributed.running_tasks(group_id)
                if address not in live
            ]
            if not orphans:
                continue
            gone = sorted({a or "?" for _, _, a in orphans})
            log.warning(
                "%d sub-task(s) of group %s lost with executor(s) %s: dispatching them again",
                len(orphans),
                group_id,
                ", ".join(gone),
            )
            updates = [
                TaskUpdate(i, Lost(attempt), message=f"executor {address} left the group")
                for i, attempt, address in orphans
            ]
            changed, ended = await self._store.distributed.apply(updates, self._clock.now_ms())
            lost += changed
            if ended:
                await self._ended(ended)
        return lost

    async def close(self) -> None:
        while self._sends:
            await asyncio.gather(*list(self._sends), return_exceptions=True)
