"""Shared pieces of the chaos scenarios (tests/chaos and bench/chaos.py).

- ``DbProxy``: a loopback TCP proxy between the admins and the database that the test can
  close (listener shut, every open connection reset) and reopen on the same port.
- ``Cluster``: one throwaway PostgreSQL/MariaDB database, a recording executor (the ground
  truth: every ``/run`` it receives, with the log id and its arrival time), admin node
  processes started through the proxy, and cleanup of all of it.
- ``check_fires``: judges the recorded runs against each job's 1 s grid: lost, doubled,
  lateness, with the gaps a misfire rule allows and the fires a failed node may have sent.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
import sys
import weakref
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiomysql
import asyncpg
from sqlalchemy import select, update
from sqlalchemy.engine import make_url

from jobring.admin.store import Store
from jobring.admin.store.tables import job_info, job_log, scheduler_node
from tests.dbs import SERVER_URLS, acreate_test_database, adrop_test_database
from tests.e2e.admin_nodes import (
    TOKEN,
    AdminNode,
    RecordingExecutor,
    add_manual_group,
    free_port,
    kill,
    now_ms,
    start_admin,
    start_jobs_together,
)

SERVER_BACKENDS = ("postgresql", "mariadb")
# Alembic keeps its migration context in module globals: one upgrade at a time per event
# loop (the scenarios of one process share one loop; asyncio locks belong to their loop).
_MIGRATING: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Lock] = weakref.WeakKeyDictionary()


def _migrating() -> asyncio.Lock:
    return _MIGRATING.setdefault(asyncio.get_running_loop(), asyncio.Lock())


class DbProxy:
    """Forwards 127.0.0.1:<port> to the database server; ``close`` makes the database
    unreachable (connections refused, open ones reset), ``open`` brings it back."""

    def __init__(self, target_host: str, target_port: int) -> None:
        self.target = (target_host, target_port)
        self.port = free_port()
        self._server: asyncio.Server | None = None
        self._pipes: set[asyncio.Task[None]] = set()
        self._writers: set[asyncio.StreamWriter] = set()
        # Every accepted connection from its accept on: one whose handler has not started yet
        # when close() comes (or never starts: its loop ends first) is reset with the others,
        # not left unclosed for the garbage collector (a warning that fails a test).
        self._accepted: set[asyncio.Transport] = set()

    async def open(self) -> None:
        if self._server is None:
            loop = asyncio.get_running_loop()
            self._server = await loop.create_server(
                lambda: _TrackedStream(self._accepted, self._accept), "127.0.0.1", self.port)

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            self._server = None
        for transport in list(self._accepted):
            transport.abort()  # reset, not a polite FIN: as when the server host goes away
        for writer in list(self._writers):
            writer.transport.abort()
        for task in list(self._pipes):
            task.cancel()
        await asyncio.gather(*self._pipes, return_exceptions=True)

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        # Known to close() from the start: a connection accepted just before it (its upstream
        # still connecting) is reset with the others, and neither side is left unclosed
        # however this ends (a refused upstream, the scenario's loop cancelling it).
        self._writers.add(writer)
        up_writer: asyncio.StreamWriter | None = None
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.target)
            if writer.transport.is_closing():
                return  # closed meanwhile: the database stays unreachable
            self._writers.add(up_writer)
            tasks = [asyncio.create_task(self._pipe(reader, up_writer)),
                     asyncio.create_task(self._pipe(up_reader, writer))]
            self._pipes.update(tasks)
            try:
                await asyncio.gather(*tasks, return_exceptions=True)
            finally:
                self._pipes.difference_update(tasks)
        except OSError:
            return  # the database refused: so does the proxy (reset below)
        finally:
            for w in (writer, up_writer):
                if w is not None:
                    self._writers.discard(w)
                    w.transport.abort()

    @staticmethod
    async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        # The other side goes however this one ends: a process SIGKILLed with unread data
        # resets its socket (ConnectionResetError here, not EOF), and an upstream session
        # left open would keep the dead node's transaction and its row locks for hours.
        try:
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        finally:
            writer.transport.abort()


class _TrackedStream(asyncio.StreamReaderProtocol):
    """A stream server's protocol that keeps its transport in ``accepted`` until it is lost."""

    def __init__(self, accepted: set[asyncio.Transport], handler: Any) -> None:
        super().__init__(asyncio.StreamReader(), handler)
        self._accepted = accepted
        self._own: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self._own = transport
        self._accepted.add(transport)
        super().connection_made(transport)

    def connection_lost(self, exc: Exception | None) -> None:
        if self._own is not None:
            self._accepted.discard(self._own)
        super().connection_lost(exc)


