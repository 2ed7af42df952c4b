"""Latency of the management API calls the web console makes, on a large PostgreSQL store.

Run from the repository root:
    .venv/bin/python bench/console_api.py [--jobs 100000] [--runs 1000000] [--repeats 30] [--keep-db]

A throwaway PostgreSQL database (tests/dbs.py) is migrated and bulk-loaded with COPY: ``--jobs``
jobs over 50 groups and ``--runs`` runs spread over the 30 days before a fixed instant (about
5 % failed, a few killed/lost/timed out, 1 % still running, the rest succeeded, some recorded
ahead as scheduled), with the report table filled as the admin's minute task would. Then each
console call (console/src/views: RunsView, JobsView, DashboardView, stores/groups) is asked
``--repeats`` times in process (httpx over ASGI against the management app) as an admin and as
a viewer limited to two groups; p50/p95 in ms are printed as a Markdown table.
"""

from __future__ import annotations

import argparse
import asyncio
import platform
import random
import statistics
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import asyncpg  # noqa: E402
import httpx  # noqa: E402
from sqlalchemy.engine import make_url  # noqa: E402
from tests.dbs import acreate_test_database, adrop_test_database  # noqa: E402

from jobring.admin.api.management import ManagementServices, management_app  # noqa: E402
from jobring.admin.security.roles import Role  # noqa: E402
from jobring.admin.security.tokens import generate_api_token, hash_api_token  # noqa: E402
from jobring.admin.services.bootstrap import Secrets  # noqa: E402
from jobring.admin.services.settings import AdminSettings  # noqa: E402
from jobring.admin.store import Store  # noqa: E402
from jobring.core.clock import ManualClock  # noqa: E402
from jobring.core.runstate import KILLED_BY_USER, LOST_RESULT_MSG  # noqa: E402

NOW = datetime(2026, 1, 31, 12, 0, 0)
NOW_MS = int(NOW.replace(tzinfo=UTC).timestamp() * 1000)
GROUPS = 50
DAYS = 30
DEEP = "the next_cursor of /runs?limit=20&offset=9980"
WORDS = ("billing", "report", "sync", "cleanup", "export", "import", "mail", "index", "backup", "audit")


def _job_rows(jobs: int, group_ids: list[int], rng: random.Random) -> list[tuple[Any, ...]]:
    rows = []
    for i in range(jobs):
        desc = f"{rng.choice(WORDS)} {rng.choice(WORDS)} task {i}"
        rows.append((group_ids[i % len(group_ids)], desc, "CRON", "0 * * * * ?", "demoJobHandler",
                     "BEAN", 1 if i % 3 else 0, NOW, NOW, "bench"))
    return rows


def _run_row(i: int, jobs: list[tuple[int, int]], rng: random.Random) -> tuple[Any, ...]:
    job_id, group = jobs[rng.randrange(len(jobs))]
    age_ms = rng.randrange(DAYS * 86_400_000)
    trigger_ms = NOW_MS - age_ms
    trigger_time = datetime.fromtimestamp(trigger_ms / 1000, tz=UTC).replace(tzinfo=None)
    roll = rng.random()
    trigger_code, handle_code, trigger_msg, handle_msg = 200, 200, "dispatched", "ok"
    planned: int | None = trigger_ms if i % 2 else None
    if roll < 0.045:
        handle_code, handle_msg = 500, "boom"
    elif roll < 0.05:
        trigger_code, handle_code, trigger_msg, handle_msg = 500, 0, "executor refused", None
    elif roll < 0.052:
        handle_code, handle_msg = 500, KILLED_BY_USER + " (admin)"
    elif roll < 0.053:
        handle_code, handle_msg = 500, LOST_RESULT_MSG
    elif roll < 0.055:
        handle_code, handle_msg = 502, "timed out"
    elif age_ms < 3_600_000 and roll < 0.2:
        handle_code, handle_msg = 0, None  # running
    handle_time = None if handle_code == 0 else trigger_time + timedelta(seconds=2)
    return (group, job_id, "10.0.0.1:9999", "demoJobHandler", "", 0, trigger_time, trigger_code,
            trigger_msg, handle_time, handle_code, handle_msg, 0, "CRON", planned,
            None if planned is None else planned + 3, "bench-node",
            None if handle_time is None else trigger_ms + 2000, 1)


