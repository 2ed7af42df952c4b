"""Executor throughput: /run -> callback for small handlers, jobring vs pyxxl, side by side.

    .venv/bin/python bench/executor_throughput.py [--runs 10000] [--concurrency 64] [--only jobring]
    .venv/bin/python bench/executor_throughput.py --only jobring --servers own,uvicorn --client raw
    .venv/bin/python bench/executor_throughput.py --only jobring --client proto --handlers ok_sync,ok_async \
        --concurrency 32 --jobs 100 --duration-s 15 --rate 1000

Handlers: ``noop_async`` / ``noop_sync`` return at once; ``ok_async`` / ``ok_sync`` write one
line to the run's log (``ctx.log``) and one to stdout, as issue 27's comparison with Java's
xxl-job-core. Each handler is measured at full load (as fast as the executor answers) and,
with ``--rate R``, once more at R runs/s (the callback latency at a moderate load).
``--generators N`` splits the load over N generator processes (to show whether one is the
limit). ``--rss`` samples the executor's RSS while the runs go by (with ``--runs 1000000``:
RSS after 10,000 and after 1,000,000 runs).

``--servers own,uvicorn`` measures the same jobring executor (the same ASGI app) served by its
own HTTP/1.1 server and by uvicorn (httptools + uvloop), one after the other.

Three kinds of process on loopback: this one is the fake admin (counts callbacks, stamps
their arrival), one executor process (jobring, then pyxxl), and the load generator
process(es) (keep-alive, bounded concurrency) that send the /run requests and stamp each send
(``executor_loadkit.py``). Stamps are CLOCK_MONOTONIC, shared by all processes on Linux. A run
counts once the admin got its callback; latency is callback arrival minus /run send. "executor
CPU µs/run" is the executor process's CPU time (all threads) from the generator's start until
the last callback, per run. Everything is stopped at the end (SIGINT, then kill).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
import shutil
import signal
import socket
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar, cast

from executor_loadkit import TOKEN, AdminProtocol, FakeAdmin, generate_load

T = TypeVar("T")


# --- executor processes ------------------------------------------------------------------


def _profiled(serve: Callable[[], None], out_dir: str) -> None:
    """Run ``serve`` under cProfile, every thread (the event loop, the run-log writer, the pool),
    and write one stats file per thread into ``out_dir``."""
    import cProfile
    import threading

    profiles: list[tuple[str, cProfile.Profile]] = []

    def start_in_thread(*_: object) -> None:
        profile = cProfile.Profile()
        profiles.append((threading.current_thread().name, profile))
        profile.enable()  # replaces this hook in this thread

    threading.setprofile(start_in_thread)
    main = cProfile.Profile()
    main.enable()
    try:
        serve()
    finally:
        main.disable()
        threading.setprofile(None)  # type: ignore[arg-type]  # typeshed wants a function
        main.dump_stats(os.path.join(out_dir, "main.prof"))
        for n, (name, profile) in enumerate(profiles):
            profile.dump_stats(os.path.join(out_dir, f"{name}-{n}.prof"))


def serve_jobring(port: int, admin_url: str, log_path: str, server: str = "own",
                  profile_dir: str | None = None) -> None:
    from jobring import Executor, JobContext

    ex = Executor(app_name="bench", admin_addresses=[admin_url], access_token=TOKEN, host="127.0.0.1",
                  port=port, address=f"http://127.0.0.1:{port}/", log_path=log_path, environ={})

    @ex.job("noop_async")
    async def noop_async(ctx: JobContext) -> None:
        return None

    @ex.job("noop_sync")
    def noop_sync(ctx: JobContext) -> None:
        return None

    @ex.job("ok_async")
    async def ok_async(ctx: JobContext) -> None:
        ctx.log("ok")
        print("ok")

    @ex.job("ok_sync")
    def ok_sync(ctx: JobContext) -> None:
        ctx.log("ok")
        print("ok")

    if server == "own":
        if profile_dir:
            _profiled(ex.run, profile_dir)
        else:
            ex.run()
        return
    import uvicorn

    # The same ASGI app; its lifespan starts the engine (registration, callbacks).
    uvicorn.run(ex.asgi_app(), host="127.0.0.1", port=port, loop="uvloop", http="httptools",
                lifespan="on", log_level="warning", access_log=False)


def serve_pyxxl(port: int, admin_url: str, log_path: str) -> None:
    import warnings

    from pyxxl import ExecutorConfig, PyxxlRunner

    os.chdir(log_path)  # pyxxl writes pyxxl.log and logs/ into the working directory
    config = ExecutorConfig(
        xxl_admin_baseurl=admin_url + "api/", executor_app_name="bench", access_token=TOKEN,
        executor_listen_host="127.0.0.1", executor_listen_port=port,
        executor_url=f"http://127.0.0.1:{port}", log_local_dir=os.path.join(log_path, "logs"),
    )
    runner = PyxxlRunner(config)

    @runner.register(name="noop_async")
    async def noop_async() -> None:
        return None

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")

        @runner.register(name="noop_sync")
        def noop_sync() -> None:
            return None

    runner.run_executor()


# --- orchestration -----------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _read_json(path: str) -> dict[str, Any]:
    with open(path, "rb") as f:
        return cast(dict[str, Any], json.load(f))


async def _generate(port: int, handler: str, first_log_id: int, args: argparse.Namespace,
                    rate: float | None) -> tuple[dict[int, float], float, float, int, list[str]]:
    """Run the generator process(es); the send stamp of each log id, start, end, refusals."""
    count = args.generators
    per_runs = args.runs // count
    procs, paths = [], []
    for k in range(count):
        # The result goes through a file: a large one read from the child's stdout pipe came
        # back cut short now and then (under uvloop).
        fd, result_path = tempfile.mkstemp(prefix="bench-loadgen-", suffix=".json")
        os.close(fd)
        paths.append(result_path)
        rate_args = ["--rate", str(rate / count)] if rate else []
        procs.append(await asyncio.create_subprocess_exec(
            sys.executable, __file__, "--role", "loadgen", "--url", f"http://127.0.0.1:{port}",
            "--handler", handler, "--first-log-id", str(first_log_id + k * per_runs), "--runs", str(per_runs),
            "--concurrency", str(max(1, args.concurrency // count)), "--jobs", str(args.jobs),
            "--duration-s", str(args.duration_s), "--client", args.client, "--result-path", result_path,
            *rate_args,
        ))
    sent: dict[int, float] = {}
    starts, ends, refused_count, refused = [], [], 0, []
    try:
        for k, (proc, path) in enumerate(zip(procs, paths, strict=True)):
            await asyncio.wait_for(proc.wait(), args.limit_s)
            load = _read_json(path)
            base = first_log_id + k * per_runs
            sent.update((base + i, stamp) for i, stamp in enumerate(load["sent"]))
            starts.append(load["start"])
            ends.append(load["end"])
            refused_count += load["refused_count"]
            refused += load["refused"]
    finally:
        for proc, path in zip(procs, paths, strict=True):
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
            os.unlink(path)
    return sent, min(starts), max(ends), refused_count, refused


async def _sample_rss(admin: FakeAdmin, pid: int, samples: list[tuple[int, float]]) -> None:
    import psutil

    executor = psutil.Process(pid)
    base = len(admin.arrivals)
    while True:
        samples.append((len(admin.arrivals) - base, executor.memory_info().rss / 2**20))
        await asyncio.sleep(0.5)


async def _cpu_until_quiet(executor: Any, limit_s: float = 60.0) -> float:
    """The process's CPU seconds once it uses less than 5 % of a core over 0.2 s."""
    cpu = sum(executor.cpu_times()[:2])
    for _ in range(int(limit_s / 0.2)):
        await asyncio.sleep(0.2)
        now = sum(executor.cpu_times()[:2])
        if now - cpu < 0.01:
            return float(now)
        cpu = now
    return float(cpu)