def proxied_url(url: str, port: int) -> str:
    return make_url(url).set(host="127.0.0.1", port=port).render_as_string(False)


async def kill_database_sessions(url: str) -> int:
    """Terminate every session on the test database (as a server restart does); returns how many."""
    parsed = make_url(url)
    name = parsed.database or ""
    server = make_url(SERVER_URLS["postgresql" if parsed.get_backend_name() == "postgresql" else "mariadb"])
    if parsed.get_backend_name() == "postgresql":
        conn = await asyncpg.connect(host=server.host, port=server.port or 5432, user=server.username,
                                     database="postgres")
        try:
            rows = await conn.fetch("SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                                    " WHERE datname = $1 AND pid <> pg_backend_pid()", name)
            return len(rows)
        finally:
            await conn.close()
    conn = await aiomysql.connect(host=server.host, port=server.port or 3306, user=server.username or "root",
                                  password=server.password or "", autocommit=True)
    try:
        async with conn.cursor() as cur:
            await cur.execute("SELECT id FROM information_schema.processlist WHERE db = %s"
                              " AND id <> CONNECTION_ID()", (name,))
            ids = [row[0] for row in await cur.fetchall()]
            for session in ids:
                # A session may end on its own in between: that is what we want anyway.
                with contextlib.suppress(aiomysql.OperationalError, aiomysql.InternalError):
                    await cur.execute(f"KILL {int(session)}")
            return len(ids)
    finally:
        conn.close()


@dataclass
class Cluster:
    """A database (reached by the admins through ``proxy``), a recording executor, admin nodes."""

    backend: str
    workdir: Path
    url: str = ""
    store: Store | None = None
    proxy: DbProxy | None = None
    executor: RecordingExecutor = field(default_factory=RecordingExecutor)
    nodes: list[AdminNode] = field(default_factory=list)
    executor_procs: list[asyncio.subprocess.Process] = field(default_factory=list)

    @property
    def db(self) -> Store:
        assert self.store is not None
        return self.store

    async def __aenter__(self) -> Cluster:
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.url = await acreate_test_database(self.backend, self.workdir)
        try:
            async with _migrating():
                self.store = await Store.open(self.url)
            target = make_url(self.url)
            self.proxy = DbProxy(target.host or "127.0.0.1", int(target.port or 0))
            await self.proxy.open()
            await self.executor.start()
        except BaseException:
            await self.__aexit__()
            raise
        return self

    async def __aexit__(self, *exc: object) -> None:
        try:
            for proc in self.executor_procs:
                await stop_process(proc)
            for node in self.nodes:
                if node.proc.returncode is None:
                    with contextlib.suppress(ProcessLookupError):
                        node.proc.send_signal(signal.SIGCONT)  # a stopped node cannot die otherwise
                await kill(node)
            await self.executor.stop()
            if self.proxy is not None:
                await self.proxy.close()
            if self.store is not None:
                await self.store.close()
        finally:
            if self.url:
                await adrop_test_database(self.url)

    async def start_nodes(self, names: list[str], env: dict[str, dict[str, str]] | None = None,
                          common_env: dict[str, str] | None = None) -> list[AdminNode]:
        assert self.proxy is not None
        url = proxied_url(self.url, self.proxy.port)

        async def one(name: str) -> AdminNode:
            environ = {**(common_env or {}), **(env or {}).get(name, {})}
            node = await start_admin(url, name, self.workdir, env=environ)
            self.nodes.append(node)
            return node

        return list(await asyncio.gather(*(one(n) for n in names)))

    async def restart_node(self, node: AdminNode, common_env: dict[str, str] | None = None) -> AdminNode:
        assert self.proxy is not None
        url = proxied_url(self.url, self.proxy.port)
        again = await start_admin(url, node.node_id, self.workdir, env=common_env, port=node.port)
        self.nodes.append(again)
        return again

    async def fix_rate_jobs(self, count: int, spacing_ms: int, lead_ms: int,
                            misfire: list[str] | None = None) -> tuple[list[int], int]:
        """``count`` 1 s FIX_RATE jobs on the recording executor, first instants spread by
        ``spacing_ms`` from ``lead_ms`` after now; ``misfire`` per job (default DO_NOTHING)."""
        group_id = await add_manual_group(self.db, self.executor.address)
        if misfire:
            # Set before the jobs start: a node must never see them with another rule.
            ids, first = await _start_with_misfire(self.db, group_id, count, spacing_ms, lead_ms, misfire)
        else:
            ids, first = await start_jobs_together(self.db, group_id, count, spacing_ms, lead_ms)
        return ids, first

    async def start_demo_executor(
        self, admin: AdminNode, name: str, *, beat_s: float = 1.0, env: dict[str, str] | None = None
    ) -> tuple[asyncio.subprocess.Process, str]:
        """A real ``jobring executor`` (the demo handlers: ``slow`` sleeps ``params`` s);
        returns the process and its registered address."""
        environ = {k: v for k, v in os.environ.items() if not k.startswith("JOBRING_")}
        environ.update(env or {})
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-c", "import sys; from jobring.cli import main; sys.exit(main())",
            "executor", "jobring.demo:executor", "--host", "127.0.0.1", "--port", "0", "--ip", "127.0.0.1",
            "--admin", admin.base_url + "/xxl-job-admin/", "--token", TOKEN,
            "--log-path", str(self.workdir / f"exec-{name}"), "--beat-interval", str(beat_s),
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL, env=environ,
        )
        self.executor_procs.append(proc)
        assert proc.stdout is not None
        line = (await asyncio.wait_for(proc.stdout.readline(), 60)).decode()
        found = re.search(r"listening on (127\.0\.0\.1:\d+)", line)
        assert found, line
        # Drained so a chatty executor never blocks on a full pipe.
        asyncio.get_running_loop().create_task(_drain(proc))
        return proc, f"http://{found.group(1)}/"


