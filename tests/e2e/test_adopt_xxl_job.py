"""Adopting a real XXL-JOB 2.4.2 database end to end (MariaDB): XXL-JOB's own schema file,
rows written as XXL-JOB writes them (local Asia/Shanghai times, MD5 passwords), a 60-day
history with runs still marked running and failures not yet alarmed; then `jobring db adopt`,
a real `jobring admin` process, the old password, and a run on a real pyxxl executor."""

from __future__ import annotations

import asyncio
import hashlib
import os
import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import httpx
import pytest
from sqlalchemy import text

from jobring.admin.store import create_engine
from jobring.admin.store.migrate import VERSION_TABLE
from tests.dbs import BackendUnavailable, create_test_database, drop_test_database, must_fail_when_unavailable
from tests.e2e.admin_nodes import TOKEN, free_port, start_admin, stop
from tests.e2e.pyxxl_harness import EXECUTOR_SCRIPT

pytestmark = [pytest.mark.e2e, pytest.mark.db, pytest.mark.timeout(240)]

# XXL-JOB 2.4.2's own schema, kept in tests/fixtures; JOBRING_XXL_JOB_SCHEMA names another copy.
SCHEMA = Path(
    os.environ.get(
        "JOBRING_XXL_JOB_SCHEMA",
        Path(__file__).resolve().parents[1] / "fixtures" / "xxl-job-2.4.2" / "tables_xxl_job_2.4.2.sql",
    )
)
ZONE = ZoneInfo("Asia/Shanghai")
OLD_PASSWORD = "xxl-old-pass-7"
NEW_PASSWORD = "a brand new pass 42"
DAYS = 60
RUNS_PER_DAY = 20
STILL_RUNNING = 90
UNALARMED_FAILURES = 10


def _md5(text_: str) -> str:
    return hashlib.md5(text_.encode(), usedforsecurity=False).hexdigest()


def _local(instant: datetime) -> str:
    return instant.astimezone(ZONE).strftime("%Y-%m-%d %H:%M:%S")


def next_local(hour: int, minute: int, after: datetime) -> int:
    """Epoch ms of the next hh:mm in Shanghai after ``after`` (what XXL-JOB's CronExpression gives)."""
    local = after.astimezone(ZONE)
    candidate = local.replace(hour=hour, minute=minute, second=0, microsecond=0)
    if candidate <= local:
        candidate += timedelta(days=1)
    return int(candidate.timestamp() * 1000)


@pytest.fixture
def mariadb_url(tmp_path: Path) -> Iterator[str]:
    if not SCHEMA.exists():
        pytest.fail(f"XXL-JOB's schema file is not at {SCHEMA} (JOBRING_XXL_JOB_SCHEMA)")
    try:
        url = create_test_database("mariadb", tmp_path)
    except BackendUnavailable as exc:
        if must_fail_when_unavailable():
            pytest.fail(str(exc))
        pytest.skip(str(exc))
    try:
        yield url
    finally:
        drop_test_database(url)


def _schema_statements() -> list[str]:
    body = "\n".join(
        line for line in SCHEMA.read_text(encoding="utf-8").splitlines() if not line.startswith(("#", "--"))
    )
    return [s.strip() for s in body.split(";") if s.strip()]


