"""Map, map-reduce and shards on a jobring executor (docs/distributed-jobs.md).

- A handler maps with ``ctx.map(items, "task")`` (``await ctx.map_async(...)`` in an async
  handler): the items go to the admin in calls of ``MAX_MAP_ITEMS`` (``api/jobring/map``,
  with the group's executor token); the admin stores them as sub-tasks of the run and sends
  them to any executor of the group.
- Sub-tasks arrive in batches at ``/jobring/subtasks`` (push, or over the poll of a pull
  executor) and run here on ``concurrency`` slots: the registered handler named by the task
  gets ``ctx.item`` (the item), ``ctx.task_key``, ``ctx.shard_index`` / ``ctx.shard_total``
  for a shard. Its return value (JSON) is the sub-task's result; an exception or
  ``ctx.fail`` fails it. Results go back in batches (``api/jobring/results``).
- The reduce handler (``@executor.job("count", reduce="count_total")`` names it) runs once
  after every sub-task ended and reads the results with ``ctx.results()``. A broadcast's
  hooks and parts (job fields ``broadcast_pre`` / ``broadcast_post``) arrive the same way.

A sub-task's log lines (``ctx.log``) go to this process's log (``jobring.subtask`` logger),
not to a run log file (a run may have a million sub-tasks), and its last ``TASK_LOG_MAX_BYTES``
go to the admin with its result: the run page shows them with the sub-task.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import json
import logging
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx

from jobring.core.distributed import MAX_MAP_ITEMS, ROOT_KEY, call_batches
from jobring.errors import JobringError
from jobring.executor.callback import admin_headers
from jobring.executor.context import JobContext, JobHandler, exception_summary
from jobring.protocol.models import ReturnT

__all__ = ["DistributedError", "MapScope", "SubTaskRunner"]

log = logging.getLogger(__name__)
task_log = logging.getLogger("jobring.subtask")

MAP_TIMEOUT_S = 60.0
RESULT_BATCH = 1_000
RESULT_FLUSH_S = 0.05
REDUCE_PAGE = 1_000
MAX_HELD_QUERY = 10_000  # sub-tasks per /jobring/subtasks/received question
_RESULT_MAX_BYTES = 64 * 1024
TASK_LOG_MAX_BYTES = 4 * 1024


class DistributedError(JobringError):
    """A map call or a reduce read the admin refused, or made where it cannot work."""


class AdminLink:
    """JSON calls to the admin's ``api/jobring/...`` endpoints, first admin that answers."""

    def __init__(
        self, client: httpx.AsyncClient, admin_urls: Sequence[str], token: str | None, app_name: str | None
    ) -> None:
        self._client = client
        self._urls = list(admin_urls)
        self._headers = admin_headers(token, app_name)

    async def call(self, what: str, body: dict[str, Any]) -> Any:
        content = json.dumps(body, separators=(",", ":")).encode()
        problems = []
        for base in self._urls:
            try:
                response = await self._client.post(
                    base + "api/jobring/" + what, content=content, headers=self._headers
                )
            except httpx.HTTPError as exc:
                problems.append(f"{base}: {type(exc).__name__}: {exc}")
                continue
            try:
                answer = ReturnT.decode(response.content)
            except ValueError:
                problems.append(f"{base}: HTTP {response.status_code}, not a ReturnT")
                continue
            if answer.ok:
                return answer.content
            raise DistributedError(f"the admin refused {what}: {answer.msg}")
        raise DistributedError(f"no admin took {what}: {'; '.join(problems) or 'no admin address'}")