async def _drain(proc: asyncio.subprocess.Process) -> None:
    assert proc.stdout is not None
    while await proc.stdout.read(65536):
        pass


async def _start_with_misfire(store: Store, group_id: int, count: int, spacing_ms: int, lead_ms: int,
                              misfire: list[str]) -> tuple[list[int], int]:
    from tests.e2e.admin_nodes import fix_rate

    ids = [await store.jobs.create(fix_rate(group_id, 0, trigger_status=0, misfire_strategy=misfire[i]))
           for i in range(count)]
    async with store.engine.begin() as conn:
        first = now_ms() + lead_ms
        for i, job_id in enumerate(ids):
            await conn.execute(update(job_info).where(job_info.c.id == job_id)
                               .values(trigger_status=1, trigger_next_time=first + i * spacing_ms))
    return ids, first


async def stop_process(proc: asyncio.subprocess.Process) -> None:
    if proc.returncode is None:
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(signal.SIGCONT)
            proc.kill()
        await proc.wait()


async def log_rows(store: Store) -> list[Any]:
    """Every run log row with what the scenarios judge."""
    async with store.engine.connect() as conn:
        return list((await conn.execute(
            select(job_log.c.id, job_log.c.job_id, job_log.c.planned_time, job_log.c.trigger_type,
                   job_log.c.admin_node, job_log.c.trigger_code, job_log.c.dispatch_time,
                   job_log.c.handle_code, job_log.c.handle_msg, job_log.c.executor_address,
                   job_log.c.trigger_msg)
            .order_by(job_log.c.id))).all())