async def _load_xxl_job(url: str, executor_port: int, now: datetime) -> dict[str, Any]:
    engine = create_engine(url)
    try:
        async with engine.begin() as conn:
            for statement in _schema_statements():
                await conn.execute(text(statement))
            await conn.execute(
                text("UPDATE xxl_job_user SET password = :pw WHERE username = 'admin'"),
                {"pw": _md5(OLD_PASSWORD)},
            )
            await conn.execute(
                text(
                    "INSERT INTO xxl_job_group (id, app_name, title, address_type, address_list, update_time)"
                    " VALUES (2, 'pyxxl-app', 'pyxxl', 1, :addr, :t)"
                ),
                {"addr": f"http://127.0.0.1:{executor_port}", "t": _local(now)},
            )
            await conn.execute(
                text(
                    "INSERT INTO xxl_job_user (username, password, role, permission)"
                    " VALUES ('ops', :pw, 0, '2')"
                ),
                {"pw": _md5("ops-old-pass-1")},
            )
            jobs = [
                # id, group, desc, conf, handler, status, next, retries
                (2, 2, "daily report", "0 30 9 * * ?", "demo", 1, next_local(9, 30, now), 3),
                (3, 2, "nightly cleanup", "0 0 2 * * ?", "demo", 0, 0, 2),
                (4, 1, "legacy handler", "0 0 3 * * ?", "demoJobHandler ", 0, 0, 0),
            ]
            for job_id, group, desc, conf, handler, status, next_ms, retries in jobs:
                await conn.execute(
                    text(
                        "INSERT INTO xxl_job_info (id, job_group, job_desc, add_time, update_time, author,"
                        " alarm_email, schedule_type, schedule_conf, misfire_strategy,"
                        " executor_route_strategy,"
                        " executor_handler, executor_param, executor_block_strategy, executor_timeout,"
                        " executor_fail_retry_count, glue_type, glue_source, glue_remark, glue_updatetime,"
                        " child_jobid, trigger_status, trigger_last_time, trigger_next_time) VALUES (:id, :g,"
                        " :d, :t, :t, 'XXL', 'ops-team', 'CRON', :conf, 'DO_NOTHING', 'FIRST', :h, '',"
                        " 'SERIAL_EXECUTION', 0, :r, 'BEAN', '', '', :t, '99', :s, 0, :n)"
                    ),
                    {
                        "id": job_id,
                        "g": group,
                        "d": desc,
                        "t": _local(now - timedelta(days=90)),
                        "conf": conf,
                        "h": handler,
                        "r": retries,
                        "s": status,
                        "n": next_ms,
                    },
                )
            rows = []
            total = DAYS * RUNS_PER_DAY
            for i in range(total):
                at = now - timedelta(days=DAYS) + timedelta(minutes=i * (DAYS * 24 * 60 // total))
                if i < STILL_RUNNING:
                    codes = (200, 0, 0)  # "running" forever: the executor died long ago
                elif i < STILL_RUNNING + UNALARMED_FAILURES:
                    codes = (200, 500, 0)  # failed, never alarmed
                else:
                    codes = (200, 200, 1 if i % 2 else 0)
                rows.append(
                    {
                        "g": 2,
                        "j": 2 + i % 2,
                        "t": _local(at),
                        "tc": codes[0],
                        "hc": codes[1],
                        "h": _local(at + timedelta(seconds=3)) if codes[1] else None,
                        "a": codes[2],
                    }
                )
            await conn.execute(
                text(
                    "INSERT INTO xxl_job_log (job_group, job_id, executor_address, executor_handler,"
                    " executor_fail_retry_count, trigger_time, trigger_code, handle_time, handle_code,"
                    " alarm_status) VALUES (:g, :j, 'http://10.0.0.9:9999/', 'demo', 3, :t, :tc, :h, :hc, :a)"
                ),
                rows,
            )
        return {
            "logs": len(rows),
            "oldest": _local(now - timedelta(days=DAYS)),
        }
    finally:
        await engine.dispose()


async def _cli(*args: str) -> tuple[int, str]:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("JOBRING_")}
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        "import sys; from jobring.cli import main; sys.exit(main())",
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
        env=environ,
    )
    out, _ = await proc.communicate()
    assert proc.returncode is not None
    return proc.returncode, out.decode()


async def _db(url: str, sql: str) -> list[Any]:
    engine = create_engine(url)
    try:
        async with engine.connect() as conn:
            return list((await conn.execute(text(sql))).all())
    finally:
        await engine.dispose()


async def _wait_for(what: str, check: Any, within_s: float = 60.0) -> None:
    deadline = asyncio.get_running_loop().time() + within_s
    while not await check():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.2)