class MapScope:
    """What ``ctx.map`` / ``ctx.results`` of one task call: its run, key and the reduce."""

    def __init__(
        self,
        link: AdminLink,
        loop: asyncio.AbstractEventLoop,
        run_id: int,
        key: str,
        reduce_task: str | None = None,
    ) -> None:
        self._link = link
        self._loop = loop
        self.run_id = run_id
        self.key = key
        self._reduce = reduce_task
        self._calls = 0

    async def map_async(self, items: Sequence[object], task_name: str) -> int:
        """Send ``items`` as sub-tasks running ``task_name``; returns the run's sub-task count."""
        total: int = 0
        for part in call_batches(len(_items(items)), MAX_MAP_ITEMS):
            total = await self._call_map(items[part.start : part.stop], task_name)
        return total

    async def _call_map(self, items: Sequence[object], task_name: str) -> int:
        seq, self._calls = self._calls, self._calls + 1
        body = {"runId": self.run_id, "parentKey": self.key, "callSeq": seq, "task": task_name,
                "items": list(items), "reduce": self._reduce}
        return int((await self._link.call("map", body))["total"])

    def map(self, items: Sequence[object], task_name: str) -> int:
        # One admin call at a time, each with its own time limit (a large map takes long).
        total = 0
        for part in call_batches(len(_items(items)), MAX_MAP_ITEMS):
            total = int(self._blocking(self._call_map(items[part.start : part.stop], task_name)))
        return total

    async def page_async(self, after_id: int) -> list[dict[str, Any]]:
        answer = await self._link.call(
            "reduce-input", {"runId": self.run_id, "afterId": after_id, "limit": REDUCE_PAGE}
        )
        return list(answer["items"])

    def results(self) -> Iterator[Any]:
        after = 0
        while True:
            page = self._blocking(self.page_async(after))
            if not page:
                return
            for entry in page:
                yield entry["result"]
            after = int(page[-1]["id"])

    async def results_async(self) -> list[Any]:
        found: list[Any] = []
        after = 0
        while page := await self.page_async(after):
            found += [entry["result"] for entry in page]
            after = int(page[-1]["id"])
        return found

    def _blocking(self, work: Any) -> Any:
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is self._loop:
            work.close()
            raise DistributedError("an async handler awaits ctx.map_async(...) / ctx.results_async()")
        return asyncio.run_coroutine_threadsafe(work, self._loop).result(MAP_TIMEOUT_S)


def _items(items: Sequence[object]) -> Sequence[object]:
    if not isinstance(items, Sequence) or isinstance(items, str | bytes):
        raise DistributedError("map takes a list of JSON values")
    return items


class _TaskSink:
    """A sub-task's log lines: to the process log, and the last TASK_LOG_MAX_BYTES kept."""

    def __init__(self) -> None:
        self._lines: list[str] = []
        self._size = 0

    def write_line(self, line: str) -> None:
        task_log.info("%s", line)
        self._lines.append(line)
        self._size += len(line) + 1
        while self._size > TASK_LOG_MAX_BYTES and len(self._lines) > 1:
            self._size -= len(self._lines.pop(0)) + 1

    def text(self) -> str | None:
        """The kept lines (None: none); one line over the limit keeps its end."""
        if not self._lines:
            return None
        return "\n".join(self._lines)[-TASK_LOG_MAX_BYTES:]


def _line(source: str, lineno: int, thread: str, text: str) -> str:
    return f"[{source}:{lineno}] [{thread}] {text}"


