"""The admin's side of distributed runs: map calls, sub-task results, the root task's result,
sharded fires, "retry failed", and the periodic sweep (docs/distributed-jobs.md).

A parent run stays open (no result) while its sub-tasks run. When the join ends it (inside
a store write, see :mod:`jobring.admin.store.subtasks`), its result is recorded like an
executor's callback, through the callback service: child jobs, workflow edges, retries and
alarms follow the parent's outcome, not its root task's. The root task's own callback is
taken here and never recorded as the run's result. The sweep (every second, and at once when
woken by a map call or results) sends pending sub-tasks, takes back those of executors that
left their group, records parents that ended while no node recorded them, and resumes a
"retry the failed sub-tasks" that stopped midway (its admin died: the parent would stay
``retrying`` until a user asked again) once it has not moved for ``retry_stall_ms``.
"""

from __future__ import annotations

import json
import logging
import re
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import replace
from typing import Any

from jobring.admin.dispatch.client import ExecutorClient
from jobring.admin.distributed.pump import SubTaskPump
from jobring.admin.monitors.base import Monitor
from jobring.admin.store import GroupGuard, JobInfo, Store, Tally
from jobring.admin.store.errors import NotFound
from jobring.admin.store.subtasks import (
    KIND_BCAST,
    KIND_MAP,
    KIND_SHARD,
    DistributedRun,
    NewSubTask,
    TaskUpdate,
)
from jobring.background import Background
from jobring.core.clock import Clock
from jobring.core.distributed import (
    MAX_ITEM_BYTES,
    FailureTolerance,
    Finished,
    JoinError,
    MapLimitError,
    ParentPhase,
    check_shard_total,
    plan_map,
)
from jobring.core.enums import HandleCode
from jobring.protocol.models import HandleCallbackParam

__all__ = ["DistributedService", "SubTaskResult", "outcome_of"]

log = logging.getLogger(__name__)

Record = Callable[[Sequence[HandleCallbackParam]], Awaitable[object]]
# id, attempt, ok, result JSON, message, its log's last lines
SubTaskResult = tuple[int, int, bool, str | None, str | None, str | None]
_TAKE_BACK_EVERY_S = 2.0
RETRY_STALL_MS = 60_000
"""A retry of failed sub-tasks that has put none back for this long is resumed by the sweep
(a live one puts back a part every few milliseconds; two at once share the work)."""
RETRYING_PAGE = 100  # parents in "retrying" read at a time by the sweep
_RESULT_SHOWN = 1_000
_HANDLER = re.compile(r"[A-Za-z][A-Za-z0-9_.-]{0,63}")  # a reduce handler's name


def outcome_of(run: DistributedRun) -> tuple[int, str]:
    """The parent run's handle code and message, from its join state."""
    tolerance = FailureTolerance.parse(run.tolerance) if run.tolerance else FailureTolerance()
    allowed = tolerance.allowed(run.total)
    what = {KIND_SHARD: "shards", KIND_BCAST: "executors"}.get(run.kind, "sub-tasks")
    reduce = "post hook" if run.kind == KIND_BCAST else "reduce"
    counts = f"{run.succeeded} of {run.total} {what} succeeded, {run.failed} failed"
    if run.tolerance:
        counts += f" (failure tolerance {run.tolerance}: {allowed} allowed)"
    if run.kind == KIND_BCAST and run.pre_task:
        counts = f"pre hook {run.pre_task}; {counts}"
    shown = run.result
    if shown is not None and len(shown) > _RESULT_SHOWN:
        shown = shown[:_RESULT_SHOWN] + "..."
    if run.phase == ParentPhase.SUCCEEDED.value:
        msg = counts
        if run.reduce_task:
            msg += f"; {reduce} {run.reduce_task}: {shown}"
        return HandleCode.SUCCESS, msg
    if run.root_state == "failed":
        if run.kind == KIND_BCAST:  # the root_msg says "pre hook failed: ..."
            return HandleCode.FAIL, f"{run.root_msg or 'pre hook failed'}; {counts}"
        return HandleCode.FAIL, f"root task failed: {run.root_msg or ''}; {counts}"
    if run.failed > allowed:
        post = f"; {reduce} {run.reduce_task}: {shown}" if run.kind == KIND_BCAST and run.reduce_task else ""
        return HandleCode.FAIL, f"too many {what} failed: {counts}{post}"
    return HandleCode.FAIL, f"{reduce} {run.reduce_task} failed: {run.root_msg or ''}; {counts}"