RUN_COLUMNS = ["job_group", "job_id", "executor_address", "executor_handler", "executor_param",
               "executor_fail_retry_count", "trigger_time", "trigger_code", "trigger_msg", "handle_time",
               "handle_code", "handle_msg", "alarm_status", "trigger_type", "planned_time", "dispatch_time",
               "admin_node", "handle_time_ms", "attempt"]


async def load(url: str, jobs: int, runs: int) -> tuple[list[int], list[tuple[int, int]]]:
    parsed = make_url(url)
    conn = await asyncpg.connect(host=parsed.host, port=parsed.port, user=parsed.username,
                                 password=parsed.password, database=parsed.database)
    rng = random.Random(7)
    try:
        group_ids = [
            await conn.fetchval(
                "INSERT INTO xxl_job_group (app_name, title, address_type, update_time)"
                " VALUES ($1, $2, 0, $3) RETURNING id", f"app-{g}", f"Group {g}", NOW)
            for g in range(GROUPS)
        ]
        await conn.copy_records_to_table(
            "xxl_job_info", records=_job_rows(jobs, group_ids, rng),
            columns=["job_group", "job_desc", "schedule_type", "schedule_conf", "executor_handler",
                     "glue_type", "trigger_status", "add_time", "update_time", "author"])
        job_list = [(r["id"], r["job_group"])
                    for r in await conn.fetch("SELECT id, job_group FROM xxl_job_info ORDER BY id")]
        batch = 100_000
        for start in range(0, runs, batch):
            rows = [_run_row(i, job_list, rng) for i in range(start, min(runs, start + batch))]
            await conn.copy_records_to_table("xxl_job_log", records=rows, columns=RUN_COLUMNS)
        # Fires recorded ahead for the next minutes: "scheduled" runs.
        ahead = [(g, j, None, "demoJobHandler", "", 0,
                  datetime.fromtimestamp((NOW_MS + k * 1000) / 1000, tz=UTC).replace(tzinfo=None),
                  0, None, None, 0, None, 0, "CRON", NOW_MS + k * 1000 + 7, None, "bench-node", None, 1)
                 for k, (j, g) in enumerate(job_list[:200])]
        await conn.copy_records_to_table("xxl_job_log", records=ahead, columns=RUN_COLUMNS)
        # The report table as the admin's minute task keeps it.
        await conn.execute("""
            INSERT INTO xxl_job_log_report (trigger_day, running_count, suc_count, fail_count, update_time)
            SELECT date_trunc('day', trigger_time),
                   count(*) FILTER (WHERE handle_code = 0 AND trigger_code IN (0, 200)),
                   count(*) FILTER (WHERE handle_code = 200),
                   count(*) FILTER (WHERE NOT (handle_code = 0 AND trigger_code IN (0, 200))
                                    AND handle_code <> 200), now()
            FROM xxl_job_log GROUP BY 1""")
        await conn.execute("ANALYZE")
        return group_ids, job_list
    finally:
        await conn.close()


async def _token(store: Store, name: str, role: Role, groups: list[int]) -> str:
    user_id = await store.users.create(username=name, role=int(role), password_hash=None,
                                       permission=",".join(map(str, groups)) or None, glue_permission=False)
    token = generate_api_token()
    await store.tokens.create(user_id, "bench", hash_api_token(token), NOW)
    return token


