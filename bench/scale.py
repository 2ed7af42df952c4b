"""Scale-out: 1, 2 and 4 admin nodes on one PostgreSQL share the fires; per-fire costs per node.

Run from the repository root:
    .venv/bin/python bench/scale.py [--nodes 1 2 4] [--jobs 1000] [--seconds 20]

One throwaway PostgreSQL database, ``--jobs`` FIX_RATE (1 s) jobs spread over the second
(``--jobs`` fires/s in all) against bench/fire_precision.py's fast loopback executor, and N
admin processes (`jobring admin`) on that database. After a warm-up that lets the nodes
share the jobs out, a window is measured. Per node: the fires it sent (run log
``admin_node``), its CPU per fire (psutil), its SQL statements per fire and their time per
fire (the node's /metrics ``jobring_admin_db_statement_ms``), the jobs it took over from
another node (``jobring_admin_lease_takeovers_total``). For the cluster: lateness p99,
missed and doubled fires, and lock waits (``pg_locks`` not granted on the database, sampled
every 100 ms). The box caps the total (the nodes, the database and the executor share its
cores): what must not grow with N is the per-fire cost.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import httpx
import psutil
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import func, select, text
from sqlalchemy.engine import make_url

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import fire_precision as fp  # noqa: E402
from tests.dbs import acreate_test_database, adrop_test_database  # noqa: E402

from jobring.admin.store import create_engine, upgrade_database  # noqa: E402
from jobring.admin.store.tables import job_log  # noqa: E402


@dataclass
class Scrape:
    node: str
    statements: float
    statement_ms: float
    takeovers: float


def _scrape(port: int) -> Scrape:
    body = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=10).text
    node, statements, statement_ms, takeovers = "", 0.0, 0.0, 0.0
    for family in text_string_to_metric_families(body):
        for sample in family.samples:
            if sample.name == "jobring_admin_held_jobs":
                node = sample.labels["node"]
            elif sample.name == "jobring_admin_db_statement_ms_count":
                statements += sample.value
            elif sample.name == "jobring_admin_db_statement_ms_sum":
                statement_ms += sample.value
            elif sample.name == "jobring_admin_lease_takeovers_total":
                takeovers = sample.value
    return Scrape(node, statements, statement_ms, takeovers)


class LockWaits(threading.Thread):
    """Samples the database's ungranted locks every 100 ms."""

    def __init__(self, url: str) -> None:
        super().__init__(daemon=True)
        self.url = url
        self.samples: list[int] = []
        self.stop = threading.Event()

    def run(self) -> None:
        asyncio.run(self._sample())

    async def _sample(self) -> None:
        engine = create_engine(self.url)
        database = make_url(self.url).database
        try:
            async with engine.connect() as conn:
                while not self.stop.is_set():
                    waits = (await conn.execute(text(
                        "SELECT count(*) FROM pg_locks l JOIN pg_database d ON d.oid = l.database "
                        "WHERE NOT l.granted AND d.datname = :db"), {"db": database})).scalar_one()
                    self.samples.append(int(waits))
                    await asyncio.sleep(0.1)
        finally:
            await engine.dispose()


async def _fires_by_node(url: str, t1: int, t2: int) -> dict[str, int]:
    engine = create_engine(url)
    try:
        async with engine.connect() as conn:
            rows = (await conn.execute(
                select(job_log.c.admin_node, func.count())
                .where(job_log.c.planned_time >= t1, job_log.c.planned_time < t2)
                .group_by(job_log.c.admin_node))).all()
        return {str(node): int(count) for node, count in rows}
    finally:
        await engine.dispose()


def run_nodes(nodes: int, jobs: int, seconds: float, warmup: float) -> None:
    workdir = Path(tempfile.mkdtemp(prefix="jobring-scale-"))
    url = asyncio.run(acreate_test_database("postgresql", workdir))
    asyncio.run(upgrade_database(url))
    executor_port = fp.free_port()
    env = fp.admin_env()
    fake = subprocess.Popen([sys.executable, fp.__file__, "fake-executor", "--port", str(executor_port)])
    admins: list[tuple[subprocess.Popen[bytes], int]] = []
    try:
        fp._wait_for_port(executor_port)
        first_ms = int(time.time() * 1000) + 10_000
        starts = asyncio.run(fp._create_jobs(url, jobs, first_ms, "spread", executor_port))
        for _ in range(nodes):
            port = fp.free_port()
            admins.append((subprocess.Popen(
                [sys.executable, "-m", "jobring.cli", "admin", "--database-url", url, "--port", str(port),
                 "--log-level", "warning"], env=env, cwd=workdir), port))
        for _, port in admins:
            fp._wait_for_port(port)
        t1 = int(max(time.time() * 1000, first_ms) + warmup * 1000)
        t2 = t1 + int(seconds * 1000)
        time.sleep(max(0.0, (t1 - time.time() * 1000) / 1000))
        procs = [psutil.Process(proc.pid) for proc, _ in admins]
        cpu0 = [p.cpu_times() for p in procs]
        scrape0 = [_scrape(port) for _, port in admins]
        waits = LockWaits(url)
        waits.start()
        time.sleep(max(0.0, (t2 - time.time() * 1000) / 1000))
        cpu1 = [p.cpu_times() for p in procs]
        scrape1 = [_scrape(port) for _, port in admins]
        waits.stop.set()
        waits.join(10)
        time.sleep(3.0)
        fired, expected, doubled, lateness = asyncio.run(fp._measure(url, starts, t1, t2))
        by_node = asyncio.run(_fires_by_node(url, t1, t2))
        p99 = fp._quantile(lateness, 0.99)
        mean_waits = sum(waits.samples) / max(1, len(waits.samples))
        print(f"| {nodes} node(s), {jobs} fires/s | all | {fired / seconds:.0f} fires/s | p99 {p99:.0f} ms | "
              f"missed {max(0, expected - fired)}, doubled {doubled} | lock waits mean {mean_waits:.2f}, "
              f"max {max(waits.samples, default=0)} | |", flush=True)
        for i, (a, b) in enumerate(zip(scrape0, scrape1, strict=True)):
            node_fires = by_node.get(b.node, 0)
            cpu = (cpu1[i].user + cpu1[i].system) - (cpu0[i].user + cpu0[i].system)
            per = max(1, node_fires)
            statements = (b.statements - a.statements) / per
            db_us = (b.statement_ms - a.statement_ms) / per * 1000
            print(f"| {nodes} node(s) | node {i + 1} | {node_fires / seconds:.0f} fires/s | "
                  f"CPU {cpu / per * 1e6:.0f} µs/fire | {statements:.2f} statements/fire | "
                  f"{db_us:.0f} µs DB time/fire | takeovers {b.takeovers - a.takeovers:.0f}, "
                  f"CPU {cpu / seconds * 100:.0f} % |", flush=True)
    finally:
        fp.stop_processes([*(proc for proc, _ in admins), fake])
        asyncio.run(adrop_test_database(url))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--nodes", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--jobs", type=int, default=1000)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--warmup", type=float, default=10.0)
    args = parser.parse_args()
    print(f"# {platform.node()}, {os.cpu_count()} cores, {datetime.now(UTC):%Y-%m-%d %H:%M} UTC, "
          f"load {os.getloadavg()[0]:.1f}")
    print("| cluster | node | fires | lateness / CPU | statements | DB | takeovers / CPU |")
    print("|---|---|---|---|---|---|---|")
    for nodes in args.nodes:
        run_nodes(nodes, args.jobs, args.seconds, args.warmup)


if __name__ == "__main__":
    main()
