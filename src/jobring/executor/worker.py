"""The execution engine: one worker per job id, block strategies, timeout, kill, results.

A :class:`JobRunner` takes triggers (``run``), keeps one worker (an asyncio
task with a queue) per job id, runs each trigger's handler and reports exactly
one :class:`HandleCallbackParam` per accepted run through ``report``.

Behaviour, as XXL-JOB's xxl-job-core (messages are the reference's, byte for byte):

- SERIAL_EXECUTION queues; DISCARD_LATER answers ``block strategy effect：Discard
  Later`` while a run executes or waits; COVER_EARLY replaces the busy worker:
  its running run is reported ``block strategy effect：Cover Early [job running,
  killed]``, queued ones ``... [job not executed, in the job queue, killed.]``.
  An unknown strategy queues (as the reference).
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
import contextvars
import inspect
import logging
import time
import traceback
from collections import deque
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Protocol

from jobring.core.buckets import Buckets
from jobring.core.enums import BlockStrategy, GlueType
from jobring.core.runstate import run_state
from jobring.executor.context import JobCancelled, JobContext, JobHandler, exception_summary
from jobring.executor.glue import GlueScript, glue_refusal, run_script
from jobring.executor.isolation import run_in_process
from jobring.executor.received import MSG_ALREADY_RECEIVED, ReceivedRuns, run_key
from jobring.executor.runlog import RunLog, RunLogWriter, format_line
from jobring.executor.syncpool import SyncPool
from jobring.protocol.models import SUCCESS_CODE, HandleCallbackParam, ReturnT, TriggerParam

__all__ = ["JobRunner", "ReportFn"]

log = logging.getLogger(__name__)

ReportFn = Callable[[HandleCallbackParam], None]
Outcome = tuple[int, str | None]

MSG_DISCARD_LATER = "block strategy effect：Discard Later"
REASON_COVER_EARLY = "block strategy effect：Cover Early"
REASON_KILL = "scheduling center kill job."
REASON_CHANGE_HANDLER = "change jobhandler or glue type, and terminate the old job thread."
REASON_CHANGE_SOURCE = "change job source or glue type, and terminate the old job thread."
REASON_IDLE = "excutor idel times over limit."
REASON_STOPPING = "executor stopping"
SUFFIX_RUNNING = " [job running, killed]"
SUFFIX_QUEUED = " [job not executed, in the job queue, killed.]"
MSG_TIMEOUT = "job execute timeout "
MSG_ALREADY_KILLED = "job thread already killed."
MSG_BUSY = "job thread is running or has trigger queue."
MSG_NOT_ACCEPTING = "executor is stopping, run not accepted."

_ENGINE = "jobring.executor.worker#run"
_ROOM_POLL_S = 0.005  # how often a /run held back (run-log backlog, busy pool) looks again
# Handler duration buckets, ms: from quick calls to hour-long batch jobs.
HANDLER_MS_BOUNDS = (5, 25, 100, 250, 1_000, 5_000, 15_000, 60_000, 300_000, 900_000, 3_600_000)
Unit = JobHandler | GlueScript


def _msg_not_found(name: str) -> str:
    return f"job handler [{name}] not found."


class RootScopes(Protocol):
    """Gives a run's handler what ``ctx.map`` calls (executor.distributed.SubTaskRunner)."""

    def root_scope(self, run_id: int, handler_name: str) -> Any: ...


