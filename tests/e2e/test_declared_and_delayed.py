"""A real admin process and a real executor process (`jobring executor module:executor`):
the jobs the executor's code declares appear in the admin, and a delayed run asked for
through the API runs once at its instant, also when the admin restarts in between."""

from __future__ import annotations

import asyncio
import os
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest

from jobring.client import AsyncAdminClient
from tests.e2e.admin_nodes import TOKEN, AdminNode, free_port, kill, start_admin, stop

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(180)]

PASSWORD = "e2e-password-1234"  # what start_admin configures for the first admin
LIMIT_S = 60.0
T = TypeVar("T")

EXECUTOR_CODE = '''
from jobring import Executor, JobContext

executor = Executor(app_name="e2e-app")


@executor.job("nightly", cron="0 0 2 * * ?", timezone="Europe/Berlin", retries=2, desc="Nightly export")
def nightly(ctx: JobContext) -> None:
    ctx.log("nightly")


@executor.job("later")
def later(ctx: JobContext) -> None:
    ctx.log("later ran with %s", ctx.params)
'''


async def eventually(what: str, check: Callable[[], Awaitable[T | None]]) -> T:
    """Ask again every 100 ms (a state in another process, no event to wait on)."""
    deadline = time.monotonic() + LIMIT_S
    while True:
        result = await check()
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} not seen within {LIMIT_S} s")
        await asyncio.sleep(0.1)


async def start_executor(workdir: Path, admin: AdminNode) -> asyncio.subprocess.Process:
    (workdir / "e2e_jobs.py").write_text(EXECUTOR_CODE, encoding="utf-8")
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("JOBRING_")}
    with (workdir / "executor.log").open("wb") as log:
        return await asyncio.create_subprocess_exec(
            sys.executable, "-m", "jobring.cli", "executor", "e2e_jobs:executor",
            "--admin", admin.base_url + "/xxl-job-admin/", "--token", TOKEN, "--host", "127.0.0.1",
            "--port", str(port), "--address", f"http://127.0.0.1:{port}/", "--log-path",
            str(workdir / "logs"), cwd=workdir, env=env, stdout=log, stderr=log,
        )


async def test_declared_jobs_and_delayed_runs_end_to_end(tmp_path: Path) -> None:
    url = f"sqlite+aiosqlite:///{tmp_path / 'e2e.db'}"
    node = await start_admin(url, "first", tmp_path)
    executor: asyncio.subprocess.Process | None = None
    try:
        async with AsyncAdminClient(node.base_url) as admin:
            await admin.login("admin", PASSWORD)
            group = (await admin.groups.create("e2e-app", "E2E"))["id"]
            executor = await start_executor(tmp_path, node)

            async def declared() -> dict[str, Any] | None:
                jobs = (await admin.jobs.list(group=group)).items
                # (Created stopped, then started: wait for both.)
                running = [j for j in jobs if j["executor_handler"] == "nightly" and j["trigger_status"]]
                return running[0] if running else None

            nightly = await eventually("the declared job", declared)
            assert nightly["declared_by_executor"] is True and nightly["trigger_status"] == 1
            names = ("schedule_conf", "schedule_timezone", "executor_fail_retry_count", "job_desc", "author")
            shown = tuple(nightly[k] for k in names)
            assert shown == ("0 0 2 * * ?", "Europe/Berlin", 2, "Nightly export", "executor")
            await eventually("the executor online", lambda: _online(admin, group))

            job = await admin.jobs.create(
                {"job_group": group, "job_desc": "later", "executor_handler": "later"})
            asked = time.time() * 1000
            first = await admin.jobs.trigger_at(job["id"], delay=_ms(1500), params="first")
            assert first["state"] == "scheduled"
            assert [d["id"] for d in await admin.jobs.delayed(job["id"])] == [first["id"]]
            run = await eventually("the delayed run", lambda: _succeeded(admin, job["id"], "first"))
            assert run["trigger_type"] == "DELAYED" and run["planned_time"] == -first["id"]
            assert run["dispatch_time"] >= first["fire_at"] and run["dispatch_time"] - asked < 10_000
            assert await admin.jobs.delayed(job["id"]) == []

            # Asked for, then the admin stops before the instant: the new process fires it.
            second = await admin.jobs.trigger_at(job["id"], delay=_ms(4000), params="second")
        port = node.port
        assert await stop(node) == 0
        # Same address (the executor knows this one), another process.
        node = await start_admin(url, "second", tmp_path, port=port)
        async with AsyncAdminClient(node.base_url) as admin:
            await admin.login("admin", PASSWORD)
            await eventually("the run after the restart", lambda: _succeeded(admin, job["id"], "second"))
            await asyncio.sleep(1.0)  # a second fire would come within the poll period
            runs = (await admin.runs.list(job=job["id"])).items
            assert sorted(r["executor_param"] for r in runs) == ["first", "second"]
            assert {r["planned_time"] for r in runs} == {-first["id"], -second["id"]}
        assert await stop(node) == 0
    finally:
        if executor is not None and executor.returncode is None:
            executor.kill()
            await executor.wait()
        await kill(node)


def _ms(ms: int) -> Any:
    from datetime import timedelta

    return timedelta(milliseconds=ms)


async def _online(admin: AsyncAdminClient, group: int) -> bool:
    return bool((await admin.groups.get(group)).get("online"))


async def _succeeded(admin: AsyncAdminClient, job_id: int, param: str) -> dict[str, Any] | None:
    runs = (await admin.runs.list(job=job_id, status="success")).items
    return next((r for r in runs if r["executor_param"] == param), None)
