"""One job id's worker: its queue, its block-strategy answers and the runs it executes.

A :class:`JobWorker` is the reference's JobThread: an asyncio task that takes the job's runs
from its queue one at a time, starts each handler (a task on the loop, a pool thread, a
subprocess or a GLUE script), enforces its timeout, and hands each outcome to its host (the
:class:`~jobring.executor.worker.JobRunner`, through :class:`WorkerHost`) to be reported once.
"""

from __future__ import annotations

import asyncio
import contextvars
import inspect
import logging
import traceback
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from jobring.executor.context import JobCancelled, JobContext, JobHandler, exception_summary
from jobring.executor.glue import GlueScript, run_script
from jobring.executor.isolation import run_in_process
from jobring.executor.received import ReceivedRuns
from jobring.executor.runlog import RunLog, RunLogWriter, format_line
from jobring.executor.syncpool import SyncPool
from jobring.protocol.models import ReturnT, TriggerParam

__all__ = ["JobWorker", "Outcome", "RootScopes", "Run", "Unit", "WorkerHost"]

log = logging.getLogger("jobring.executor.worker")

Outcome = tuple[int, str | None]
Unit = JobHandler | GlueScript

REASON_COVER_EARLY = "block strategy effect：Cover Early"
REASON_CHANGE_HANDLER = "change jobhandler or glue type, and terminate the old job thread."
REASON_CHANGE_SOURCE = "change job source or glue type, and terminate the old job thread."
REASON_IDLE = "excutor idel times over limit."
REASON_STOPPING = "executor stopping"
SUFFIX_RUNNING = " [job running, killed]"
SUFFIX_QUEUED = " [job not executed, in the job queue, killed.]"
MSG_TIMEOUT = "job execute timeout "

_ENGINE = "jobring.executor.worker#run"
_START_LINE = "<br>----------- jobring job execute start -----------<br>----------- Param:"


class RootScopes(Protocol):
    """Gives a run's handler what ``ctx.map`` calls (executor.distributed.SubTaskRunner)."""

    def root_scope(self, run_id: int, handler_name: str, loop: asyncio.AbstractEventLoop) -> Any: ...


class Run:
    __slots__ = ("param", "ctx", "reported", "code", "msg", "started")

    def __init__(self, param: TriggerParam) -> None:
        self.param = param
        self.ctx: JobContext | None = None
        self.reported = False
        self.code = 0
        self.msg: str | None = None
        self.started: float | None = None  # runner clock when the handler started


class WorkerHost(Protocol):
    """What a worker uses of the engine that owns it (JobRunner)."""

    idle_timeout_s: float
    kill_grace_s: float
    max_handle_msg: int
    received: ReceivedRuns
    runlog: RunLog
    distributed: RootScopes | None
    pool: SyncPool
    workers: dict[int, JobWorker]
    live: set[asyncio.Task[None]]

    def clock(self) -> float: ...

    def finish(self, run: Run, code: int, msg: str | None) -> None: ...