async def one_mode(admin: FakeAdmin, port: int, handler: str, first_log_id: int, args: argparse.Namespace,
                   executor_pid: int, rate: float | None = None) -> dict[str, Any]:
    import psutil

    executor = psutil.Process(executor_pid)
    cpu_before = sum(executor.cpu_times()[:2])
    rss: list[tuple[int, float]] = []
    sampler = asyncio.create_task(_sample_rss(admin, executor_pid, rss)) if args.rss else None
    try:
        sent, start, end, refused_count, refused = await _generate(port, handler, first_log_id, args, rate)
        wanted = set(sent)
        with contextlib.suppress(TimeoutError):  # what is missing then shows as reported < runs
            await admin.wait_count(wanted, args.limit_s)
        # CPU the executor process spent (all threads): independent of what else runs on the machine.
        # Counted until the executor is quiet: its run-log writer thread may still be behind.
        cpu_s = await _cpu_until_quiet(executor) - cpu_before
    finally:
        if sampler is not None:
            sampler.cancel()
    got = [log_id for log_id in wanted if log_id in admin.arrivals]
    latencies = sorted((admin.arrivals[log_id] - sent[log_id]) * 1000 for log_id in got)
    last = max(admin.arrivals[log_id] for log_id in got) if got else end
    q = statistics.quantiles(latencies, n=100) if len(latencies) > 1 else [0.0] * 99
    result = {
        "handler": handler if rate is None else f"{handler} @{rate:.0f}/s",
        "runs": len(sent),
        "refused": refused_count,
        "refused_sample": refused,
        "reported": len(got),
        "accepted_per_s": len(sent) / (end - start),
        "reported_per_s": len(got) / (last - start),
        "p50_ms": q[49],
        "p99_ms": q[98],
        "cpu_us": cpu_s / max(1, len(got)) * 1e6,
    }
    if rss:
        after_10k = next((mib for n, mib in rss if n >= 10_000), None)
        result["rss"] = (f"RSS {after_10k or 0:.1f} MiB after 10,000 runs, "
                         f"{rss[-1][1]:.1f} MiB after {rss[-1][0]:,}")
    return result