def _calls(group_ids: list[int], job_list: list[tuple[int, int]]) -> list[tuple[str, str, dict[str, Any]]]:
    job_id = job_list[len(job_list) // 2][0]
    day_ms = 86_400_000
    return [
        ("admin", "/runs", {"limit": 20}),
        ("admin", "/runs", {"limit": 20, "state": "failed"}),
        ("admin", "/runs", {"limit": 20, "status": "fail"}),
        ("admin", "/runs", {"limit": 20, "offset": 10_000}),
        ("admin", "/runs", {"limit": 20, "cursor": DEEP}),  # the console's "next" 500 pages in
        ("admin", "/runs", {"limit": 20, "job_id": job_id}),
        ("admin", "/runs", {"limit": 20, "job_group": group_ids[3]}),
        ("admin", "/runs", {"limit": 20, "trigger_from": NOW_MS - 2 * day_ms, "trigger_to": NOW_MS - day_ms}),
        ("viewer", "/runs", {"limit": 20}),
        ("viewer", "/runs", {"limit": 20, "state": "failed"}),
        ("admin", "/jobs", {"limit": 20}),
        ("admin", "/jobs", {"limit": 500}),
        ("admin", "/jobs", {"limit": 20, "desc": "backup export"}),
        ("admin", "/jobs", {"limit": 20, "desc": "task 99999"}),  # one match
        ("admin", "/jobs", {"limit": 20, "desc": "no such job"}),
        ("admin", "/jobs", {"limit": 20, "job_group": group_ids[5]}),
        ("viewer", "/jobs", {"limit": 20}),
        ("admin", "/groups", {"limit": 500}),
        ("admin", "/dashboard", {}),
        ("viewer", "/dashboard", {}),
    ]


async def measure(url: str, group_ids: list[int], job_list: list[tuple[int, int]],
                  repeats: int) -> list[tuple[str, float, float, str]]:
    store = await Store.open(url, upgrade=False)
    suffix = random.randrange(10**9)
    try:
        tokens = {"admin": await _token(store, f"bench-admin-{suffix}", Role.ADMIN, []),
                  "viewer": await _token(store, f"bench-viewer-{suffix}", Role.VIEWER, group_ids[:2])}
        services = ManagementServices(
            store=store, settings=AdminSettings(), clock=ManualClock(NOW_MS),
            secrets=Secrets(access_token=None, session_secret="bench-session-secret"),
        )
        app = management_app(services)
        results = []
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://bench/") as client:
            for who, path, params in _calls(group_ids, job_list):
                headers = {"Authorization": f"Bearer {tokens[who]}"}
                if params.get("cursor") == DEEP:
                    deep = await client.get(path, params={"limit": 20, "offset": 9_980}, headers=headers)
                    params = {**params, "cursor": deep.json().get("next_cursor")}
                times = []
                note = ""
                for k in range(repeats + 2):
                    start = time.perf_counter()
                    answer = await client.get(path, params=params, headers=headers)
                    elapsed = (time.perf_counter() - start) * 1000
                    if answer.status_code != 200:
                        raise SystemExit(f"{path} {params}: {answer.status_code} {answer.text[:300]}")
                    if k >= 2:  # two warm-up calls
                        times.append(elapsed)
                    body = answer.json()
                    if "total" in body:
                        estimated = not body.get("total_exact", True)
                        note = f"total={body['total']}" + (" (estimated)" if estimated else "")
                query = "&".join(f"{k}={v}" for k, v in params.items())
                label = f"{who} GET {path}" + (f"?{query}" if query else "")
                times.sort()
                p95 = times[min(len(times) - 1, round(0.95 * (len(times) - 1)))]
                results.append((label, statistics.median(times), p95, note))
                print(f"{label}: p50 {results[-1][1]:.1f} ms, p95 {p95:.1f} ms {note}", file=sys.stderr)
        return results
    finally:
        await store.close()


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=1_000_000)
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--keep-db", action="store_true", help="keep the database (its URL is printed)")
    parser.add_argument("--url", help="reuse a database loaded by an earlier --keep-db run (migrated again)")
    args = parser.parse_args()
    url = args.url or await acreate_test_database("postgresql")
    try:
        start = time.perf_counter()
        store = await Store.open(url)  # migrates
        await store.close()
        if args.url:
            parsed = make_url(url)
            conn = await asyncpg.connect(host=parsed.host, port=parsed.port, user=parsed.username,
                                         database=parsed.database)
            try:
                await conn.execute("ANALYZE")
                group_ids = [r["id"] for r in await conn.fetch("SELECT id FROM xxl_job_group ORDER BY id")]
                job_list = [(r["id"], r["job_group"]) for r in
                            await conn.fetch("SELECT id, job_group FROM xxl_job_info ORDER BY id")]
            finally:
                await conn.close()
        else:
            group_ids, job_list = await load(url, args.jobs, args.runs)
        print(f"loaded/migrated in {time.perf_counter() - start:.0f} s", file=sys.stderr)
        results = await measure(url, group_ids, job_list, args.repeats)
        print(f"\n{len(job_list):,} jobs, {args.runs:,} runs, PostgreSQL; {platform.python_version()}; "
              f"{args.repeats} calls each\n")
        print("| call | p50 ms | p95 ms | note |\n|---|---:|---:|---|")
        for label, p50, p95, note in results:
            print(f"| `{label}` | {p50:.1f} | {p95:.1f} | {note} |")
    finally:
        if args.keep_db:
            print(f"\ndatabase kept: {url}", file=sys.stderr)
        else:
            await adrop_test_database(url)


if __name__ == "__main__":
    asyncio.run(main())