@dataclass(frozen=True)
class FailedNode:
    """A node that failed (killed, paused) at ``fault_at_ms``, with its committed send fence
    as the node that took its jobs over found it (docs/design/takeover.md)."""

    node_id: str
    fence_ms: int
    fault_at_ms: int


async def failed_node(store: Store, node_id: str, fault_at_ms: int) -> tuple[FailedNode, str]:
    """The node's fence as committed now, and a description of its node row. Read once its
    lock session is gone (killed, or paused past the idle timeout), the fence can no longer
    rise: it is the one the taker settles against (a node marked gone keeps its fence)."""
    async with store.engine.connect() as conn:
        row = (await conn.execute(select(scheduler_node).where(scheduler_node.c.node_id == node_id))).one()
    gone = row.alive_until == 0 and row.lock_key == 0
    about = (f"{node_id}: fence {row.send_fence - fault_at_ms:+d} ms from the fault,"
             f" {'marked gone' if gone else 'not marked gone'}")
    return FailedNode(node_id, int(row.send_fence), fault_at_ms), about


@dataclass
class Verdict:
    """One scenario run, judged against each job's grid."""

    planned: int = 0
    fired: int = 0
    lost: list[tuple[int, int]] = field(default_factory=list)  # (job, planned instant)
    doubled: list[tuple[int, int]] = field(default_factory=list)
    excused: int = 0  # instants a misfire rule allowed to skip
    coalesced: int = 0  # of those, instants coalesced into a late fire of their job
    # Instants the failed node recorded under its fence and never sent: settled as sent by
    # the taker (its unconfirmed row is left to the lost-run monitor), (job, planned instant).
    settled: list[tuple[int, int]] = field(default_factory=list)
    max_late_ms: int = 0
    min_late_ms: int = 0
    late: list[tuple[int, int, int]] = field(default_factory=list)  # (job, planned, lateness) over the bound
    takeover_ms: int | None = None
    fault_at_ms: int = 0  # when the fault began
    # Lost instants that have a run log row anyway (recorded, never received): by state.
    lost_logged: Counter[str] = field(default_factory=Counter)
    # A few jobs with lost instants: each instant relative to the gap (or the first instant)
    # as "+offset s:lateness s", "-" for a miss.
    patterns: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # problems found besides lost/doubled/late
    info: list[str] = field(default_factory=list)  # what happened, for the report
    # Each admin node's warnings and errors, kept only when the verdict fails (the scenario's
    # temporary directory is gone by the time anyone reads the report).
    node_logs: list[str] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return not (self.lost or self.doubled or self.notes or self.late)

    def lost_span(self) -> str:
        """Where the lost instants lie, relative to the fault."""
        if not self.lost or not self.fault_at_ms:
            return ""
        planned = [p for _, p in self.lost]
        return (f"planned {min(planned) - self.fault_at_ms} ms to {max(planned) - self.fault_at_ms} ms"
                f" after the fault; with a log row: {dict(self.lost_logged)}")

    def settled_span(self) -> str:
        """Where the instants settled as sent lie, relative to the fault."""
        if not self.settled or not self.fault_at_ms:
            return ""
        planned = [p for _, p in self.settled]
        jobs = len({j for j, _ in self.settled})
        return (f"{len(self.settled)} in {jobs} jobs, planned {min(planned) - self.fault_at_ms} ms"
                f" to {max(planned) - self.fault_at_ms} ms after the fault")

    def row(self) -> dict[str, Any]:
        return {"planned": self.planned, "fired": self.fired, "lost": len(self.lost),
                "doubled": len(self.doubled), "settled": len(self.settled), "coalesced": self.coalesced,
                "excused": self.excused, "max_late_ms": self.max_late_ms, "takeover_ms": self.takeover_ms}


