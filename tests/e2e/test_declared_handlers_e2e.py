"""A real admin process and two real executor processes in one group, one with handler ``a``
only, one with ``b`` only (issue 25 item 23): FIRST routing sends every run of a ``b`` job to
the second executor although the first one is first in the group, and a job of a handler no
executor has fails naming it."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path
from typing import Any

import pytest

from jobring.client import AsyncAdminClient
from tests.e2e.admin_nodes import ADMIN_PASSWORD, TOKEN, AdminNode, free_port, kill, start_admin
from tests.e2e.test_declared_and_delayed import eventually

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(180)]

APP = "route-app"
EXECUTOR_CODE = '''
from jobring import Executor, JobContext

executor = Executor(app_name="{app}")


@executor.job("{handler}")
def run(ctx: JobContext) -> None:
    ctx.log("ran {handler}")
'''


async def start_executor(
    workdir: Path, admin: AdminNode, handler: str, port: int
) -> asyncio.subprocess.Process:
    home = workdir / f"executor-{handler}"
    home.mkdir()
    (home / f"jobs_{handler}.py").write_text(EXECUTOR_CODE.format(app=APP, handler=handler), encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.startswith("JOBRING_")}
    with (home / "executor.log").open("wb") as log:
        return await asyncio.create_subprocess_exec(
            sys.executable, "-m", "jobring.cli", "executor", f"jobs_{handler}:executor",
            "--admin", admin.base_url + "/xxl-job-admin/", "--token", TOKEN, "--host", "127.0.0.1",
            "--port", str(port), "--address", f"http://127.0.0.1:{port}/", "--log-path", str(home / "logs"),
            cwd=home, env=env, stdout=log, stderr=log,
        )


def two_ports() -> tuple[int, int]:
    """Two free ports whose addresses sort in this order (the group lists them sorted)."""
    first = free_port()
    second = free_port()
    while second == first:
        second = free_port()
    ordered = sorted((first, second), key=lambda p: f"http://127.0.0.1:{p}/")
    return ordered[0], ordered[1]


async def test_first_routing_sends_a_handler_only_to_the_executor_that_has_it(tmp_path: Path) -> None:
    node = await start_admin(f"sqlite+aiosqlite:///{tmp_path / 'e2e.db'}", "first", tmp_path)
    executors: list[asyncio.subprocess.Process] = []
    try:
        async with AsyncAdminClient(node.base_url) as admin:
            await admin.login("admin", ADMIN_PASSWORD)
            group = (await admin.groups.create(APP, "Routing"))["id"]
            port_a, port_b = two_ports()
            address_a, address_b = f"http://127.0.0.1:{port_a}/", f"http://127.0.0.1:{port_b}/"
            executors += [await start_executor(tmp_path, node, "a", port_a),
                          await start_executor(tmp_path, node, "b", port_b)]

            async def both_online() -> dict[str, Any] | None:
                shown = await admin.groups.get(group)
                return shown if len(shown["online"]) == 2 and len(shown["addresses"]) == 2 else None

            shown = await eventually("both executors online", both_online)
            assert shown["addresses"] == [address_a, address_b]  # FIRST alone would pick a's
            assert [(o["address"], o["handlers"]) for o in shown["online"]] == [
                (address_a, ["a"]), (address_b, ["b"])]

            async def run_of(handler: str, times: int) -> list[str]:
                fields = {"job_group": group, "job_desc": handler, "executor_handler": handler,
                          "executor_route_strategy": "FIRST"}
                job = await admin.jobs.create(fields)
                ids: list[int] = []
                for _ in range(times):
                    fired = await admin.jobs.trigger(job["id"])
                    assert fired["trigger_code"] == 200, fired["trigger_msg"]
                    ids += fired["log_ids"]
                where: list[str] = []
                for run_id in ids:
                    async def done(run_id: int = run_id) -> dict[str, Any] | None:
                        run = await admin.runs.get(run_id)
                        return run if run["handle_code"] != 0 else None

                    run = await eventually(f"run {run_id}", done)
                    # An executor without the handler would have refused the run ("not found").
                    assert run["handle_code"] == 200, run
                    where.append(run["executor_address"])
                return where

            assert await run_of("b", 5) == [address_b] * 5
            assert await run_of("a", 2) == [address_a] * 2

            job = await admin.jobs.create({"job_group": group, "job_desc": "c", "executor_handler": "c"})
            fired = await admin.jobs.trigger(job["id"])
            assert fired["trigger_code"] == 500
            assert f"no online executor of group {APP} declares handler 'c'" in fired["trigger_msg"]
    finally:
        for proc in executors:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
        await kill(node)