async def bench_executor(kind: str, admin: FakeAdmin, admin_url: str, args: argparse.Namespace,
                         base_log_id: int, server: str = "own") -> list[dict[str, Any]]:
    port = free_port()
    log_dir = tempfile.mkdtemp(prefix=f"bench-{kind}-", dir=args.log_root)
    admin.registered.clear()
    proc = await asyncio.create_subprocess_exec(
        sys.executable, __file__, "--role", kind, "--port", str(port), "--admin-url", admin_url,
        "--log-path", log_dir, "--server", server, *(["--profile", args.profile] if args.profile else []),
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL,
    )
    handlers = args.handlers.split(",")
    if kind == "pyxxl":
        handlers = [h for h in handlers if h.startswith("noop_")]
    modes = [(h, None) for h in handlers] + ([(h, args.rate) for h in handlers] if args.rate else [])
    results = []
    try:
        await asyncio.wait_for(admin.registered.wait(), 30)
        await asyncio.sleep(0.5)  # let the server finish binding after its first beat (pyxxl beats first)
        # Warm-up (imports, first worker creation), not measured.
        warm = argparse.Namespace(**{**vars(args), "runs": min(1000, args.runs), "duration_s": 3.0,
                                     "rss": False, "generators": 1})
        await one_mode(admin, port, handlers[0], base_log_id, warm, proc.pid)
        for offset, (handler, rate) in enumerate(modes, start=1):
            first = base_log_id + offset * 10_000_000
            result = await one_mode(admin, port, handler, first, args, proc.pid, rate)
            result["executor"] = kind if kind != "jobring" or server == "own" else f"jobring ({server})"
            results.append(result)
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            await asyncio.wait_for(proc.wait(), 15)
        except TimeoutError:
            proc.kill()
            await proc.wait()
        shutil.rmtree(log_dir, ignore_errors=True)  # one run log file per run: tens of thousands
    return results