@dataclass
class Gap:
    """Instants in ``[start_ms, end_ms)`` (a fault) may be missed as the job's rules say (see
    ``_excused``); outside it every instant must fire exactly once.

    ``coalesced_only``: a fault shorter than the misfire threshold (a paused node): only the
    coalescing rule applies, and a late fire standing for coalesced instants is judged
    against the lateness bound like any other."""

    start_ms: int
    end_ms: int
    misfire: dict[int, str]  # job id -> rule
    coalesced_only: bool = False


MISFIRE_THRESHOLD_MS = 5_000


def check_fires(executor: RecordingExecutor, rows: list[Any], jobs: dict[int, int], until_ms: int,
                late_bound_ms: int, gap: Gap | None = None, period_ms: int = 1_000,
                failed: FailedNode | None = None) -> Verdict:
    """Judge the /run calls the executor received (ground truth) for ``jobs`` (id -> first
    instant) from their first instant to ``until_ms`` against their ``period_ms`` grid.

    With ``failed``, the instants that node may have sent just before it failed are settled
    as sent by the taker, not lost (see ``_settled``); at most one per job."""
    by_log = {r.id: r for r in rows}
    logged = {(r.job_id, int(r.planned_time)): r for r in rows if r.planned_time is not None}
    verdict = Verdict()
    received: dict[int, dict[int, list[int]]] = {j: {} for j in jobs}  # job -> planned -> arrivals
    for call in executor.calls:
        row = by_log.get(call.log_id)
        if row is None or row.job_id not in jobs:
            verdict.notes.append(f"/run for unknown log {call.log_id}")
            continue
        received[row.job_id].setdefault(int(row.planned_time), []).append(call.at_ms)
    lates: list[int] = []
    for job_id, first in jobs.items():
        got = received[job_id]
        verdict.doubled += [(job_id, p) for p, arrivals in got.items() if len(arrivals) > 1]
        off_grid = [p for p in got if (p - first) % period_ms]
        if off_grid:
            verdict.notes.append(f"job {job_id}: fires off its grid at {off_grid}")
        grid = list(range(first, until_ms + 1, period_ms))
        verdict.planned += len(grid)
        verdict.fired += sum(1 for p in grid if p in got)
        misses = [p for p in grid if p not in got]
        settled = _settled(misses, logged, job_id, failed, period_ms) if failed else []
        verdict.settled += [(job_id, p) for p in settled]
        if len(settled) > 1:
            verdict.notes.append(f"job {job_id}: {len(settled)} instants settled as sent, at most one"
                                 f" expected (the fence leads by 1 s at most): {settled}")
        misses = [p for p in misses if p not in settled]
        coalesced, excused = _excused(misses, got, gap, job_id) if gap else (set(), set())
        verdict.coalesced += len(coalesced)
        verdict.excused += len(excused)
        verdict.lost += [(job_id, p) for p in misses if p not in excused]
        if len(verdict.patterns) < 3 and any(p not in excused for p in misses):
            verdict.patterns.append(_pattern(job_id, grid, got, gap))
        for planned, arrivals in got.items():
            if planned > until_ms:
                continue
            late = arrivals[0] - planned
            if not (gap and gap.coalesced_only) and any(planned < m <= arrivals[0] for m in excused):
                continue  # a late fire standing for missed instants: late by the outage, by the rule
            lates.append(late)
            if late > late_bound_ms:
                verdict.late.append((job_id, planned, late))
    verdict.max_late_ms = max(lates, default=0)
    verdict.min_late_ms = min(lates, default=0)
    verdict.lost_logged = Counter(
        f"trigger_code={row.trigger_code} handle_code={row.handle_code} {str(row.trigger_type)}"
        f" by {row.admin_node}: {str(row.handle_msg or '')[:80]}"
        f"{_problem_of(row.trigger_msg)}"
        for key in verdict.lost if (row := logged.get(key)) is not None)
    return verdict