class SubTaskRunner:
    """Runs the sub-tasks the admin sends and reports their results in batches."""

    def __init__(
        self,
        handlers: Mapping[str, JobHandler],
        link: AdminLink,
        *,
        concurrency: int = 32,
        reducers: Mapping[str, str] | None = None,
    ) -> None:
        self._handlers = handlers
        self._link = link
        self._reducers = reducers if reducers is not None else {}
        self._pool = ThreadPoolExecutor(concurrency, thread_name_prefix="jobring-subtask")
        self._slots = asyncio.Semaphore(concurrency)
        self._results: list[dict[str, Any]] = []
        self._flushed = asyncio.Event()
        self._tasks: set[asyncio.Task[None]] = set()
        self._sender: asyncio.Task[None] | None = None
        self._wake = asyncio.Event()
        self._closing = False
        self.done = 0
        # (sub-task id, attempt) -> run id of the sub-tasks accepted whose result no admin has
        # taken yet: what an admin that takes over a dead one's sub-tasks asks about.
        self._held: dict[tuple[int, int], int] = {}

    def root_scope(self, run_id: int, handler_name: str, loop: asyncio.AbstractEventLoop) -> MapScope:
        """The scope of a run's root task (its handler may map); ``loop`` is the executor's."""
        return MapScope(self._link, loop, run_id, ROOT_KEY, self._reducers.get(handler_name))

    async def accept(self, body: bytes) -> ReturnT:
        """``/jobring/subtasks``: take a batch (answered at once; results come later)."""
        if self._closing:
            return ReturnT.fail("executor is stopping, sub-tasks not accepted.")
        data = json.loads(body)
        run_id, params, tasks = int(data["runId"]), str(data.get("params") or ""), data["tasks"]
        job_id = int(data.get("jobId") or 0)
        if self._sender is None:
            self._sender = asyncio.create_task(self._send_loop(), name="jobring-subtask-results")
        for task in tasks:
            self._held[(int(task["id"]), int(task["attempt"]))] = run_id
            work = asyncio.create_task(self._run(run_id, job_id, params, task))
            self._tasks.add(work)
            work.add_done_callback(self._tasks.discard)
        return ReturnT.success()

    async def held(self, body: bytes) -> ReturnT:
        """``/jobring/subtasks/received``: which of ``{"tasks": [[runId, id, attempt], ...]}``
        this executor holds (accepted, running or done, and no admin has taken its result
        yet): an admin taking over a dead admin's sub-tasks sends again only the others.
        Forgotten at a restart, with the sub-tasks themselves (they are sent again)."""
        try:
            data = json.loads(body)
        except ValueError as exc:
            raise ValueError(f"not JSON: {exc}") from exc
        asked = data.get("tasks") if isinstance(data, dict) else None
        if not isinstance(asked, list) or len(asked) > MAX_HELD_QUERY:
            raise ValueError(f"tasks: a list of at most {MAX_HELD_QUERY} [runId, id, attempt] triples")
        found: list[int] = []
        for item in asked:
            if (not isinstance(item, list) or len(item) != 3
                    or not all(isinstance(v, int) and not isinstance(v, bool) for v in item)):
                raise ValueError("tasks: each item is [runId, id, attempt] (integers)")
            run_id, task_id, attempt = item
            if self._held.get((task_id, attempt)) == run_id:
                found.append(task_id)
        return ReturnT.success({"received": found})

    async def _run(self, run_id: int, job_id: int, params: str, task: dict[str, Any]) -> None:
        sink = _TaskSink()
        async with self._slots:
            ok, result, msg = await self._execute(run_id, job_id, params, task, sink)
        done: dict[str, Any] = {"id": task["id"], "attempt": task["attempt"], "ok": ok, "result": result,
                                "msg": msg}
        lines = sink.text()
        if lines is not None:
            done["log"] = lines
        self._results.append(done)
        self.done += 1
        if len(self._results) >= RESULT_BATCH:
            self._wake.set()

    async def _execute(
        self, run_id: int, job_id: int, params: str, task: dict[str, Any], sink: _TaskSink
    ) -> tuple[bool, Any, str | None]:
        handler = self._handlers.get(str(task["task"]))
        if handler is None:
            return False, None, f"job handler [{task['task']}] not found."
        kind, item_json = task.get("kind"), task.get("item")
        ctx = JobContext(
            job_id=job_id,
            params=item_json if kind == "map" and item_json is not None else params,
            log_id=run_id,
            log_date_time=0,
            shard_index=int(task.get("index") or 0),
            shard_total=int(task.get("total") or 0),
            sink=sink,
            line_format=_line,
        )
        loop = asyncio.get_running_loop()
        ctx.bind_subtask(
            str(task["key"]),
            None if item_json is None else json.loads(item_json),
            MapScope(self._link, loop, run_id, str(task["key"])),
        )
        token = ctx.activate()
        try:
            if handler.is_async:
                value = await (handler.func(ctx) if handler.wants_context else handler.func())
            else:
                call: Callable[[], Any] = (
                    (lambda: handler.func(ctx)) if handler.wants_context else handler.func
                )
                value = await loop.run_in_executor(self._pool, contextvars.copy_context().run, call)
        except Exception as exc:
            task_log.warning(
                "run %s sub-task %s (%s) failed", run_id, task["key"], task["task"], exc_info=True
            )
            return False, None, exception_summary(exc)
        finally:
            ctx.deactivate(token)
        if ctx.fail_message is not None:
            return False, None, ctx.fail_message
        try:
            encoded = json.dumps(value, separators=(",", ":"), allow_nan=False)
        except (TypeError, ValueError) as exc:
            return False, None, f"the handler's return value is not JSON: {exc}"
        if len(encoded.encode()) > _RESULT_MAX_BYTES:
            return False, None, f"the handler's result is over {_RESULT_MAX_BYTES} bytes as JSON"
        return True, value, None

    async def _send_loop(self) -> None:
        backoff = 0.5
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), RESULT_FLUSH_S)
            self._wake.clear()
            if not self._results:
                self._flushed.set()
                continue
            batch, self._results = self._results[:RESULT_BATCH], self._results[RESULT_BATCH:]
            try:
                await self._link.call("results", {"results": batch})
                for done in batch:
                    self._held.pop((int(done["id"]), int(done["attempt"])), None)
                backoff = 0.5
            except DistributedError as exc:
                # Kept and sent again: the admin applies each result once whatever repeats.
                log.warning("sub-task results not delivered (%s); again in %.1f s", exc, backoff)
                self._results = batch + self._results
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 10.0)
            if self._results:
                self._wake.set()

    async def close(self, timeout_s: float = 5.0) -> None:
        self._closing = True
        if self._tasks:
            await asyncio.wait(list(self._tasks), timeout=timeout_s)
        if self._sender is not None:
            deadline = asyncio.get_running_loop().time() + timeout_s
            while self._results and asyncio.get_running_loop().time() < deadline:
                self._wake.set()
                await asyncio.sleep(0.05)
            self._sender.cancel()
        self._pool.shutdown(wait=False, cancel_futures=True)