class _Run:
    __slots__ = ("param", "ctx", "reported", "code", "msg", "started")

    def __init__(self, param: TriggerParam) -> None:
        self.param = param
        self.ctx: JobContext | None = None
        self.reported = False
        self.code = 0
        self.msg: str | None = None
        self.started: float | None = None  # runner clock when the handler started


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
        self._clock = clock
        self._workers: dict[int, _Worker] = {}
        self._live: set[asyncio.Task[None]] = set()  # worker tasks, including stopped ones still settling
        self._pool = SyncPool(sync_threads, "jobring-job")
        # Runs that could start but wait for a pool thread, beyond which /run waits.
        self.max_waiting_runs = 4 * sync_threads if max_waiting_runs is None else max_waiting_runs
        if self.max_waiting_runs < 1:
            raise ValueError("max_waiting_runs must be at least 1")
        self._closing = False
        self._room: asyncio.Future[None] | None = None  # done once the writer and the pool caught up
        self._room_watch: asyncio.Task[None] | None = None
        # For metrics (read at scrape time): runs ended by state, handler durations (ms).
        self.ended: dict[str, int] = {}
        self.durations_ms = Buckets(HANDLER_MS_BOUNDS)
        # Lets a run's handler map (executor.distributed; set by the executor when it starts).
        self.distributed: RootScopes | None = None

    # --- admin-facing operations ------------------------------------------------------------

    async def run(self, param: TriggerParam) -> ReturnT:
        """Accept a trigger (answer 200) or refuse it with the reference's message."""
        if self.runlog.behind() or self._pool.waiting > self.max_waiting_runs:
            await self._wait_for_room()
        return self._accept(param)

    async def run_all(self, params: list[TriggerParam]) -> list[ReturnT]:
        """:meth:`run` for several runs (a broker message's): room is waited for once, then
        each is accepted or refused in one step, so a stop cannot come between them."""
        if self.runlog.behind() or self._pool.waiting > self.max_waiting_runs:
            await self._wait_for_room()
        return [self._accept(param) for param in params]

    def _accept(self, param: TriggerParam) -> ReturnT:
        if self._closing:
            return ReturnT.fail(MSG_NOT_ACCEPTING)
        try:
            self.runlog.check(param.log_date_time, param.log_id)
        except ValueError as exc:
            return ReturnT.fail(str(exc))
        key = run_key(param.log_id, param.log_date_time)
        if key in self.received:
            queued = self._workers.get(param.job_id)
            if queued is not None and param.log_id in queued.log_ids:
                return ReturnT.fail(f"repeate trigger job, logId:{param.log_id}")  # as the reference
            # Sent again by an admin that could not know whether this run arrived.
            return ReturnT(code=SUCCESS_CODE, msg=MSG_ALREADY_RECEIVED)
        unit = self._resolve(param)
        if isinstance(unit, ReturnT):
            return unit
        worker = self._workers.get(param.job_id)
        if worker is not None:
            reason = worker.replace_reason(unit)
            if reason is None and worker.busy():
                strategy = param.executor_block_strategy
                if strategy == BlockStrategy.DISCARD_LATER:
                    return ReturnT.fail(MSG_DISCARD_LATER)
                if strategy == BlockStrategy.COVER_EARLY:
                    reason = REASON_COVER_EARLY
            if reason is not None:
                worker.stop(reason)
                worker = None
        if worker is None:
            worker = _Worker(self, param.job_id, unit)
            self._workers[param.job_id] = worker
        answer = worker.push(_Run(param))
        if answer.code == SUCCESS_CODE:
            self.received.add(key)
        return answer

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
        while self.runlog.behind(half_log) or self._pool.waiting > half_pool:  # noqa: ASYNC110
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
        worker = self._workers.get(job_id)
        return worker is None or not worker.busy()

    async def kill(self, job_id: int) -> ReturnT:
        """Stop the job's worker: its running and queued runs are reported as killed."""
        worker = self._workers.get(job_id)
        if worker is None:
            return ReturnT(200, MSG_ALREADY_KILLED)
        worker.stop(REASON_KILL)
        return ReturnT.success()

    def running_count(self) -> int:
        """How many runs are executing right now (queued ones not counted)."""
        return sum(1 for w in self._workers.values() if w.current is not None)

    def queued_count(self) -> int:
        return sum(len(w.queue) for w in self._workers.values())

    def waiting_for_thread(self) -> int:
        """Runs (and init/destroy hooks) that could start but wait for a free pool thread."""
        return self._pool.waiting

    def queue_depths(self) -> dict[int, int]:
        """Runs waiting in each job's queue (jobs with none are left out)."""
        return {job_id: len(w.queue) for job_id, w in self._workers.items() if w.queue}

    def retire_idle(self) -> int:
        """Retire workers idle for ``idle_timeout_s`` by the clock now; returns how many.

        Workers also retire on their own timer; this is for an injected clock.
        """
        now = self._clock()
        idle = [
            w for w in self._workers.values() if not w.busy() and now - w.idle_since >= self.idle_timeout_s
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
        for worker in list(self._workers.values()):
            worker.drain(REASON_STOPPING)
        if self._live:
            await asyncio.wait(set(self._live), timeout=timeout)
        for worker in list(self._workers.values()):
            worker.stop(REASON_STOPPING)
        if self._live:
            _, pending = await asyncio.wait(set(self._live), timeout=self.kill_grace_s + 3.0)
            for task in pending:
                log.warning("job worker %s did not stop in time; abandoning it", task.get_name())
        self._pool.shutdown()
        self.received.close()
        await asyncio.get_running_loop().run_in_executor(None, self.runlog.flush)

    # --- used by workers ---------------------------------------------------------------------

    def _finish(self, run: _Run, code: int, msg: str | None) -> None:
        if run.reported:
            return
        run.reported = True
        # A workflow node's additions go back only with a success (``set`` kept them in the cap).
        workflow = None if run.ctx is None else run.ctx.workflow
        added = workflow.additions() or None if workflow is not None and code == SUCCESS_CODE else None
        if msg is not None and len(msg) > self.max_handle_msg:
            msg = self._cap(msg)
        run.code, run.msg = code, msg
        state = run_state(trigger_code=200, handle_code=code, handle_msg=msg, now_ms=0).value
        self.ended[state] = self.ended.get(state, 0) + 1
        if run.started is not None:
            self.durations_ms.observe((self._clock() - run.started) * 1000)
        try:
            self._report(HandleCallbackParam(run.param.log_id, run.param.log_date_time, code, msg, added))
        except Exception:
            log.exception("reporting the result of log %s failed", run.param.log_id)

    def _cap(self, text: str) -> str:
        return text if len(text) <= self.max_handle_msg else text[: self.max_handle_msg] + "..."


class _Worker:
    """One job id's queue and the task that drains it (the reference's JobThread)."""

    def __init__(self, runner: JobRunner, job_id: int, unit: Unit) -> None:
        self.runner = runner
        self.job_id = job_id
        self.unit = unit
        self.queue: deque[_Run] = deque()
        self.log_ids: set[int] = set()
        self.current: _Run | None = None
        self.exec_future: asyncio.Future[Outcome] | None = None
        self.stop_reason: str | None = None
        self.draining = False
        self.idle_since = runner._clock()
        self.label = f"jobring, JobWorker-{job_id}"
        # A bare future per wait and one idle timer per idle period (re-armed lazily) are much
        # cheaper than an Event plus asyncio.timeout() around every wait.
        self._waiter: asyncio.Future[None] | None = None
        self._idle_timer: asyncio.TimerHandle | None = None
        self._loop = asyncio.get_running_loop()
        self.task = self._loop.create_task(self._main(), name=f"jobring-job-{job_id}")
        runner._live.add(self.task)
        self.task.add_done_callback(runner._live.discard)

    def busy(self) -> bool:
        return self.current is not None or bool(self.queue)

    def replace_reason(self, unit: Unit) -> str | None:
        if isinstance(unit, JobHandler):
            return None if unit is self.unit else REASON_CHANGE_HANDLER
        same = (
            isinstance(self.unit, GlueScript)
            and self.unit.glue_type == unit.glue_type
            and self.unit.glue_updatetime == unit.glue_updatetime
        )
        return None if same else REASON_CHANGE_SOURCE

    def push(self, run: _Run) -> ReturnT:
        log_id = run.param.log_id
        if log_id in self.log_ids:
            return ReturnT.fail(f"repeate trigger job, logId:{log_id}")
        self.log_ids.add(log_id)
        self.queue.append(run)
        self._wake()
        return ReturnT.success()

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def _idle_timer_fired(self) -> None:
        self._idle_timer = None
        self._wake()  # the worker re-checks how long it has been idle

    def _forget(self) -> None:
        if self.runner._workers.get(self.job_id) is self:
            del self.runner._workers[self.job_id]

    def _fail_queued(self, reason: str) -> None:
        while self.queue:
            self.runner._finish(self.queue.popleft(), 500, reason + SUFFIX_QUEUED)
        self.log_ids.clear()

    def stop(self, reason: str) -> None:
        """Take this worker out of service now: report its runs as killed, stop what can be stopped."""
        if self.stop_reason is not None:
            return
        self.stop_reason = reason
        self._forget()
        run = self.current
        if run is not None and not run.reported:
            if run.ctx is not None:
                run.ctx.mark_cancelled()
                line = f"<br>----------- JobThread toStop, stopReason:{reason}"
                run.ctx.write(_ENGINE, 0, line, self.label)
            self.runner._finish(run, 500, reason + SUFFIX_RUNNING)
            if self.exec_future is not None:
                self.exec_future.cancel()
        self._fail_queued(reason)
        self._wake()

    def drain(self, reason: str) -> None:
        """Finish the running run but nothing queued, then end (executor shutdown)."""
        self.draining = True
        self._fail_queued(reason)
        self._wake()

    async def _main(self) -> None:
        try:
            await self._hook(self.unit.init if isinstance(self.unit, JobHandler) else None, "init")
            while self.stop_reason is None:
                if not self.queue:
                    if self.draining or not await self._wait_for_work():
                        break
                    continue
                run = self.queue.popleft()
                self.log_ids.discard(run.param.log_id)
                self.current = run
                try:
                    await self._execute(run)
                finally:
                    self.current = None
                    self.exec_future = None
                    self.idle_since = self.runner._clock()
        finally:
            if self._idle_timer is not None:
                self._idle_timer.cancel()
                self._idle_timer = None
            self._forget()
            self._fail_queued(self.stop_reason or REASON_STOPPING)
            await self._hook(self.unit.destroy if isinstance(self.unit, JobHandler) else None, "destroy")

    async def _wait_for_work(self) -> bool:
        """Wait for a run; False when the worker retired because it stayed idle."""
        if self.queue or self.stop_reason is not None or self.draining:
            return True
        remaining = self.runner.idle_timeout_s - (self.runner._clock() - self.idle_since)
        if remaining <= 0:
            self.stop(REASON_IDLE)
            return False
        if self._idle_timer is None:
            self._idle_timer = self._loop.call_later(remaining, self._idle_timer_fired)
        self._waiter = waiter = self._loop.create_future()
        try:
            await waiter
        finally:
            self._waiter = None
        return True

    async def _hook(self, hook: Callable[[], Any] | None, what: str) -> None:
        if hook is None:
            return
        try:
            if inspect.iscoroutinefunction(hook):
                await hook()
            else:
                await self.runner._pool.submit(asyncio.get_running_loop(), hook)
        except Exception:
            log.exception("job %s: %s hook failed", self.job_id, what)

    # --- one run ------------------------------------------------------------------------------

    async def _execute(self, run: _Run) -> None:
        runner = self.runner
        param = run.param
        # The runs accepted so far reach received-runs.txt before this handler starts (one
        # write for all of them; see received.py for what that guarantees after a crash).
        runner.received.flush()
        run.started = runner._clock()
        writer = runner.runlog.writer(param.log_date_time, param.log_id)
        # Lines of a pool thread carry that thread's name; everything else the worker's.
        unit = self.unit
        threaded = isinstance(unit, JobHandler) and not unit.is_async and unit.isolation == "thread"
        ctx = JobContext(
            job_id=param.job_id,
            params=param.executor_params,
            log_id=param.log_id,
            log_date_time=param.log_date_time,
            shard_index=param.broadcast_index,
            shard_total=param.broadcast_total,
            sink=writer,
            line_format=format_line,
            thread_label=None if threaded else self.label,
            logical_time_ms=param.logical_time,
            data_interval_start_ms=param.data_interval_start,
            workflow_context=param.workflow_context,
        )
        run.ctx = ctx
        if runner.distributed is not None and isinstance(unit, JobHandler) and unit.isolation == "thread":
            ctx.bind_subtask(None, None, runner.distributed.root_scope(param.log_id, unit.name))
        try:
            ctx.write(
                _ENGINE,
                0,
                "<br>----------- jobring job execute start -----------<br>----------- Param:"
                + param.executor_params,
                self.label,
            )
            await self._supervise(run, ctx)
        finally:
            self._write_end(run, ctx, writer)

    async def _supervise(self, run: _Run, ctx: JobContext) -> None:
        timeout = run.param.executor_timeout if run.param.executor_timeout > 0 else None
        future = self._start(ctx)
        self.exec_future = future
        if not await _finished_within(future, timeout):
            ctx.mark_cancelled()
            ctx.write(_ENGINE, 0, f"<br>----------- jobring job execute timeout ({timeout} s)", self.label)
            self.runner._finish(run, 502, MSG_TIMEOUT)
            future.cancel()
        elif not future.cancelled():
            exc = future.exception()
            if exc is None:
                code, msg = future.result()
                self.runner._finish(run, code, msg)
            elif not (isinstance(exc, JobCancelled) and run.reported):
                text = "".join(traceback.format_exception(exc))
                ctx.write(_ENGINE, 0, f"<br>----------- JobThread Exception:{text}", self.label)
                self.runner._finish(run, 500, exception_summary(exc))
        if not future.done() or future.cancelled():
            await self._settle(future)

    def _start(self, ctx: JobContext) -> asyncio.Future[Outcome]:
        loop = asyncio.get_running_loop()
        unit, runner = self.unit, self.runner
        grace = runner.kill_grace_s
        token = ctx.activate()
        try:
            if isinstance(unit, GlueScript):
                return loop.create_task(run_script(unit, runner.runlog.glue_dir, ctx, kill_grace_s=grace))
            if unit.isolation == "process":
                cap = runner.max_handle_msg
                return loop.create_task(run_in_process(unit, ctx, max_handle_msg=cap, kill_grace_s=grace))
            if unit.is_async:
                return loop.create_task(_call_async(unit, ctx))
            return runner._pool.submit(loop, contextvars.copy_context().run, _call_sync, unit, ctx)
        finally:
            ctx.deactivate(token)

    async def _settle(self, future: asyncio.Future[Outcome]) -> None:
        """After a timeout/kill: wait until a task or subprocess is really over (bounded)."""
        if not isinstance(future, asyncio.Task):
            return  # a pool thread: it cannot be stopped, the run is already reported
        done, _ = await asyncio.wait((future,), timeout=self.runner.kill_grace_s + 3.0)
        if not done:
            log.warning("job %s: cancelled handler still running after the grace period", self.job_id)
        elif not future.cancelled() and future.exception() is not None:
            late = future.exception()
            log.debug("job %s: handler ended with %r after its run was reported", self.job_id, late)

    def _write_end(self, run: _Run, ctx: JobContext, writer: RunLogWriter) -> None:
        try:
            # Only reached unreported when the worker task itself was torn down mid-run.
            self.runner._finish(run, 500, "job run interrupted: its worker was stopped")
            ctx.write(
                _ENGINE,
                0,
                "<br>----------- jobring job execute end(finish) -----------<br>----------- Result: "
                f"handleCode={run.code}, handleMsg = {'null' if run.msg is None else run.msg}",
                self.label,
            )
        finally:
            writer.close()


async def _finished_within(future: asyncio.Future[Outcome], limit_s: float | None) -> bool:
    """Wait for the run's future; False on timeout. Its outcome is read from the future after."""
    if limit_s is not None:
        done, _ = await asyncio.wait((future,), timeout=limit_s)
        return bool(done)
    try:  # the common case, without asyncio.wait's extra waiter and set
        await future
    except asyncio.CancelledError:
        task = asyncio.current_task()
        if future.cancelled() and (task is None or not task.cancelling()):
            return True  # the run was killed, not this worker
        raise
    except BaseException:  # the caller reads the exception from the future
        pass
    return True


def _ctx_outcome(ctx: JobContext) -> Outcome:
    fail = ctx.fail_message
    return (200, None) if fail is None else (500, fail)


async def _call_async(handler: JobHandler, ctx: JobContext) -> Outcome:
    result: Awaitable[Any] = handler.func(ctx) if handler.wants_context else handler.func()
    await result
    return _ctx_outcome(ctx)


def _call_sync(handler: JobHandler, ctx: JobContext) -> Outcome:
    try:
        handler.func(ctx) if handler.wants_context else handler.func()
    except BaseException as exc:
        if ctx.cancelled:  # nobody awaits this thread anymore: say how it ended
            level = logging.DEBUG if isinstance(exc, JobCancelled) else logging.WARNING
            log.log(level, "job %s log %s: handler raised after its run was reported", ctx.job_id, ctx.log_id,
                    exc_info=True)
        raise
    return _ctx_outcome(ctx)