def _problem_of(trigger_msg: str | None) -> str:
    """The trigger message's ``Problem:`` line (why a recorded fire was not sent), as a suffix:
    a line that names no run, so lost fires of one cause count as one pattern."""
    problems = [line for line in (trigger_msg or "").splitlines() if line.startswith("Problem: ")]
    return f" ({problems[0][:120]})" if problems else ""


def _pattern(job_id: int, grid: list[int], got: dict[int, list[int]], gap: Gap | None) -> str:
    base = gap.start_ms if gap is not None else grid[0]
    cells = [f"{(p - base) / 1000:+.1f}:" + (f"{(got[p][0] - p) / 1000:.1f}" if p in got else "-")
             for p in grid]
    rule = f" {gap.misfire.get(job_id)}" if gap is not None else ""
    return f"job {job_id}{rule}: " + " ".join(cells)


def _settled(misses: list[int], logged: dict[tuple[int, int], Any], job_id: int, failed: FailedNode,
             period_ms: int) -> list[int]:
    """The misses the failed node may have sent just before it failed, which the taker
    therefore settles as sent and never sends (docs/design/takeover.md, "Settling a
    takeover"): recorded by that node, unconfirmed (trigger code 0, no dispatch time, no
    result: the row the lost-run monitor fails later), planned at or before its committed
    fence, and due no more than one period before the fault (one due earlier should have
    gone out while the node was still running)."""
    found = []
    for p in misses:
        row = logged.get((job_id, p))
        if (row is not None and row.admin_node == failed.node_id and row.trigger_code == 0
                and row.dispatch_time is None and row.handle_code == 0
                and failed.fault_at_ms - period_ms < p <= failed.fence_ms):
            found.append(p)
    return found


def _excused(misses: list[int], got: dict[int, list[int]], gap: Gap,
             job_id: int) -> tuple[set[int], set[int]]:
    """The misses inside the gap that the job's rules explain (core/planning.py), as
    (coalesced, all excused):

    - coalesced: the job's previous fired instant went out late, at or after the missed
      instant came due; a late fire stands for the instants that came due meanwhile
      (FIRE_ONCE_NOW's misfire fire keeps the first missed instant, so it covers the rest);
    - skipped by DO_NOTHING: a run of misses whose first instant was more than the misfire
      threshold late when the job was next decided (at the latest when its next fire went
      out). Not with ``gap.coalesced_only``.
    """
    coalesced: set[int] = set()
    excused: set[int] = set()
    fired = sorted(got)
    for p in misses:
        if not gap.start_ms <= p < gap.end_ms:
            continue
        before = [q for q in fired if q < p]
        if before and got[before[-1]][0] >= p:
            coalesced.add(p)
            excused.add(p)
            continue
        if gap.coalesced_only:
            continue
        after = [r for r in fired if r > p]
        run_start = min(m for m in misses if (not before or m > before[-1]) and m <= p)
        skipped = after and got[after[0]][0] - run_start > MISFIRE_THRESHOLD_MS
        if gap.misfire[job_id] == "DO_NOTHING" and skipped:
            excused.add(p)
    return coalesced, excused


def first_fire_after(executor: RecordingExecutor, rows: list[Any], node_id: str, jobs: set[int],
                     after_ms: int) -> int | None:
    """When the first /run of one of ``jobs`` recorded by ``node_id`` arrived after ``after_ms``."""
    by_log = {r.id: r for r in rows}
    times = [c.at_ms for c in executor.calls
             if c.at_ms >= after_ms and (r := by_log.get(c.log_id)) is not None
             and r.job_id in jobs and r.admin_node == node_id]
    return min(times, default=None)


async def sleep_until(at_ms: int) -> None:
    await asyncio.sleep(max(0.0, (at_ms - now_ms()) / 1000))
