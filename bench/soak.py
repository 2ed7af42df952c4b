"""Soak: 2 admin nodes, 1,000 fires/s on PostgreSQL for 30 minutes: RSS flat, lateness flat, fires exact.

Run from the repository root (by hand; it takes ``--minutes`` plus a minute):
    .venv/bin/python bench/soak.py [--nodes 2] [--jobs 1000] [--minutes 30]

One throwaway PostgreSQL database, ``--jobs`` FIX_RATE (1 s) jobs spread over the second
against bench/fire_precision.py's fast loopback executor, ``--nodes`` admin processes. Every
``--every`` seconds a row: each node's RSS and CPU share, and the lateness p50/p99/max,
missed and doubled fires of the instants planned in that slice (read from the run log).
A last row sums the whole run.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import fire_precision as fp  # noqa: E402
from tests.dbs import acreate_test_database, adrop_test_database  # noqa: E402

from jobring.admin.store import upgrade_database  # noqa: E402


def _slice(url: str, starts: list[int], t1: int, t2: int) -> str:
    fired, expected, doubled, lateness = asyncio.run(fp._measure(url, starts, t1, t2))
    return (f"{fired / ((t2 - t1) / 1000):.0f} fires/s | p50 {fp._quantile(lateness, 0.5):.0f} / "
            f"p99 {fp._quantile(lateness, 0.99):.0f} / max {lateness[-1] if lateness else 0} ms | "
            f"missed {max(0, expected - fired)}, doubled {doubled}")


def soak(nodes: int, jobs: int, minutes: float, every_s: float) -> None:
    workdir = Path(tempfile.mkdtemp(prefix="jobring-soak-"))
    url = asyncio.run(acreate_test_database("postgresql", workdir))
    asyncio.run(upgrade_database(url))
    executor_port = fp.free_port()
    env = fp.admin_env()
    fake = subprocess.Popen([sys.executable, fp.__file__, "fake-executor", "--port", str(executor_port)])
    admins: list[subprocess.Popen[bytes]] = []
    try:
        fp._wait_for_port(executor_port)
        first_ms = int(time.time() * 1000) + 10_000
        starts = asyncio.run(fp._create_jobs(url, jobs, first_ms, "spread", executor_port))
        ports = [fp.free_port() for _ in range(nodes)]
        admins.extend(subprocess.Popen(
            [sys.executable, "-m", "jobring.cli", "admin", "--database-url", url, "--port", str(port),
             "--log-level", "warning"], env=env, cwd=workdir) for port in ports)
        for port in ports:
            fp._wait_for_port(port)
        procs = [psutil.Process(a.pid) for a in admins]
        begin = int(first_ms + 15_000)
        end = begin + int(minutes * 60_000)
        print("| minute | " + " | ".join(f"node {i + 1} RSS, CPU" for i in range(nodes))
              + " | rate | lateness | exact |")
        print("|---" * (nodes + 4) + "|", flush=True)
        t1 = begin
        time.sleep(max(0.0, (begin - time.time() * 1000) / 1000))
        cpu_before = [p.cpu_times() for p in procs]
        while t1 < end:
            t2 = min(end, t1 + int(every_s * 1000))
            time.sleep(max(0.0, (t2 - time.time() * 1000) / 1000) + 3.0)
            cpu_after = [p.cpu_times() for p in procs]
            usage = []
            for proc, a, b in zip(procs, cpu_before, cpu_after, strict=True):
                share = (b.user + b.system - a.user - a.system) / ((t2 - t1) / 1000 + 3.0) * 100
                usage.append(f"{proc.memory_info().rss / 2**20:.0f} MiB, {share:.0f} %")
            cpu_before = cpu_after
            row = " | ".join(usage)
            print(f"| {(t2 - begin) / 60_000:.1f} | {row} | {_slice(url, starts, t1, t2)} |", flush=True)
            t1 = t2
        blanks = " | ".join("" for _ in procs)
        print(f"| all {minutes:g} min | {blanks} | {_slice(url, starts, begin, end)} |", flush=True)
    finally:
        fp.stop_processes([*admins, fake])
        asyncio.run(adrop_test_database(url))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--nodes", type=int, default=2)
    parser.add_argument("--jobs", type=int, default=1000)
    parser.add_argument("--minutes", type=float, default=30.0)
    parser.add_argument("--every", type=float, default=60.0, help="seconds per row")
    args = parser.parse_args()
    print(f"# {platform.node()}, {os.cpu_count()} cores, {datetime.now(UTC):%Y-%m-%d %H:%M} UTC, "
          f"load {os.getloadavg()[0]:.1f}, {args.nodes} nodes, {args.jobs} fires/s")
    soak(args.nodes, args.jobs, args.minutes, args.every)


if __name__ == "__main__":
    main()
