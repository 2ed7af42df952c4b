"""Fire precision of the admin: N FIX_RATE (1 s) jobs against a fast loopback executor.

    .venv/bin/python bench/fire_precision.py --jobs 1000 --backend sqlite --seconds 20
    .venv/bin/python bench/fire_precision.py --jobs 1000 --backend postgresql --phase aligned

Starts a minimal fake executor process (answers every POST with ReturnT success) and one
real admin process (`jobring admin`) on a new database, creates N running FIX_RATE jobs
(1 s) whose first instants are spread evenly over a second (``--phase spread``, jobs
started at different moments) or all on the same millisecond (``--phase aligned``, the
worst case: N fires at one instant), waits for a warm-up, measures a window, and reads
the run log: dispatched runs/s, lateness (``dispatch_time - planned_time``) p50/p99/max,
missed fires (planned instants in the window without a log row), double fires, and the
admin's CPU and RSS (psutil). Everything runs on loopback and stops by itself.

``--pull-pollers N`` connects N idle pull executors to the admin before the window (one
process holding N long polls on ``api/pull``, each its own ``pull://`` address): the fire
lateness beside them, and the admin's RSS growth when they connected (printed to stderr).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import psutil
from sqlalchemy import func, insert, select

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # tests.dbs: throwaway databases

from tests.dbs import acreate_test_database, adrop_test_database  # noqa: E402

from jobring.admin.store import Store, create_engine, upgrade_database  # noqa: E402
from jobring.admin.store.tables import job_group, job_info, job_log  # noqa: E402

_RESPONSE = b'{"code":200,"msg":null,"content":null}'
_HTTP_OK = (
    b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: "
    + str(len(_RESPONSE)).encode() + b"\r\n\r\n" + _RESPONSE
)


class _FakeExecutor(asyncio.Protocol):
    """HTTP/1.1 keep-alive: answers each request (headers + Content-Length body) with success."""

    def __init__(self) -> None:
        self.buffer = b""
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        while True:
            head_end = self.buffer.find(b"\r\n\r\n")
            if head_end < 0:
                return
            head = self.buffer[:head_end].lower()
            length = 0
            marker = head.find(b"content-length:")
            if marker >= 0:
                length = int(head[marker + 15:].split(b"\r\n", 1)[0].strip())
            end = head_end + 4 + length
            if len(self.buffer) < end:
                return
            self.buffer = self.buffer[end:]
            assert self.transport is not None
            self.transport.write(_HTTP_OK)


async def _serve_fake_executor(port: int) -> None:
    loop = asyncio.get_running_loop()
    server = await loop.create_server(_FakeExecutor, "127.0.0.1", port, backlog=1024)
    stop = asyncio.Event()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    loop.add_signal_handler(signal.SIGINT, stop.set)
    async with server:
        await stop.wait()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _wait_for_port(port: int, limit_s: float = 60.0) -> None:
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.1)
    raise RuntimeError(f"nothing listens on port {port} after {limit_s} s")


def admin_env() -> dict[str, str]:
    """A benchmark admin's environment: none of the caller's JOBRING_ settings, bench secrets."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("JOBRING_")}
    env.update(JOBRING_ACCESS_TOKEN="bench-access-token-0123", JOBRING_ADMIN_PASSWORD="bench-password-1")
    return env


def stop_processes(procs: Sequence[subprocess.Popen[bytes] | None]) -> None:
    """SIGTERM each process still running, in order; SIGKILL it after 20 s."""
    for proc in procs:
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


@dataclass
class Result:
    jobs: int
    backend: str
    phase: str
    window_s: float
    fired: int
    expected: int
    missed: int
    doubled: int
    p50: float
    p99: float
    max: float
    cpu_pct: float
    rss_mib: float
    cpu_us_per_fire: float

    def line(self) -> str:
        return (f"| {self.jobs} | {self.backend} | {self.phase} | {self.window_s:.0f} s | "
                f"{self.fired / self.window_s:.0f} | {self.p50:.1f} | {self.p99:.1f} | {self.max:.0f} | "
                f"{self.missed} / {self.expected} | {self.doubled} | {self.cpu_pct:.0f} % | "
                f"{self.cpu_us_per_fire:.0f} | {self.rss_mib:.0f} MiB |")