class DistributedService(Monitor):
    """One per admin node; ``record`` (the callback service's ``handle``) is set by the app."""

    name = "distributed-runs"

    def __init__(
        self,
        store: Store,
        client: ExecutorClient,
        clock: Clock,
        *,
        interval_s: float = 1.0,
        window: int = 2_000,
        batch: int = 500,
        node_id: str = "",
        retry_stall_ms: int = RETRY_STALL_MS,
    ) -> None:
        super().__init__(interval_s)
        self._store = store
        self._clock = clock
        self.pump = SubTaskPump(
            store, client, clock, self._record_ended, window=window, batch=batch, node_id=node_id
        )
        self.record: Record | None = None
        self._last_take_back = 0.0
        self._tasks = Background(log)
        self._retry_stall_ms = retry_stall_ms
        # Per retrying parent: its (attempt, failed children) as last seen and since when.
        self._retries_seen: dict[int, tuple[tuple[int, int], int]] = {}
        self._resuming: set[int] = set()

    # --- executor-facing --------------------------------------------------------------------

    async def map_call(
        self,
        run_id: int,
        parent_key: str,
        call_seq: int,
        task_name: str,
        items: Sequence[object],
        reduce_task: str | None,
        guard: GroupGuard | None,
    ) -> tuple[int, int]:
        """Store a ``map`` call's sub-tasks; (created, total). MapLimitError, NotFound, Conflict."""
        if reduce_task is not None and not _HANDLER.fullmatch(reduce_task):
            raise MapLimitError("task_name", "reduce", f"{reduce_task[:80]!r} is not a usable handler name")
        planned = plan_map(parent_key, call_seq, task_name, items, subtasks_so_far=0)
        tasks = [NewSubTask(t.key, t.task_name, KIND_MAP, t.item_json) for t in planned]
        created, total = await self._store.distributed.add_map_call(
            run_id, parent_key, tasks, reduce_task, self._clock.now_ms(), guard=guard
        )
        if created:
            self.wake()
        return created, total

    async def results(self, results: Sequence[SubTaskResult], guard: GroupGuard | None) -> int:
        """Sub-task results from an executor (the guard's groups only); returns rows changed."""
        updates = []
        for task_id, attempt, ok, result, msg, lines in results:
            if ok and result is not None and len(result.encode("utf-8")) > MAX_ITEM_BYTES:
                ok, result, msg = (
                    False,
                    None,
                    f"the result is over MAX_ITEM_BYTES ({MAX_ITEM_BYTES} bytes as JSON)",
                )
            updates.append(TaskUpdate(task_id, Finished(attempt, ok), result if ok else None, msg, log=lines))
        changed, ended = await self._store.distributed.apply(updates, self._clock.now_ms(), guard=guard)
        if ended:
            await self._record_ended(ended)
        self.wake()
        return changed

    async def reduce_input(
        self, run_id: int, after_id: int, limit: int, guard: GroupGuard | None
    ) -> list[dict[str, Any]]:
        rows = await self._store.distributed.results(run_id, after_id=after_id, limit=limit, guard=guard)
        return [
            {"id": i, "key": key, "result": None if text is None else json.loads(text)}
            for i, key, text in rows
        ]

    async def take_callbacks(
        self, items: Sequence[HandleCallbackParam], guard: GroupGuard | None
    ) -> tuple[list[HandleCallbackParam], set[int]]:
        """Split a callback batch: the root tasks' results of parents still joining are taken
        here (returned as taken ids); a parent that ended is reported with the join's outcome,
        whoever sends it; every other item is kept as it is."""
        parents = await self._store.distributed.get_many({i.log_id for i in items})
        if not parents:
            return list(items), set()
        decided: list[HandleCallbackParam | None] = []  # None: a root task's result
        roots: list[tuple[int, bool, str | None]] = []
        for item in items:
            parent = parents.get(item.log_id)
            if parent is None or (guard is not None and not guard.allows(parent.job_group)):
                decided.append(item)
            elif ParentPhase(parent.phase).is_final:
                code, msg = outcome_of(parent)
                decided.append(replace(item, handle_code=code, handle_msg=msg))
            else:
                decided.append(None)
                roots.append((item.log_id, item.handle_code == HandleCode.SUCCESS, item.handle_msg))
        taken: set[int] = set()
        if roots:
            taken, ended = await self._store.distributed.root_finished(
                roots, self._clock.now_ms(), guard=guard
            )
            if ended:
                self._tasks.spawn(self._record_ended(ended), "recording ended distributed runs")
        kept = [
            d if d is not None else item
            for d, item in zip(decided, items, strict=True)
            if d is not None or item.log_id not in taken
        ]
        return kept, taken

    # --- admin-facing -----------------------------------------------------------------------

    async def start_sharded(self, log_id: int, job: JobInfo, param: str | None) -> str:
        """A fire of a job with a shard count: its run becomes a parent of that many shards."""
        check_shard_total(job.shard_count)
        await self._store.distributed.start_sharded(
            log_id,
            job.id,
            job.job_group,
            job.executor_handler or "",
            job.shard_count,
            param,
            job.failure_tolerance,
            job.executor_fail_retry_count,
            self._clock.now_ms(),
        )
        self.wake()
        return f"sharded: {job.shard_count} shard(s) as sub-tasks over the group's executors"

    async def start_broadcast(
        self, log_id: int, job: JobInfo, param: str | None, executors: Sequence[str]
    ) -> str:
        """A fire of a broadcast job with hooks: its run becomes a parent of one part per
        executor (those live now), after its pre hook and before its post hook."""
        addresses = sorted(set(executors))
        await self._store.distributed.start_broadcast(
            log_id,
            job.id,
            job.job_group,
            job.executor_handler or "",
            addresses,
            (job.broadcast_pre, job.broadcast_post),
            param,
            job.failure_tolerance,
            job.executor_fail_retry_count,
            self._clock.now_ms(),
        )
        self.wake()
        named = (("pre", job.broadcast_pre), ("post", job.broadcast_post))
        hooks = ", ".join(f"{kind} hook {name}" for kind, name in named if name)
        return f"broadcast: {len(addresses)} executor(s) as sub-tasks ({hooks or 'no hooks'})"

    async def retry_failed(self, run_id: int, tally: Tally | None = None) -> int:
        """Retry the failed sub-tasks of an ended parent; returns how many this call put back
        (``tally`` counts them as they go). NotFound, JoinError."""
        count, ended = await self._store.distributed.retry_failed(run_id, self._clock.now_ms(), tally=tally)
        if ended:
            await self._record_ended(ended)
        self.wake()
        return count

    # --- the sweep --------------------------------------------------------------------------

    async def tick(self) -> None:
        now = time.monotonic()
        if now - self._last_take_back >= _TAKE_BACK_EVERY_S:
            self._last_take_back = now
            await self.pump.take_back()
            unrecorded = await self._store.distributed.unrecorded()
            if unrecorded:
                await self._record_ended(unrecorded)
            await self.resume_stalled_retries()
        await self.pump.round()

    async def resume_stalled_retries(self) -> list[int]:
        """Resume (in the background) each retry of failed sub-tasks that has not moved for
        ``retry_stall_ms`` as this node saw it; returns their run ids."""
        now = self._clock.now_ms()
        seen: dict[int, tuple[tuple[int, int], int]] = {}
        stalled: list[int] = []
        for parent in await self._retrying():
            moved = (parent.attempt, parent.failed)  # each part put back lowers ``failed``
            before = self._retries_seen.get(parent.run_id)
            since = now if before is None or before[0] != moved else before[1]
            seen[parent.run_id] = (moved, since)
            if now - since >= self._retry_stall_ms and parent.run_id not in self._resuming:
                stalled.append(parent.run_id)
                seen[parent.run_id] = (moved, now)  # not again before another stall
        self._retries_seen = seen
        for run_id in stalled:
            self._resuming.add(run_id)
            self._tasks.spawn(self._resume_retry(run_id), f"resuming the retry of run {run_id}")
        return stalled

    async def _retrying(self) -> list[DistributedRun]:
        """Every parent in ``retrying``, a page a read."""
        parents: list[DistributedRun] = []
        while True:
            after = parents[-1].run_id if parents else 0
            page = await self._store.distributed.retrying(after_run_id=after, limit=RETRYING_PAGE)
            parents.extend(page)
            if len(page) < RETRYING_PAGE:
                return parents

    async def _resume_retry(self, run_id: int) -> None:
        try:
            count = await self.retry_failed(run_id)
        except (NotFound, JoinError):
            return  # completed (or the run deleted) since it was read
        finally:
            self._resuming.discard(run_id)
        log.warning("run %s: a retry of its failed sub-tasks had stopped midway (no progress for %s ms); "
                    "resumed here: %d more put back", run_id, self._retry_stall_ms, count,
                    extra={"run_id": run_id})

    async def _record_ended(self, parents: Sequence[DistributedRun]) -> None:
        """Record each ended parent's result on its run (children, alarms, workflows follow)."""
        if self.record is None or not parents:
            return
        items = []
        for parent in parents:
            code, msg = outcome_of(parent)
            items.append(HandleCallbackParam(parent.run_id, parent.created_at, code, msg))
            log.info(
                "run %s ended %s: %s", parent.run_id, parent.phase, msg[:200], extra={"run_id": parent.run_id}
            )
        await self.record(items)
        await self._store.distributed.mark_recorded(
            {p.run_id for p in parents}, {p.run_id: p.attempt for p in parents}
        )

    async def stop(self) -> None:
        await super().stop()
        await self._tasks.wait()
        await self.pump.close()