async def test_adopting_xxl_job_2_4_2_keeps_everything_and_fires_nothing_old(
    mariadb_url: str, tmp_path: Path
) -> None:
    now = datetime.now(UTC)
    now_ms = int(now.timestamp() * 1000)
    executor_port = free_port()
    loaded = await _load_xxl_job(mariadb_url, executor_port, now)

    code, out = await _cli(
        "db", "adopt", "--database-url", mariadb_url, "--dry-run", "--executor-token", "default_token"
    )
    assert code == 0, out
    assert "XXL-JOB schema: 2.3-2.5" in out and f"run logs: {loaded['logs']}" in out
    assert f"{STILL_RUNNING} still 'running'" in out and "users: 2 (1 admin; 2 with only" in out
    assert "refuses it" in out and "JOBRING_ACCESS_TOKEN" in out and "jobring groups token" in out
    assert "nothing was changed" in out
    tables = {r[0] for r in await _db(mariadb_url, "SHOW TABLES")}
    assert VERSION_TABLE not in tables and "jobring_setting" not in tables

    code, out = await _cli(
        "db", "adopt", "--database-url", mariadb_url, "--database-timezone", "Asia/Shanghai"
    )
    assert code == 0, out
    code, again = await _cli(
        "db", "adopt", "--database-url", mariadb_url, "--database-timezone", "Asia/Shanghai"
    )
    assert code == 0, again  # idempotent
    code, other = await _cli("db", "adopt", "--database-url", mariadb_url, "--database-timezone", "UTC")
    assert code == 2 and "refusing UTC" in other

    # The Java admin fired once more after the adoption: jobring will not schedule beside it.
    engine = create_engine(mariadb_url)
    try:
        async with engine.begin() as conn:
            await conn.execute(
                text(
                    "INSERT INTO xxl_job_log (job_group, job_id, trigger_time, trigger_code, handle_code)"
                    " VALUES (2, 2, :t, 200, 200)"
                ),
                {"t": _local(datetime.now(UTC))},
            )
    finally:
        await engine.dispose()
    code, refused = await _cli("admin", "--database-url", mariadb_url, "--port", str(free_port()))
    assert code == 1 and "XXL-JOB's admin seems to be scheduling" in refused and "--takeover" in refused
    loaded["logs"] += 1

    node = await start_admin(
        mariadb_url, "adopt-n1", tmp_path, "--takeover", env={"JOBRING_ADMIN_PASSWORD": ""}
    )
    executor = _start_pyxxl(tmp_path, executor_port, node.base_url)
    try:
        async with httpx.AsyncClient(base_url=node.base_url + "/api/v1", timeout=30) as http:
            wrong = await http.post("/auth/login", json={"username": "admin", "password": "nope-nope-1"})
            assert wrong.status_code == 401
            login = await http.post("/auth/login", json={"username": "admin", "password": OLD_PASSWORD})
            assert login.status_code == 200, login.text
            assert login.json()["user"]["must_change_password"] is True
            headers = {"X-CSRF-Token": login.json()["csrf_token"]}
            assert (await http.get("/jobs")).status_code == 403  # the change comes first
            changed = await http.post(
                "/users/me/password",
                headers=headers,
                json={"current_password": OLD_PASSWORD, "new_password": NEW_PASSWORD},
            )
            assert changed.status_code == 200, changed.text
            headers = {"X-CSRF-Token": changed.json()["csrf_token"]}
            [[md5]] = await _db(mariadb_url, "SELECT password FROM xxl_job_user WHERE username = 'admin'")
            assert md5 == ""

            jobs = {j["id"]: j for j in (await http.get("/jobs", params={"limit": 100})).json()["items"]}
            assert set(jobs) == {1, 2, 3, 4}
            assert jobs[2]["trigger_next_time"] == next_local(9, 30, now)
            # jobring computes XXL-JOB's fire instants: crons in the old zone by default.
            preview = await http.post(
                "/schedules/preview",
                headers=headers,
                json={"schedule_type": "CRON", "schedule_conf": "0 30 9 * * ?", "count": 3, "after": now_ms},
            )
            assert preview.status_code == 200, preview.text
            assert preview.json()["timezone"] == "Asia/Shanghai"
            first = next_local(9, 30, now)
            assert preview.json()["times"] == [first + day * 86_400_000 for day in range(3)]
            started = await http.post("/jobs/3/start", headers=headers)
            assert started.status_code == 200, started.text
            assert started.json()["trigger_next_time"] == next_local(2, 0, datetime.now(UTC))

            patched = await http.patch("/jobs/4", headers=headers, json={"job_desc": "legacy, renamed"})
            assert patched.status_code == 200, patched.text
            assert patched.json()["executor_handler"] == "demoJobHandler "
            assert any("executor_handler" in w for w in patched.json()["warnings"])

            async def retention_checked() -> bool:
                return "log retention held" in node.log_text()

            await _wait_for("the retention check", retention_checked)
            [[count, running, unalarmed, retries, oldest]] = await _db(
                mariadb_url,
                (
                    "SELECT count(*), sum(trigger_code = 200 AND handle_code = 0),"
                    " sum(handle_code = 500 AND alarm_status = 0), sum(trigger_type = 'RETRY'),"
                    " min(trigger_time) FROM xxl_job_log"
                ),
            )
            assert (count, running, unalarmed, retries or 0) == (
                loaded["logs"],
                STILL_RUNNING,
                UNALARMED_FAILURES,
                0,
            )
            assert oldest.strftime("%Y-%m-%d %H:%M:%S") == loaded["oldest"]  # stored times untouched

            # The adopted group lists the executor's address by hand: the run is sent there
            # whether or not the executor is up, so the test waits for it to listen (on a
            # loaded machine its start can outlast the checks above).
            async def listening() -> bool:
                try:
                    _, writer = await asyncio.open_connection("127.0.0.1", executor_port)
                except OSError:
                    return False
                writer.close()
                return True

            await _wait_for("the pyxxl executor to listen", listening)
            fired = await http.post("/jobs/2/trigger", headers=headers, json={})
            assert fired.status_code == 200, fired.text
            assert fired.json()["trigger_code"] == 200, fired.json()["trigger_msg"]
            [log_id] = fired.json()["run_ids"]

            async def succeeded() -> bool:
                run = (await http.get(f"/runs/{log_id}")).json()
                return bool(run.get("handle_code") == 200)

            await _wait_for("the run on the pyxxl executor", succeeded)
            [[trigger_time]] = await _db(
                mariadb_url, f"SELECT trigger_time FROM xxl_job_log WHERE id = {log_id}"
            )
            local_now = datetime.now(ZONE).replace(tzinfo=None)
            assert abs((local_now - trigger_time).total_seconds()) < 120  # written in Shanghai time
        assert await stop(node) == 0
    finally:
        if node.proc.returncode is None:
            await stop(node)
        executor.terminate()
        executor.wait(10)


def _start_pyxxl(tmp: Path, port: int, admin_url: str) -> subprocess.Popen[bytes]:
    """A real pyxxl executor on ``port`` (the address its adopted manual group lists)."""
    script = tmp / "pyxxl_executor.py"
    script.write_text(EXECUTOR_SCRIPT)
    log_dir = tmp / "pyxxl"
    log_dir.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.upper().startswith(("ACCESS_TOKEN", "EXECUTOR_"))}
    with (log_dir / "stderr.txt").open("wb") as stderr:  # the child keeps its own descriptor
        return subprocess.Popen(
            [
                sys.executable,
                str(script),
                f"{admin_url}/xxl-job-admin/api/",
                str(port),
                TOKEN,
                "pyxxl-app",
                str(log_dir),
            ],
            stdout=subprocess.DEVNULL,
            stderr=stderr,
            env=env,
            cwd=log_dir,
        )
