"""Operations end to end with real processes: an admin node (`jobring admin`) on PostgreSQL
behind a loopback TCP proxy the test controls, and the demo executor (`jobring executor`).

Shown: run states (fires recorded ahead are "scheduled" and hidden from the default list),
admin and executor metrics present and moving, /ready failing while the database is cut
off and recovering after, the executor's /ready and /status, and JSON log lines.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy.engine import make_url

from jobring.admin.store import Store
from jobring.admin.store.records import JobGroup
from tests.dbs import (
    BackendUnavailable,
    acreate_test_database,
    drop_test_database,
    must_fail_when_unavailable,
)
from tests.e2e.admin_nodes import TOKEN, add_manual_group, fix_rate, free_port, kill, now_ms, start_admin

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(240)]

WITHIN_S = 60.0


class DbProxy:
    """Forwards loopback TCP connections to the database server; ``cut()`` drops every
    connection and refuses new ones (the database is "stopped") until ``restore()``."""

    def __init__(self, target_host: str, target_port: int) -> None:
        self.target = (target_host, target_port)
        self.port = 0
        self.cut_off = False
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self._pipes: set[asyncio.Task[None]] = set()

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self.cut_off:
            writer.close()
            return
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.target)
        except OSError:
            writer.close()
            return
        self._writers.update((writer, up_writer))
        for src, dst in ((reader, up_writer), (up_reader, writer)):
            task = asyncio.create_task(self._pipe(src, dst))
            self._pipes.add(task)
            task.add_done_callback(self._pipes.discard)

    async def _pipe(self, src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
        try:
            while data := await src.read(65536):
                dst.write(data)
                await dst.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            dst.close()
            self._writers.discard(dst)

    def cut(self) -> None:
        self.cut_off = True
        for writer in list(self._writers):
            writer.transport.abort()
        self._writers.clear()

    def restore(self) -> None:
        self.cut_off = False

    async def stop(self) -> None:
        self.cut()
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
        for task in list(self._pipes):
            task.cancel()
        await asyncio.gather(*self._pipes, return_exceptions=True)


@pytest.fixture
async def pg_url() -> AsyncIterator[str]:
    try:
        url = await acreate_test_database("postgresql")
    except BackendUnavailable as exc:
        if must_fail_when_unavailable():
            pytest.fail(str(exc))
        pytest.skip(str(exc))
    try:
        yield url
    finally:
        await asyncio.to_thread(drop_test_database, url)


async def until(ask: Callable[[], Awaitable[Any]], done: Callable[[Any], bool], what: str) -> Any:
    """Ask every 100 ms until ``done`` (processes have no event to wait on); fail after a while."""
    deadline = time.monotonic() + WITHIN_S
    last: Any = None
    while time.monotonic() < deadline:
        with contextlib.suppress(httpx.HTTPError):
            last = await ask()
            if done(last):
                return last
        await asyncio.sleep(0.1)
    shown = repr(last)
    if isinstance(last, httpx.Response):
        lines = last.text.splitlines()
        shown = "\n".join(line for line in lines if "_bucket" not in line and "#" not in line)
    raise AssertionError(f"{what}: not reached in {WITHIN_S} s; last answer {shown}")


def samples(text: str) -> dict[str, float]:
    return {k: float(v) for k, v in (line.rsplit(" ", 1) for line in text.splitlines()
                                     if line and not line.startswith("#"))}


async def start_demo_executor(admin_url: str, workdir: Path) -> tuple[asyncio.subprocess.Process, int]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("JOBRING_")}
    env["JOBRING_LOG_FORMAT"] = "json"
    log = (workdir / "executor.log").open("wb")
    port = free_port()
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "jobring.demo", "--host", "127.0.0.1", "--port", str(port),
        "--address", f"http://127.0.0.1:{port}/",
        "--admin", admin_url + "/xxl-job-admin/", "--token", TOKEN, "--log-path", str(workdir / "exec-logs"),
        "--beat-interval", "30", stdout=asyncio.subprocess.PIPE, stderr=log, env=env,
    )
    log.close()
    assert proc.stdout is not None
    line = (await asyncio.wait_for(proc.stdout.readline(), 30)).decode()
    match = re.search(r"listening on 127\.0\.0\.1:(\d+)", line)
    assert match, line
    return proc, int(match.group(1))


async def test_states_metrics_ready_and_logs(pg_url: str, tmp_path: Path) -> None:
    direct = make_url(pg_url)
    proxy = DbProxy(direct.host or "127.0.0.1", direct.port or 5432)
    await proxy.start()
    proxied = direct.set(port=proxy.port).render_as_string(hide_password=False)
    env = {"JOBRING_LOG_FORMAT": "json", "JOBRING_READY_TIMEOUT": "1"}
    node = await start_admin(proxied, "ops-node", tmp_path, env=env)
    executor: asyncio.subprocess.Process | None = None
    store = await Store.open(pg_url, upgrade=False)
    try:
        demo = JobGroup(app_name="jobring-demo", title="demo")
        group = await store.groups.create(demo, datetime(2024, 1, 1))
        executor, exec_port = await start_demo_executor(node.base_url, tmp_path)
        exec_url = f"http://127.0.0.1:{exec_port}"
        dead = await add_manual_group(store, f"http://127.0.0.1:{free_port()}/")
        async with httpx.AsyncClient(timeout=10) as client:
            # The executor registers: ready, and its status says so (token needed).
            await until(lambda: client.get(exec_url + "/ready"), lambda r: r.status_code == 200,
                        "executor ready")
            assert (await client.get(exec_url + "/status")).status_code == 401
            status = (await client.get(exec_url + "/status", headers={"XXL-JOB-ACCESS-TOKEN": TOKEN})).json()
            assert status["registered"] is True and status["admin_reachable"] is True

            good = await store.jobs.create(fix_rate(group, now_ms() + 1_000, executor_handler="hello"))
            bad = await store.jobs.create(fix_rate(dead, now_ms() + 1_000, schedule_conf="2"))

            def moving(r: httpx.Response) -> bool:
                m = samples(r.text)
                return (m.get('jobring_admin_fires_total{outcome="fired"}', 0) >= 3
                        and m.get('jobring_admin_runs_ended_total{state="success"}', 0) >= 2
                        and m.get('jobring_admin_dispatch_errors_total{reason="unreachable"}', 0) >= 1)

            first = samples((await until(lambda: client.get(node.base_url + "/metrics"), moving,
                                         "admin metrics moving")).text)
            assert first['jobring_admin_held_jobs{node="ops-node"}'] == 2
            assert first["jobring_admin_fire_lateness_ms_count"] >= 3
            assert first["jobring_admin_dispatch_latency_ms_count"] >= 3
            assert first["jobring_admin_callbacks_received_total"] >= 2
            assert first['jobring_admin_db_statement_ms_count{operation="insert"}'] >= 1
            # A 1 s job may fire again within the same claim cycle: wait for both to move.
            await until(
                lambda: client.get(node.base_url + "/metrics"),
                lambda r: samples(r.text)['jobring_admin_fires_total{outcome="fired"}']
                > first['jobring_admin_fires_total{outcome="fired"}']
                and samples(r.text)["jobring_admin_schedule_cycles_total"]
                > first["jobring_admin_schedule_cycles_total"], "fires and cycle counters moving")
            executor_metrics = samples((await client.get(exec_url + "/metrics")).text)
            assert executor_metrics['jobring_executor_runs_total{outcome="success"}'] >= 2
            assert executor_metrics["jobring_executor_registered"] == 1

            # Run states through the API: fires recorded ahead are "scheduled", listed only on request.
            login = await client.post(node.base_url + "/api/v1/auth/login",
                                      json={"username": "admin", "password": "e2e-password-1234"})
            assert login.status_code == 200, login.text
            runs = node.base_url + "/api/v1/runs"
            listed = (await client.get(runs, params={"job_id": good, "limit": 500})).json()["items"]
            assert listed and all(r["state"] != "scheduled" for r in listed)
            assert any(r["state"] == "success" and r["duration_ms"] is not None for r in listed)
            ahead = await until(lambda: client.get(runs, params={"job_id": good, "state": "scheduled"}),
                                lambda r: r.json()["total"] >= 1, "a fire recorded ahead")
            assert all(r["state"] == "scheduled" and r["duration_ms"] is None for r in ahead.json()["items"])
            failed = (await client.get(runs, params={"job_id": bad, "state": "failed"})).json()
            assert failed["total"] >= 1

            # The database goes away: /ready says so within its timeout, then recovers.
            assert (await client.get(node.base_url + "/ready")).status_code == 200
            proxy.cut()
            down = await until(lambda: client.get(node.base_url + "/ready"), lambda r: r.status_code == 503,
                               "ready failing without the database")
            checks = down.json()["checks"]
            assert down.json()["ready"] is False and checks["database"]["ok"] is False
            assert (await client.get(node.base_url + "/health")).status_code == 200  # alive all the same
            proxy.restore()
            back = await until(lambda: client.get(node.base_url + "/ready"), lambda r: r.status_code == 200,
                               "ready again with the database back")
            assert all(check["ok"] for check in back.json()["checks"].values())
    finally:
        if executor is not None and executor.returncode is None:
            executor.kill()
            await executor.wait()
        await kill(node)
        await store.close()
        await proxy.stop()

    # JSON log lines: ISO 8601 instants; the failing dispatches name job, run, node and address.
    lines = [json.loads(line) for line in node.log_text().splitlines() if line.startswith("{")]
    assert lines and all(re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", r["ts"]) for r in lines)
    failures = [r for r in lines if r.get("job_id") == bad and "failed" in r["msg"]]
    assert failures, node.log_text()[-3000:]
    assert failures[0]["node"] == "ops-node" and failures[0]["run_id"] >= 1
    assert failures[0]["address"].startswith("http://127.0.0.1:")
    executor_lines = (tmp_path / "executor.log").read_text(encoding="utf-8").splitlines()
    executor_json = [json.loads(line) for line in executor_lines if line.startswith("{")]
    assert any(r["logger"].startswith("jobring") for r in executor_json)