async def orchestrate(args: argparse.Namespace) -> None:
    admin = FakeAdmin()
    loop = asyncio.get_running_loop()
    server = await loop.create_server(lambda: AdminProtocol(admin), "127.0.0.1", 0)
    admin_url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/xxl-job-admin/"
    results: list[dict[str, Any]] = []
    try:
        kinds = [args.only] if args.only else ["jobring", "pyxxl"]
        steps = [(kind, http) for kind in kinds
                 for http in (args.servers.split(",") if kind == "jobring" else ["own"])]
        for n, (kind, http) in enumerate(steps):
            results += await bench_executor(kind, admin, admin_url, args, (n + 1) * 100_000_000, http)
    finally:
        server.close()
    print(f"# {time.strftime('%Y-%m-%d %H:%M %Z')} {platform.python_version()} {os.cpu_count()} cores, "
          f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}, "
          f"client={args.client} x{args.generators} runs<={args.runs} in <={args.duration_s:.0f} s, "
          f"concurrency={args.concurrency} jobs={args.jobs}, "
          f"run logs in {args.log_root or tempfile.gettempdir()}")
    print("| executor | handler | runs | refused | reported | accepted/s | reported/s | p50 ms | p99 ms "
          "| executor CPU µs/run | runs/s per core |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for r in results:
        print(f"| {r['executor']} | {r['handler']} | {r['runs']} | {r['refused']} | {r['reported']} | "
              f"{r['accepted_per_s']:.0f} | {r['reported_per_s']:.0f} | "
              f"{r['p50_ms']:.1f} | {r['p99_ms']:.1f} | {r['cpu_us']:.0f} | {1e6 / r['cpu_us']:.0f} |")
    for r in results:
        if "rss" in r:
            print(f"{r['executor']} {r['handler']}: {r['rss']}")
    by = {(r["executor"], r["handler"]): r for r in results}
    for handler in ("noop_async", "noop_sync"):
        ours, theirs = by.get(("jobring", handler)), by.get(("pyxxl", handler))
        uvicorn = by.get(("jobring (uvicorn)", handler))
        if ours and uvicorn:
            print(f"ratio own server/uvicorn {handler}: "
                  f"{ours['reported_per_s'] / uvicorn['reported_per_s']:.2f}x throughput, "
                  f"{uvicorn['cpu_us'] / ours['cpu_us']:.2f}x less executor CPU per run")
        if ours and theirs:
            print(f"ratio jobring/pyxxl {handler}: {ours['reported_per_s'] / theirs['reported_per_s']:.2f}x "
                  f"throughput, {theirs['cpu_us'] / ours['cpu_us']:.2f}x less executor CPU per run")
    print(f"duplicate callbacks: {admin.duplicates}, failed results: {admin.failures}, "
          f"callback requests: {admin.callback_requests}")
    for r in results:
        if r["refused_sample"]:
            print(f"refused by {r['executor']} ({r['handler']}): {r['refused_sample'][0][:200]}")


def _run_fast(main: Coroutine[Any, Any, T]) -> T:
    """asyncio.run on uvloop when installed: the generator and the fake admin share the machine
    with the executor under test, so the less CPU they take, the less they disturb it."""
    try:
        import uvloop
    except ImportError:
        return asyncio.run(main)
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        return runner.run(main)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--role", default="bench", choices=["bench", "jobring", "pyxxl", "loadgen"])
    parser.add_argument("--runs", type=int, default=20000, help="at most this many runs per step")
    parser.add_argument("--duration-s", type=float, default=10.0, help="stop sending after this long")
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--jobs", type=int, default=1000, help="distinct job ids the runs rotate over")
    parser.add_argument("--limit-s", type=float, default=120.0, help="time limit per measured step")
    parser.add_argument("--only", choices=["jobring", "pyxxl"])
    parser.add_argument("--client", default="httpx", choices=["httpx", "raw", "proto"],
                        help="load generator HTTP client: httpx, raw asyncio streams (much cheaper), "
                             "or proto (protocol callbacks, cheaper still)")
    parser.add_argument("--handlers", default="noop_async,noop_sync",
                        help="comma separated: noop_async, noop_sync, ok_async, ok_sync")
    parser.add_argument("--rate", type=float, help="also measure each handler at this many runs/s")
    parser.add_argument("--generators", type=int, default=1, help="load generator processes")
    parser.add_argument("--rss", action="store_true", help="sample the executor's RSS as runs go by")
    parser.add_argument("--log-root", help="folder for the executor's run logs (default: the system's "
                        "temporary folder); e.g. /dev/shm to measure without the disk")
    parser.add_argument("--profile", help="cProfile the jobring executor (all threads) into this folder")
    parser.add_argument("--servers", default="own",
                        help="HTTP servers for the jobring executor, comma separated: own, uvicorn")
    parser.add_argument("--server", default="own", choices=["own", "uvicorn"], help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int)
    parser.add_argument("--admin-url")
    parser.add_argument("--log-path")
    parser.add_argument("--url")
    parser.add_argument("--handler")
    parser.add_argument("--first-log-id", type=int)
    parser.add_argument("--result-path")
    args = parser.parse_args()
    if args.role == "jobring":
        serve_jobring(args.port, args.admin_url, args.log_path, args.server, args.profile)
    elif args.role == "pyxxl":
        serve_pyxxl(args.port, args.admin_url, args.log_path)
    elif args.role == "loadgen":
        result = _run_fast(generate_load(args.url, args.handler, args.first_log_id, args.runs,
                                           args.concurrency, args.jobs, args.duration_s, args.client,
                                           args.rate))
        with open(args.result_path, "w") as f:
            json.dump(result, f)
    else:
        _run_fast(orchestrate(args))


if __name__ == "__main__":
    main()
