"""Callback floods (issue #19 item 7(a)): fire lateness of 1 s FIX_RATE jobs, quiet and while
another group's token floods ``api/callback`` with maximum-size batches for runs that do
not exist.

    flock /tmp/jobring-heavy.lock .venv/bin/python bench/callback_flood.py --backend sqlite postgresql

Per backend: a new database, the fake executor of ``bench/fire_precision.py`` and one real
admin process (``jobring admin``). ``--jobs`` running 1 s FIX_RATE jobs (first instants
spread over a second) in a group without a token of its own, and a second group "flood"
with its own token. After ``--warmup`` s, a quiet window of ``--seconds`` s; then, in a
separate process, ``--clients`` concurrent connections post 1,000-item callback batches
(the per-request cap) for ids that do not exist, with the flood group's token, as fast as
the admin answers, for a second window of the same length. Lateness is ``dispatch_time -
planned_time`` of the runs planned in each window (p50/p99/max), with the missed fires and
the flood's request rate (and a check that every batch was refused, none accepted).
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

import orjson

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from fire_precision import (  # noqa: E402
    _create_jobs,
    _measure,
    _quantile,
    _wait_for_port,
    admin_env,
    free_port,
    stop_processes,
)
from sqlalchemy import insert  # noqa: E402
from tests.dbs import acreate_test_database, adrop_test_database  # noqa: E402

from jobring.admin.store import Store, create_engine, upgrade_database  # noqa: E402
from jobring.admin.store.tables import job_group  # noqa: E402

FLOOD_TOKEN = "bench-flood-group-token-0123456789abcdef"
BATCH = 1_000


async def _flood_group(url: str) -> None:
    store = Store(create_engine(url))
    try:
        async with store.engine.begin() as conn:
            await conn.execute(insert(job_group).values(
                app_name="flood", title="flood", address_type=0, access_token=FLOOD_TOKEN,
                update_time=datetime.now(UTC).replace(tzinfo=None)))
    finally:
        await store.close()


async def _flood(port: int, clients: int, seconds: float) -> None:
    """Post refused batches until ``seconds`` pass; prints requests, answers by status, time."""
    import httpx

    body = orjson.dumps([{"logId": 2_000_000_000 + k, "logDateTim": 0, "handleCode": 200,
                          "handleMsg": "flood"} for k in range(BATCH)])
    headers = {"XXL-JOB-ACCESS-TOKEN": FLOOD_TOKEN, "Content-Type": "application/json"}
    statuses: dict[str, int] = {}
    deadline = time.monotonic() + seconds

    async def client() -> None:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=60) as http:
            while time.monotonic() < deadline:
                response = await http.post("/xxl-job-admin/api/callback", content=body, headers=headers)
                key = str(response.status_code)
                statuses[key] = statuses.get(key, 0) + 1

    started = time.monotonic()
    await asyncio.gather(*(client() for _ in range(clients)))
    print(orjson.dumps({"statuses": statuses, "seconds": time.monotonic() - started}).decode(), flush=True)


def _window(url: str, starts: list[int], t1: int, t2: int) -> tuple[int, int, float, float, float]:
    fired, expected, _doubled, lateness = asyncio.run(_measure(url, starts, t1, t2))
    return (fired, max(0, expected - fired), _quantile(lateness, 0.5), _quantile(lateness, 0.99),
            float(lateness[-1]) if lateness else float("nan"))


def run_backend(backend: str, jobs: int, seconds: float, warmup: float, clients: int) -> list[str]:
    workdir = Path(tempfile.mkdtemp(prefix="jobring-cbflood-"))
    url = asyncio.run(acreate_test_database(backend, workdir))
    asyncio.run(upgrade_database(url))
    executor_port, admin_port = free_port(), free_port()
    fake = subprocess.Popen([sys.executable, str(ROOT / "bench" / "fire_precision.py"), "fake-executor",
                             "--port", str(executor_port)])
    admin: subprocess.Popen[bytes] | None = None
    try:
        _wait_for_port(executor_port)
        asyncio.run(_flood_group(url))
        first_ms = int(time.time() * 1000) + 8_000
        starts = asyncio.run(_create_jobs(url, jobs, first_ms, "spread", executor_port))
        admin = subprocess.Popen(
            [sys.executable, "-c", "import sys; from jobring.cli import main; sys.exit(main())",
             "admin", "--database-url", url, "--port", str(admin_port), "--log-level", "error"],
            env=admin_env(), cwd=workdir)
        _wait_for_port(admin_port)
        t1 = int(max(time.time() * 1000, first_ms) + warmup * 1000)
        t2 = t1 + int(seconds * 1000)
        time.sleep(max(0.0, (t2 - time.time() * 1000) / 1000) + 0.2)
        flood = subprocess.Popen([sys.executable, __file__, "flood", "--port", str(admin_port),
                                  "--clients", str(clients), "--seconds", str(seconds + 2)],
                                 stdout=subprocess.PIPE, env={**os.environ})
        f1 = int(time.time() * 1000) + 1_000  # the flood is under way
        f2 = f1 + int(seconds * 1000)
        out, _ = flood.communicate(timeout=seconds + 120)
        time.sleep(3.0)  # the window's last fires are recorded
        report = orjson.loads(out.strip().splitlines()[-1])
        requests = sum(report["statuses"].values())
        rate = requests / report["seconds"]
        lines = []
        for name, (a, b) in (("quiet", (t1, t2)), ("flood", (f1, f2))):
            fired, missed, p50, p99, worst = _window(url, starts, a, b)
            traffic = "-" if name == "quiet" else (
                f"{rate:.1f} req/s ({rate * BATCH:,.0f} items/s sent), answers {report['statuses']}")
            lines.append(f"| {backend} | {name} | {fired} | {missed} | {p50:.0f} | {p99:.0f} | {worst:.0f} | "
                         f"{traffic} |")
        return lines
    finally:
        stop_processes([admin, fake])
        asyncio.run(adrop_test_database(url))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command")
    flood = sub.add_parser("flood")
    flood.add_argument("--port", type=int, required=True)
    flood.add_argument("--clients", type=int, required=True)
    flood.add_argument("--seconds", type=float, required=True)
    parser.add_argument("--backend", nargs="+", default=["sqlite", "postgresql"],
                        choices=("sqlite", "postgresql", "mariadb"))
    parser.add_argument("--jobs", type=int, default=10)
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--warmup", type=float, default=5.0)
    parser.add_argument("--clients", type=int, default=4)
    args = parser.parse_args(argv)
    if args.command == "flood":
        asyncio.run(_flood(args.port, args.clients, args.seconds))
        return 0
    print(f"machine: {platform.node()}, {os.cpu_count()} CPUs, Python {platform.python_version()}, "
          f"load average {os.getloadavg()[0]:.2f}, {datetime.now(UTC):%Y-%m-%d %H:%M} UTC")
    print("| backend | window | fires | missed | p50 ms | p99 ms | max ms | callback traffic |")
    print("|---|---|---:|---:|---:|---:|---:|---|")
    for backend in args.backend:
        for line in run_backend(backend, args.jobs, args.seconds, args.warmup, args.clients):
            print(line, flush=True)
    print(f"load average after: {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
