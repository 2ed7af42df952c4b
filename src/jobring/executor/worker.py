"""The execution engine: one worker per job id, block strategies, timeout, kill, results.

A :class:`JobRunner` takes triggers (``run``), keeps one worker (an asyncio
task with a queue) per job id, runs each trigger's handler and reports exactly
one :class:`HandleCallbackParam` per accepted run through ``report``.

Behaviour, as XXL-JOB's xxl-job-core (messages are the reference's, byte for byte):

- SERIAL_EXECUTION queues; DISCARD_LATER answers ``block strategy effect：Discard
  Later`` while a run executes or waits; COVER_EARLY replaces the busy worker:
  its running run is reported ``block strategy effect：Cover Early [job running,
  killed]``, queued ones ``... [job not executed, in the job queue, killed.]``.
  An unknown strategy queues (as the reference). Unlike the reference, a job's queue is
  capped: with ``max_queued_per_job`` runs (default 1,000; 0 = no cap) waiting behind the
  job's running run, ``/run`` answers 500 ``job queue full: ...`` (the admin records the
  fire as failed, with that message, and retries or alarms as the job says).
- A different handler object for the job id, or a different GLUE type/version,
  replaces the worker the same way (reason ``change jobhandler or glue type,
  and terminate the old job thread.`` / ``change job source or glue type, ...``).
- ``kill`` stops the job's worker (``scheduling center kill job. [job running,
  killed]``) and answers 200; with no worker it answers 200 ``job thread already
  killed.``. A logId already waiting in the queue is refused (``repeate trigger
  job, logId:N``).
- ``init`` runs once when a worker starts, ``destroy`` when it ends (idle for
  ``idle_timeout_s``, replaced, killed, or the runner closes). Hook errors are
  logged and do not stop the worker.
- Results: return normally = 200 without message; ``ctx.fail(msg)`` = 500 msg;
  an exception = 500 with its traceback (any message is cut at ``max_handle_msg``
  characters + "...", as the reference cuts at 50000);
  ``executorTimeout`` seconds exceeded = 502 ``job execute timeout ``.

Handler kinds and how they stop (see also jobring.executor.isolation):

- async functions run as a task on the event loop (no thread per run) and are
  cancelled on timeout/kill; a handler that ignores cancellation is left
  running after ``kill_grace_s``, with a warning.
- sync functions run in a shared thread pool (``sync_threads`` threads,
  default 64: enough for many blocking jobs, bounded so a burst cannot start
  thousands of threads). On timeout/kill the result is reported at once, the
  context is marked cancelled and the next ``ctx.log`` raises JobCancelled; the
  thread finishes on its own and keeps its pool slot until then, and the job's
  next run may start meanwhile. Pool threads are daemon threads (see
  jobring.executor.syncpool): a sync handler that never returns does not delay
  process exit, but it keeps its thread; give such jobs ``isolation="process"``.
  When more than ``max_waiting_runs`` runs (default 4 x ``sync_threads``) could start but wait
  for a free pool thread, ``/run`` waits (as for the run-log backlog) until half as many wait:
  accepting is cheaper than running, and without it runs would pile up without bound. Runs
  queued behind a SERIAL job's own running run are not counted: they wait for their job, not
  for a thread (each job hands the pool one run at a time).
- ``isolation="process"`` sync functions and GLUE scripts run in a subprocess
  whose process group is terminated (SIGTERM, SIGKILL after ``kill_grace_s``);
  the worker waits for it to be gone before running anything else.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping

from jobring.core.buckets import Buckets
from jobring.core.enums import BlockStrategy, GlueType
from jobring.core.runstate import RunState, run_state
from jobring.executor.context import JobHandler
from jobring.executor.glue import GlueScript, glue_refusal
from jobring.executor.jobworker import (
    REASON_COVER_EARLY,
    REASON_IDLE,
    REASON_STOPPING,
    JobWorker,
    RootScopes,
    Run,
    Unit,
)
from jobring.executor.received import MSG_ALREADY_RECEIVED, ReceivedRuns, run_key
from jobring.executor.runlog import RunLog
from jobring.executor.syncpool import SyncPool
from jobring.protocol.models import SUCCESS_CODE, HandleCallbackParam, ReturnT, TriggerParam

__all__ = ["JobRunner", "ReportFn"]

log = logging.getLogger(__name__)

ReportFn = Callable[[HandleCallbackParam], None]

MSG_DISCARD_LATER = "block strategy effect：Discard Later"
REASON_KILL = "scheduling center kill job."
MSG_ALREADY_KILLED = "job thread already killed."
MSG_BUSY = "job thread is running or has trigger queue."
MSG_NOT_ACCEPTING = "executor is stopping, run not accepted."
# Runs waiting in one job's queue (behind its running run) past which /run refuses: 0 = no cap.
DEFAULT_MAX_QUEUED_PER_JOB = 1000
REFUSED_QUEUE_FULL = "queue_full"


def msg_queue_full(waiting: int, cap: int) -> str:
    return (f"job queue full: {waiting} runs of this job wait behind its running run "
            f"(max_queued_per_job={cap}); run not accepted.")

_SUCCESS = RunState.SUCCESS.value
_ROOM_POLL_S = 0.005  # how often a /run held back (run-log backlog, busy pool) looks again
# Handler duration buckets, ms: from quick calls to hour-long batch jobs.
HANDLER_MS_BOUNDS = (5, 25, 100, 250, 1_000, 5_000, 15_000, 60_000, 300_000, 900_000, 3_600_000)


def _msg_not_found(name: str) -> str:
    return f"job handler [{name}] not found."


class JobRunner:
    """Runs triggers on per-job workers and reports each run's outcome once."""

    def __init__(
        self,
        handlers: Mapping[str, JobHandler],
        runlog: RunLog,
        report: ReportFn,
        *,
        glue_enabled: bool = False,
        idle_timeout_s: float = 90.0,
        max_handle_msg: int = 15000,
        clock: Callable[[], float] = time.monotonic,
        sync_threads: int = 64,
        kill_grace_s: float = 2.0,
        received: ReceivedRuns | None = None,
        max_waiting_runs: int | None = None,
        max_queued_per_job: int = DEFAULT_MAX_QUEUED_PER_JOB,
    ) -> None:
        self.handlers = handlers
        self.runlog = runlog
        # Runs accepted recently (kept in the log folder): a repeated /run is not run twice.
        self.received = received if received is not None else ReceivedRuns(runlog.base)
        self.glue_enabled = glue_enabled
        self.idle_timeout_s = idle_timeout_s
        self.max_handle_msg = max_handle_msg
        self.kill_grace_s = kill_grace_s
        self._report = report
        self.clock = clock
        self.workers: dict[int, JobWorker] = {}
        self.live: set[asyncio.Task[None]] = set()  # worker tasks, including stopped ones still settling
        self.pool = SyncPool(sync_threads, "jobring-job")
        # Runs that could start but wait for a pool thread, beyond which /run waits.
        self.max_waiting_runs = 4 * sync_threads if max_waiting_runs is None else max_waiting_runs
        if self.max_waiting_runs < 1:
            raise ValueError("max_waiting_runs must be at least 1")
        if max_queued_per_job < 0:
            raise ValueError("max_queued_per_job must be 0 (no cap) or more")
        self.max_queued_per_job = max_queued_per_job
        self._closing = False
        self._room: asyncio.Future[None] | None = None  # done once the writer and the pool caught up
        self._room_watch: asyncio.Task[None] | None = None
        # For metrics (read at scrape time): runs ended by state, handler durations (ms).
        self.ended: dict[str, int] = {}
        self.refused: dict[str, int] = {}  # runs refused by reason (queue_full)
        self.durations_ms = Buckets(HANDLER_MS_BOUNDS)
        # Lets a run's handler map (executor.distributed; set by the executor when it starts).
        self.distributed: RootScopes | None = None

    # --- admin-facing operations ------------------------------------------------------------

    async def run(self, param: TriggerParam) -> ReturnT:
        """Accept a trigger (answer 200) or refuse it with the reference's message."""
        await self._held_back_while_behind()
        return self._accept(param)

    def run_now(self, param: TriggerParam) -> ReturnT | None:
        """:meth:`run` when it need not wait (the run-log writer and the pool keep up: the usual
        case), else None: then await :meth:`run`."""
        if self.runlog.behind() or self.pool.waiting > self.max_waiting_runs:
            return None
        return self._accept(param)

    async def run_all(self, params: list[TriggerParam]) -> list[ReturnT]:
        """:meth:`run` for several runs (a broker message's): room is waited for once, then
        each is accepted or refused in one step, so a stop cannot come between them."""
        await self._held_back_while_behind()
        return [self._accept(param) for param in params]

    async def _held_back_while_behind(self) -> None:
        if self.runlog.behind() or self.pool.waiting > self.max_waiting_runs:
            await self._wait_for_room()

    def _accept(self, param: TriggerParam) -> ReturnT:
        if self._closing:
            return ReturnT.fail(MSG_NOT_ACCEPTING)
        try:
            self.runlog.check(param.log_date_time, param.log_id)
        except ValueError as exc:
            return ReturnT.fail(str(exc))
        key = run_key(param.log_id, param.log_date_time)
        if key in self.received:
            queued = self.workers.get(param.job_id)
            if queued is not None and param.log_id in queued.log_ids:
                return ReturnT.fail(f"repeate trigger job, logId:{param.log_id}")  # as the reference
            # Sent again by an admin that could not know whether this run arrived.
            return ReturnT(code=SUCCESS_CODE, msg=MSG_ALREADY_RECEIVED)
        unit = self._resolve(param)
        if isinstance(unit, ReturnT):
            return unit
        worker = self.workers.get(param.job_id)
        if worker is not None:
            reason = worker.replace_reason(unit)
            if reason is None and worker.busy():
                blocked = self._blocked(worker, param.executor_block_strategy)
                if isinstance(blocked, ReturnT):
                    return blocked
                reason = blocked
            if reason is not None:
                worker.stop(reason)
                worker = None
        if worker is None:
            worker = JobWorker(self, param.job_id, unit)
            self.workers[param.job_id] = worker
        answer = worker.push(Run(param))
        if answer.code == SUCCESS_CODE:
            self.received.add(key)
        return answer

    def _blocked(self, worker: JobWorker, strategy: str) -> ReturnT | str | None:
        """A busy worker's block strategy: a refusal, a reason to replace the worker, or None
        (queue the run)."""
        if strategy == BlockStrategy.DISCARD_LATER:
            return ReturnT.fail(MSG_DISCARD_LATER)
        if strategy == BlockStrategy.COVER_EARLY:
            return REASON_COVER_EARLY
        waiting = len(worker.queue)
        if 0 < self.max_queued_per_job <= waiting:
            # A queue that only grows (runs fired faster than they end) is refused here,
            # visibly to the admin, instead of growing without bound.
            self.refused[REFUSED_QUEUE_FULL] = self.refused.get(REFUSED_QUEUE_FULL, 0) + 1
            return ReturnT.fail(msg_queue_full(waiting, self.max_queued_per_job))
        return None

    @property
    def closing(self) -> bool:
        """True once :meth:`close` began: no run is accepted any more."""
        return self._closing

    def received_of(self, runs: list[tuple[int, int]]) -> list[int]:
        """The log ids among ``runs`` ((logId, logDateTime ms)) this executor accepted
        (within its window of recent runs)."""
        return [log_id for log_id, at in runs if run_key(log_id, at) in self.received]

    async def _wait_for_room(self) -> None:
        """Wait until the run-log writer is no more than half its backlog behind and no more than
        half ``max_waiting_runs`` runs wait for a pool thread: the answer to /run waits
        (backpressure on the admin) instead of memory growing without bound."""
        room = self._room
        if room is None or room.done():
            loop = asyncio.get_running_loop()
            room = self._room = loop.create_future()
            self._room_watch = loop.create_task(self._watch_room(room), name="jobring-run-room")
        await asyncio.shield(room)  # one waiter cancelled does not cancel the others' wait

    async def _watch_room(self, room: asyncio.Future[None]) -> None:
        half_log = self.runlog.max_backlog // 2
        half_pool = self.max_waiting_runs // 2
        # Both shrink in other threads (the writer's, the pool's): polled, only while /run is held back.
        while self.runlog.behind(half_log) or self.pool.waiting > half_pool:  # noqa: ASYNC110
            await asyncio.sleep(_ROOM_POLL_S)
        if not room.done():  # close() answers the held runs itself
            room.set_result(None)

    def _resolve(self, param: TriggerParam) -> Unit | ReturnT:
        if param.glue_type == GlueType.BEAN:
            handler = self.handlers.get(param.executor_handler)
            return handler if handler is not None else ReturnT.fail(_msg_not_found(param.executor_handler))
        refusal = glue_refusal(param.glue_type, enabled=self.glue_enabled)
        if refusal is not None:
            return ReturnT.fail(refusal)
        return GlueScript(param.job_id, GlueType(param.glue_type), param.glue_updatetime, param.glue_source)

    def is_idle(self, job_id: int) -> bool:
        """True when no run of this job is executing or queued (for /idleBeat)."""
        worker = self.workers.get(job_id)
        return worker is None or not worker.busy()

    async def kill(self, job_id: int) -> ReturnT:
        """Stop the job's worker: its running and queued runs are reported as killed."""
        worker = self.workers.get(job_id)
        if worker is None:
            return ReturnT(200, MSG_ALREADY_KILLED)
        worker.stop(REASON_KILL)
        return ReturnT.success()

    def running_count(self) -> int:
        """How many runs are executing right now (queued ones not counted)."""
        return sum(1 for w in self.workers.values() if w.current is not None)

    def queued_count(self) -> int:
        return sum(len(w.queue) for w in self.workers.values())

    def waiting_for_thread(self) -> int:
        """Runs (and init/destroy hooks) that could start but wait for a free pool thread."""
        return self.pool.waiting

    def queue_depths(self) -> dict[int, int]:
        """Runs waiting in each job's queue (jobs with none are left out)."""
        return {job_id: len(w.queue) for job_id, w in self.workers.items() if w.queue}

    def retire_idle(self) -> int:
        """Retire workers idle for ``idle_timeout_s`` by the clock now; returns how many.

        Workers also retire on their own timer; this is for an injected clock.
        """
        now = self.clock()
        idle = [
            w for w in self.workers.values() if not w.busy() and now - w.idle_since >= self.idle_timeout_s
        ]
        for worker in idle:
            worker.stop(REASON_IDLE)
        return len(idle)

    async def close(self, timeout: float = 10.0) -> None:  # noqa: ASYNC109 - agreed interface
        """Stop accepting; report queued runs failed (``executor stopping [job not executed, ...]``);
        let running runs finish for up to ``timeout`` s, then kill them; run destroy hooks."""
        self._closing = True
        # Runs held back (run-log backlog, busy pool) are answered now (refused: the executor stops).
        if self._room is not None and not self._room.done():
            self._room.set_result(None)
        if self._room_watch is not None:
            self._room_watch.cancel()
        for worker in list(self.workers.values()):
            worker.drain(REASON_STOPPING)
        if self.live:
            await asyncio.wait(set(self.live), timeout=timeout)
        for worker in list(self.workers.values()):
            worker.stop(REASON_STOPPING)
        if self.live:
            _, pending = await asyncio.wait(set(self.live), timeout=self.kill_grace_s + 3.0)
            for task in pending:
                log.warning("job worker %s did not stop in time; abandoning it", task.get_name())
        self.pool.shutdown()
        self.received.close()
        await asyncio.get_running_loop().run_in_executor(None, self.runlog.flush)

    # --- used by workers ---------------------------------------------------------------------

    def finish(self, run: Run, code: int, msg: str | None) -> None:
        if run.reported:
            return
        run.reported = True
        # A workflow node's additions go back only with a success (``set`` kept them in the cap).
        workflow = None if run.ctx is None else run.ctx.workflow
        added = workflow.additions() or None if workflow is not None and code == SUCCESS_CODE else None
        if msg is not None and len(msg) > self.max_handle_msg:
            msg = self._cap(msg)
        run.code, run.msg = code, msg
        state = _SUCCESS if code == SUCCESS_CODE else run_state(
            trigger_code=200, handle_code=code, handle_msg=msg, now_ms=0).value
        self.ended[state] = self.ended.get(state, 0) + 1
        if run.started is not None:
            self.durations_ms.observe((self.clock() - run.started) * 1000)
        try:
            self._report(HandleCallbackParam(run.param.log_id, run.param.log_date_time, code, msg, added))
        except Exception:
            log.exception("reporting the result of log %s failed", run.param.log_id)

    def _cap(self, text: str) -> str:
        return text if len(text) <= self.max_handle_msg else text[: self.max_handle_msg] + "..."