class JobWorker:
    """One job id's queue and the task that drains it (the reference's JobThread)."""

    def __init__(self, runner: WorkerHost, job_id: int, unit: Unit) -> None:
        self.runner = runner
        self.job_id = job_id
        self.unit = unit
        self.queue: deque[Run] = deque()
        self.log_ids: set[int] = set()
        self.current: Run | None = None
        self.exec_future: asyncio.Future[Outcome] | None = None
        self.stop_reason: str | None = None
        self.draining = False
        self.idle_since = runner.clock()
        self.label = f"jobring, JobWorker-{job_id}"
        # A bare future per wait and one idle timer per idle period (re-armed lazily) are much
        # cheaper than an Event plus asyncio.timeout() around every wait.
        self._waiter: asyncio.Future[None] | None = None
        self._idle_timer: asyncio.TimerHandle | None = None
        self._loop = asyncio.get_running_loop()
        self.task = self._loop.create_task(self._main(), name=f"jobring-job-{job_id}")
        runner.live.add(self.task)
        self.task.add_done_callback(runner.live.discard)

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

    def push(self, run: Run) -> ReturnT:
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
        if self.runner.workers.get(self.job_id) is self:
            del self.runner.workers[self.job_id]

    def _fail_queued(self, reason: str) -> None:
        while self.queue:
            self.runner.finish(self.queue.popleft(), 500, reason + SUFFIX_QUEUED)
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
            self.runner.finish(run, 500, reason + SUFFIX_RUNNING)
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
                    self.idle_since = self.runner.clock()
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
        remaining = self.runner.idle_timeout_s - (self.runner.clock() - self.idle_since)
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
                await self.runner.pool.submit(asyncio.get_running_loop(), hook)
        except Exception:
            log.exception("job %s: %s hook failed", self.job_id, what)

    # --- one run ------------------------------------------------------------------------------

    async def _execute(self, run: Run) -> None:
        runner = self.runner
        param = run.param
        # The runs accepted so far reach received-runs.txt before this handler starts (one
        # write for all of them; see received.py for what that guarantees after a crash).
        runner.received.flush()
        run.started = runner.clock()
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
            ctx.bind_subtask(None, None, runner.distributed.root_scope(param.log_id, unit.name, self._loop))
        try:
            writer.write_line(format_line(_ENGINE, 0, self.label, _START_LINE + param.executor_params))
            future = self._start(ctx)
            self.exec_future = future
            timeout = param.executor_timeout if param.executor_timeout > 0 else None
            if timeout is None:  # the common case, without asyncio.wait's waiter, set and timer
                try:
                    await future
                except asyncio.CancelledError:
                    if not _killed(future):
                        raise  # this worker was cancelled, not the run
                except BaseException:  # read from the future below
                    pass
                finished = True
            else:
                finished = await _finished_within(future, timeout)
            self._conclude(run, ctx, future, finished, timeout)
            if not future.done() or future.cancelled():
                await self._settle(future)
        finally:
            self._write_end(run, writer)

    def _conclude(self, run: Run, ctx: JobContext, future: asyncio.Future[Outcome], finished: bool,
                  timeout: int | None) -> None:
        """Report the run's outcome: timed out, or what its future holds (nothing when it was
        killed: the kill reported it)."""
        if not finished:
            ctx.mark_cancelled()
            ctx.write(_ENGINE, 0, f"<br>----------- jobring job execute timeout ({timeout} s)", self.label)
            self.runner.finish(run, 502, MSG_TIMEOUT)
            future.cancel()
        elif not future.cancelled():
            exc = future.exception()
            if exc is None:
                code, msg = future.result()
                self.runner.finish(run, code, msg)
            elif not (isinstance(exc, JobCancelled) and run.reported):
                text = "".join(traceback.format_exception(exc))
                ctx.write(_ENGINE, 0, f"<br>----------- JobThread Exception:{text}", self.label)
                self.runner.finish(run, 500, exception_summary(exc))

    def _start(self, ctx: JobContext) -> asyncio.Future[Outcome]:
        loop = self._loop
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
            return runner.pool.submit(loop, contextvars.copy_context().run, _call_sync, unit, ctx)
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

    def _write_end(self, run: Run, writer: RunLogWriter) -> None:
        try:
            # Only reached unreported when the worker task itself was torn down mid-run.
            self.runner.finish(run, 500, "job run interrupted: its worker was stopped")
            writer.write_line(format_line(
                _ENGINE, 0, self.label,
                "<br>----------- jobring job execute end(finish) -----------<br>----------- Result: "
                f"handleCode={run.code}, handleMsg = {'null' if run.msg is None else run.msg}"))
        finally:
            writer.close()


async def _finished_within(future: asyncio.Future[Outcome], limit_s: float) -> bool:
    """Wait for the run's future; False on timeout. Its outcome is read from the future after."""
    done, _ = await asyncio.wait((future,), timeout=limit_s)
    return bool(done)


def _killed(future: asyncio.Future[Outcome]) -> bool:
    """Whether a CancelledError out of awaiting the run's future means the run was killed (its
    future cancelled), not the worker's own task."""
    task = asyncio.current_task()
    return future.cancelled() and (task is None or not task.cancelling())


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