def _quantile(sorted_values: list[int], q: float) -> float:
    if not sorted_values:
        return float("nan")
    index = min(len(sorted_values) - 1, max(0, int(round(q * (len(sorted_values) - 1)))))
    return float(sorted_values[index])


async def _create_jobs(url: str, jobs: int, first_ms: int, phase: str, executor_port: int) -> list[int]:
    store = Store(create_engine(url))
    try:
        async with store.engine.begin() as conn:
            result = await conn.execute(insert(job_group).values(
                app_name="bench", title="bench", address_type=1,
                address_list=f"http://127.0.0.1:{executor_port}/",
                update_time=datetime.now(UTC).replace(tzinfo=None)))
            assert result.inserted_primary_key is not None
            group_id = int(result.inserted_primary_key[0])
            starts = [first_ms + (0 if phase == "aligned" else (i * 1000) // jobs) for i in range(jobs)]
            rows = [{"job_group": group_id, "job_desc": f"bench {i}", "schedule_type": "FIX_RATE",
                     "schedule_conf": "1", "misfire_strategy": "DO_NOTHING",
                     "executor_route_strategy": "FIRST",
                     "executor_handler": "bench", "executor_param": "",
                     "executor_block_strategy": "DISCARD_LATER", "glue_type": "BEAN", "trigger_status": 1,
                     "trigger_next_time": start}
                    for i, start in enumerate(starts)]
            for part in range(0, len(rows), 1000):
                await conn.execute(insert(job_info), rows[part:part + 1000])
        return starts
    finally:
        await store.close()


async def _measure(url: str, starts: list[int], t1: int, t2: int) -> tuple[int, int, int, list[int]]:
    engine = create_engine(url)
    try:
        async with engine.connect() as conn:
            rows = (await conn.execute(
                select(job_log.c.job_id, job_log.c.planned_time, job_log.c.dispatch_time)
                .where(job_log.c.planned_time >= t1, job_log.c.planned_time < t2))).all()
            doubled = (await conn.execute(
                select(func.count()).select_from(
                    select(job_log.c.job_id, job_log.c.planned_time)
                    .where(job_log.c.planned_time >= t1, job_log.c.planned_time < t2)
                    .group_by(job_log.c.job_id, job_log.c.planned_time)
                    .having(func.count() > 1).subquery()))).scalar_one()
    finally:
        await engine.dispose()
    expected = 0
    for start in starts:
        # instants start + k*1000 within [t1, t2)
        first_k = max(0, -(-(t1 - start) // 1000))
        last_k = (t2 - 1 - start) // 1000
        expected += max(0, last_k - first_k + 1)
    lateness = sorted(int(r.dispatch_time) - int(r.planned_time) for r in rows if r.dispatch_time is not None)
    keys = {(r.job_id, r.planned_time) for r in rows}
    return len(rows), expected, int(doubled), lateness if len(keys) else []


_SLOW_STEP_PROBE = """
import asyncio.events, sys, time
sys.modules["uvloop"] = None  # type: ignore[assignment]  # asyncio's Handle, which can be timed
_run = asyncio.events.Handle._run
def _timed(self):
    t0 = time.perf_counter()
    _run(self)
    took = (time.perf_counter() - t0) * 1000
    if took >= LIMIT:
        print(f"slow step {took:.1f} ms at {time.time():.3f}: {_where(self)}", file=sys.stderr, flush=True)
def _where(handle):
    # The task the step ran, and where its coroutine chain is suspended now (the step's end).
    task = getattr(getattr(handle, "_callback", None), "__self__", None)
    if task is None or not hasattr(task, "get_coro"):
        return repr(handle)[:200]
    chain, coro = [], task.get_coro()
    while coro is not None and hasattr(coro, "cr_frame") and coro.cr_frame is not None:
        chain.append(f"{coro.cr_code.co_name}:{coro.cr_frame.f_lineno}")
        coro = coro.cr_await
    return task.get_name() + " " + " > ".join(chain)
asyncio.events.Handle._run = _timed
import gc
_gc_start = [0.0]
def _gc_timer(phase, info):
    if phase == "start":
        _gc_start[0] = time.perf_counter()
        return
    took = (time.perf_counter() - _gc_start[0]) * 1000
    if took >= LIMIT / 4 and gc.get_freeze_count():  # steady state: after the start-up freeze
        print(f"gc gen{info['generation']} {took:.1f} ms", file=sys.stderr, flush=True)
gc.callbacks.append(_gc_timer)
"""


def _admin_entry(slow_steps_ms: float | None, probe: str | None = None) -> str:
    """The admin's ``python -c`` program; with ``slow_steps_ms`` it prints every event-loop
    step that held the loop that long (a diagnostic: it costs a little per step); ``probe``
    is the path of more diagnostic code run first (e.g. patching timestamps in)."""
    entry = "import sys; from jobring.cli import main; sys.exit(main())"
    if probe is not None:
        entry = Path(probe).read_text() + "\n" + entry
    if slow_steps_ms is None:
        return entry
    return _SLOW_STEP_PROBE.replace("LIMIT", repr(slow_steps_ms)) + entry


_POLLERS = """
import asyncio, sys, httpx, orjson
URL, TOKEN, N = sys.argv[1], sys.argv[2], int(sys.argv[3])
async def poll(client, i, first):
    address = f"pull://idle-{i}/"
    body = lambda wait: orjson.dumps({"address": address, "appname": "bench-idle", "wait_ms": wait})
    answer = await client.post(URL, content=body(0), headers={"XXL-JOB-ACCESS-TOKEN": TOKEN})
    assert answer.json()["code"] == 200, answer.text
    first.release()
    while True:
        try:
            await client.post(URL, content=body(20000), headers={"XXL-JOB-ACCESS-TOKEN": TOKEN})
        except httpx.HTTPError:
            await asyncio.sleep(1)
async def main():
    limits = httpx.Limits(max_connections=N + 10, max_keepalive_connections=N + 10)
    first = asyncio.Semaphore(0)
    async with httpx.AsyncClient(limits=limits, timeout=60) as client:
        polls = [asyncio.ensure_future(poll(client, i, first)) for i in range(N)]
        for _ in range(N):
            await first.acquire()
        print("ready", flush=True)
        await asyncio.gather(*polls)
asyncio.run(main())
"""


def _connect_pollers(admin_port: int, count: int, proc: psutil.Process) -> subprocess.Popen[bytes]:
    """``count`` idle pull executors polling the admin (returns once all polled once)."""
    before = proc.memory_info().rss
    pollers = subprocess.Popen(
        [sys.executable, "-c", _POLLERS, f"http://127.0.0.1:{admin_port}/api/pull",
         admin_env()["JOBRING_ACCESS_TOKEN"], str(count)], stdout=subprocess.PIPE)
    assert pollers.stdout is not None
    if pollers.stdout.readline().strip() != b"ready":
        raise RuntimeError("the idle pull executors did not connect")
    time.sleep(2.0)  # their long polls reach the admin
    grown = (proc.memory_info().rss - before) / 2**20
    print(f"{count} idle pull executors connected: admin RSS +{grown:.1f} MiB", file=sys.stderr, flush=True)
    return pollers


def run_case(
    jobs: int, backend: str, phase: str, seconds: float, warmup: float, admin_args: list[str],
    slow_steps_ms: float | None = None, profile: str | None = None, probe: str | None = None,
    pull_pollers: int = 0,
) -> Result:
    workdir = Path(tempfile.mkdtemp(prefix="jobring-bench-"))
    url = asyncio.run(acreate_test_database(backend, workdir))
    asyncio.run(upgrade_database(url))
    executor_port, admin_port = free_port(), free_port()
    env = admin_env()
    fake = subprocess.Popen([sys.executable, __file__, "fake-executor", "--port", str(executor_port)])
    admin: subprocess.Popen[bytes] | None = None
    pollers: subprocess.Popen[bytes] | None = None
    try:
        _wait_for_port(executor_port)
        first_ms = int(time.time() * 1000) + 8_000  # after the admin has started
        starts = asyncio.run(_create_jobs(url, jobs, first_ms, phase, executor_port))
        admin = subprocess.Popen(
            [sys.executable, "-c", _admin_entry(slow_steps_ms, probe),
             "admin", "--database-url", url, "--port", str(admin_port), "--log-level", "warning",
             *admin_args],
            env=env, cwd=workdir)
        _wait_for_port(admin_port)
        proc = psutil.Process(admin.pid)
        if pull_pollers:
            pollers = _connect_pollers(admin_port, pull_pollers, proc)
        now = time.time() * 1000
        t1 = int(max(now, first_ms) + warmup * 1000)
        t2 = t1 + int(seconds * 1000)
        time.sleep(max(0.0, (t1 - time.time() * 1000) / 1000))
        cpu0 = proc.cpu_times()
        wall0 = time.monotonic()
        spy = None
        if profile is not None:
            # py-spy samples the admin during the window. It pauses the admin for each sample
            # (torn stacks otherwise): the timings of a profiled run are worse than real. Only
            # the thread holding the GIL is sampled (idle waits would count otherwise).
            spy = subprocess.Popen(
                [str(Path(sys.executable).parent / "py-spy"), "record", "-p", str(admin.pid),
                 "-d", str(int(seconds)), "-r", "250", "--gil",
                 "--format", "raw", "-o", f"{profile}-{jobs}-{backend}-{phase}.txt"],
                stdout=subprocess.DEVNULL)
        rss = 0
        while time.time() * 1000 < t2:
            rss = max(rss, proc.memory_info().rss)
            time.sleep(0.5)
        cpu1 = proc.cpu_times()
        cpu_s = cpu1.user + cpu1.system - cpu0.user - cpu0.system
        cpu = cpu_s / (time.monotonic() - wall0) * 100
        time.sleep(3.0)  # let the last fires of the window be recorded
        if spy is not None:
            spy.wait(30)
        fired, expected, doubled, lateness = asyncio.run(_measure(url, starts, t1, t2))
        return Result(jobs, backend, phase, seconds, fired, expected, max(0, expected - fired), doubled,
                      _quantile(lateness, 0.5), _quantile(lateness, 0.99),
                      float(lateness[-1]) if lateness else float("nan"), cpu, rss / 2**20,
                      cpu_s / fired * 1e6 if fired else float("nan"))
    finally:
        stop_processes([pollers, admin, fake])
        asyncio.run(adrop_test_database(url))
        shutil.rmtree(workdir, ignore_errors=True)  # the SQLite file, the admin's logs


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command")
    fake = sub.add_parser("fake-executor")
    fake.add_argument("--port", type=int, required=True)
    parser.add_argument("--jobs", type=int, nargs="+", default=[100, 1000])
    parser.add_argument("--backend", nargs="+", default=["sqlite"],
                        choices=("sqlite", "postgresql", "mariadb"))
    parser.add_argument("--phase", nargs="+", default=["spread"], choices=("spread", "aligned"))
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--warmup", type=float, default=5.0)
    parser.add_argument("--slow-steps", type=float, default=None, metavar="MS",
                        help="print every admin event-loop step that takes MS or longer")
    parser.add_argument("--profile", default=None, metavar="PREFIX",
                        help="record the admin with py-spy during the window (raw stacks to PREFIX-*.txt; "
                        "it slows the admin: measure without it)")
    parser.add_argument("--probe", default=None, metavar="FILE",
                        help="Python code the admin runs before starting (diagnostics)")
    parser.add_argument("--pull-pollers", type=int, default=0, metavar="N",
                        help="N idle pull executors long-polling the admin during the window")
    args, admin_args = parser.parse_known_args(argv)
    if args.command == "fake-executor":
        asyncio.run(_serve_fake_executor(args.port))
        return 0
    print("| jobs | backend | phase | window | runs/s | p50 ms | p99 ms | max ms | missed | doubled "
          "| admin CPU | CPU µs/fire | admin RSS |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for backend in args.backend:
        for phase in args.phase:
            for jobs in args.jobs:
                result = run_case(jobs, backend, phase, args.seconds, args.warmup, admin_args,
                                  args.slow_steps, args.profile, args.probe, args.pull_pollers)
                print(result.line(), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
