"""End-to-end flow control: a working executor double that runs each ``/run`` for a while and
calls its result back to the admin nodes in turn, counting the runs it has at once (sampled
every 10 ms), and jobs due together under a concurrency limit on two admin nodes.

Shared by ``tests/e2e/test_flow_e2e.py`` and ``bench/flow_limits.py``."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import time
from dataclasses import dataclass, field

import httpx
import orjson
from sqlalchemy import bindparam, select, update

from jobring.admin.store import Store
from jobring.admin.store.tables import job_info, job_log
from tests.e2e.admin_nodes import TOKEN, RecordingExecutor, fix_rate, now_ms


@dataclass
class WorkingExecutor(RecordingExecutor):
    """Each run works ``work_ms`` (runs of ``held_jobs`` until :meth:`release`), then its
    result goes to the next admin URL in turn. ``running`` is what it runs now; ``peak`` the
    most it ran at once, sampled every 10 ms, and ``exact_peak`` counted at every start."""

    admin_urls: list[str] = field(default_factory=list)
    work_ms: int = 100
    held_jobs: set[int] = field(default_factory=set)
    running: set[int] = field(default_factory=set)
    peak: int = 0
    exact_peak: int = 0
    samples: int = 0
    finished: list[int] = field(default_factory=list)
    order: list[tuple[int, int]] = field(default_factory=list)  # (job id, run id) in start order
    started_s: list[float] = field(default_factory=list)  # time.monotonic() of each start, in order
    _held: dict[int, int] = field(default_factory=dict)  # run id -> job id
    _urls: itertools.cycle[str] | None = None

    async def start(self) -> None:
        await super().start()
        self._http = httpx.AsyncClient(timeout=30, headers={"XXL-JOB-ACCESS-TOKEN": TOKEN})
        self._urls = itertools.cycle(self.admin_urls)
        self._spawn(self._sample())

    def record(self, path: bytes, body: bytes) -> bytes:
        name = path.rstrip(b"/").rsplit(b"/", 1)[-1]
        if name == b"run":
            param = orjson.loads(body)
            log_id, job_id = int(param["logId"]), int(param["jobId"])
            if log_id not in self._seen:
                self.running.add(log_id)
                self.exact_peak = max(self.exact_peak, len(self.running))
                self.order.append((job_id, log_id))
                self.started_s.append(time.monotonic())
                if job_id in self.held_jobs:
                    self._held[log_id] = job_id
                else:
                    self._spawn(self._work(log_id, self.work_ms))
        return super().record(path, body)

    def release(self) -> None:
        """Let the held runs finish now."""
        for log_id in list(self._held):
            del self._held[log_id]
            self._spawn(self._work(log_id, 0))

    async def _work(self, log_id: int, work_ms: int) -> None:
        await asyncio.sleep(work_ms / 1000)
        self.running.discard(log_id)  # ended here before the admin hears of it
        body = [{"logId": log_id, "logDateTim": now_ms(), "handleCode": 200, "handleMsg": "ok"}]
        assert self._http is not None and self._urls is not None
        for attempt in range(20):
            url = next(self._urls)
            with contextlib.suppress(httpx.HTTPError):
                answer = await self._http.post(url + "/api/callback", content=orjson.dumps(body))
                if answer.status_code == 200 and answer.json().get("code") == 200:
                    self.finished.append(log_id)
                    return
            await asyncio.sleep(0.1 * (attempt + 1))
        raise AssertionError(f"the result of run {log_id} could not be reported")

    async def _sample(self) -> None:
        while True:
            self.peak = max(self.peak, len(self.running))
            self.samples += 1
            await asyncio.sleep(0.01)


async def due_together(store: Store, group_id: int, count: int, lead_ms: int, *, spacing_ms: int = 0,
                       flow: str | None = None) -> tuple[list[int], int]:
    """``count`` jobs that each fire once (1 h fixed rate), all due ``lead_ms`` from now (each
    ``spacing_ms`` after the previous); ``flow``: each job's flow settings."""
    ids = [await store.jobs.create(fix_rate(group_id, 0, seconds=3600, trigger_status=0, flow=flow))
           for _ in range(count)]
    stmt = (update(job_info).where(job_info.c.id == bindparam("job_id"))
            .values(trigger_status=1, trigger_next_time=bindparam("next_ms")))
    async with store.engine.begin() as conn:
        first = now_ms() + lead_ms
        await conn.execute(stmt, [{"job_id": job_id, "next_ms": first + i * spacing_ms}
                                  for i, job_id in enumerate(ids)])
    return ids, first


async def run_nodes(store: Store) -> dict[str, int]:
    """Runs recorded per admin node."""
    async with store.engine.connect() as conn:
        rows = (await conn.execute(select(job_log.c.admin_node))).scalars().all()
    counts: dict[str, int] = {}
    for node in rows:
        counts[str(node)] = counts.get(str(node), 0) + 1
    return counts


async def until(check: object, limit_s: float, what: str, step_s: float = 0.1) -> None:
    """Wait until ``check()`` (sync or async) is true; AssertionError naming ``what`` after
    ``limit_s``."""
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        result = check() if callable(check) else check
        if asyncio.iscoroutine(result):
            result = await result
        if result:
            return
        await asyncio.sleep(step_s)
    raise AssertionError(f"timed out waiting for {what}")
