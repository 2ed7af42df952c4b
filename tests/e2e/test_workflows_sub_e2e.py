"""Sub-workflows and declared workflows with a real admin process and a real jobring executor
process: a parent's sub-workflow node runs the child workflow as a child run (linked both
ways), the parent goes on when the child has succeeded, and a stop of the parent stops the
child; a workflow the executor declares in code next to its jobs is created by the admin at
the executor's start, read-only, and runs."""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from jobring.client import AsyncAdminClient
from tests.e2e.admin_nodes import ADMIN_PASSWORD, TOKEN, AdminNode, free_port, kill, start_admin
from tests.e2e.waiting import eventually

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(180)]

APP = "sub-app"
# Each run appends "<param> start" and "<param> end" to order.log; "hang" runs until killed.
EXECUTOR_CODE = '''
import time
from pathlib import Path

from jobring import Executor, JobContext

executor = Executor(app_name="{app}")
ORDER = Path("order.log")


def _note(text: str) -> None:
    with ORDER.open("a", encoding="utf-8") as out:
        out.write(text + "\\n")


@executor.job("step")
def step(ctx: JobContext) -> None:
    _note(f"{{ctx.params}} start")
    time.sleep(0.2)
    _note(f"{{ctx.params}} end")


@executor.job("hang")
def hang(ctx: JobContext) -> None:
    _note(f"{{ctx.params}} start")
    for _ in range(1200):
        time.sleep(0.05)
    _note(f"{{ctx.params}} end")


executor.workflow("declared-flow", description="declared in code",
                  nodes=[{{"key": "one", "job": "step", "params": "d1"}},
                         {{"key": "two", "job": "step", "params": "d2"}}],
                  edges=[{{"from": "one", "to": "two"}}])
'''


class Env:
    def __init__(self, admin: AsyncAdminClient, home: Path, group: int) -> None:
        self.admin, self.home, self.group = admin, home, group

    def order(self) -> list[str]:
        path = self.home / "order.log"
        return path.read_text(encoding="utf-8").splitlines() if path.exists() else []

    async def job(self, handler: str) -> int:
        jobs = await self.admin.jobs.list(group=self.group, handler=handler, limit=100)
        found = [j for j in jobs.items if j["executor_handler"] == handler]
        if found:
            return int(found[0]["id"])
        made = await self.admin.jobs.create({"job_group": self.group, "job_desc": handler,
                                             "executor_handler": handler})
        return int(made["id"])

    async def workflow(self, name: str, nodes: list[dict[str, Any]], edges: list[dict[str, Any]]) -> int:
        made = await self.admin.workflows.create({"name": name, "job_group": self.group, "nodes": nodes,
                                                  "edges": edges})
        return int(made["id"])

    async def run_until(
        self, run_id: int, what: str, check: Callable[[dict[str, Any]], bool]
    ) -> dict[str, Any]:
        async def probe() -> dict[str, Any] | None:
            run = await self.admin.workflows.run(run_id)
            return run if check(run) else None

        return await eventually(f"workflow run {run_id}: {what}", probe)

    async def ended(self, run_id: int) -> dict[str, Any]:
        return await self.run_until(run_id, "ended", lambda r: r["state"] != "running")


@pytest.fixture
async def env(tmp_path: Path) -> AsyncIterator[Env]:
    node = await start_admin(f"sqlite+aiosqlite:///{tmp_path / 'e2e.db'}", "sub", tmp_path)
    executor: asyncio.subprocess.Process | None = None
    try:
        async with AsyncAdminClient(node.base_url) as admin:
            await admin.login("admin", ADMIN_PASSWORD)
            group = (await admin.groups.create(APP, "Sub"))["id"]
            home = tmp_path / "executor"
            executor = await _start_executor(home, node)

            async def online() -> bool | None:
                return True if (await admin.groups.get(group))["online"] else None

            await eventually("the executor online", online)
            yield Env(admin, home, group)
    finally:
        if executor is not None and executor.returncode is None:
            executor.kill()
            await executor.wait()
        await kill(node)


def _write_executor(home: Path) -> None:
    home.mkdir()
    (home / "sub_jobs.py").write_text(EXECUTOR_CODE.format(app=APP), encoding="utf-8")


async def _start_executor(home: Path, admin: AdminNode) -> asyncio.subprocess.Process:
    await asyncio.to_thread(_write_executor, home)
    port = free_port()
    environ = {k: v for k, v in os.environ.items() if not k.startswith("JOBRING_")}
    with (home / "executor.log").open("wb") as log:
        return await asyncio.create_subprocess_exec(
            sys.executable, "-m", "jobring.cli", "executor", "sub_jobs:executor",
            "--admin", admin.base_url + "/xxl-job-admin/", "--token", TOKEN, "--host", "127.0.0.1",
            "--port", str(port), "--address", f"http://127.0.0.1:{port}/", "--log-path", str(home / "logs"),
            cwd=home, env=environ, stdout=log, stderr=log,
        )


def states(run: dict[str, Any]) -> dict[str, str]:
    return {n["key"]: n["state"] for n in run["nodes"]}


async def test_a_sub_workflow_node_runs_the_child_and_the_parent_goes_on(env: Env) -> None:
    step = await env.job("step")
    child = await env.workflow("child", [{"key": "c1", "job_id": step, "params": "c1 {{ day }}"},
                                         {"key": "c2", "job_id": step, "params": "c2"}],
                               [{"from": "c1", "to": "c2"}])
    parent = await env.workflow("parent", [{"key": "p1", "job_id": step, "params": "p1"},
                                           {"key": "sub", "kind": "subworkflow", "workflow_id": child},
                                           {"key": "p2", "job_id": step, "params": "p2"}],
                                [{"from": "p1", "to": "sub"}, {"from": "sub", "to": "p2"}])
    run = await env.ended((await env.admin.workflows.trigger(parent, {"day": "d7"}))["workflow_run_id"])
    assert run["state"] == "success", run
    assert states(run) == {"p1": "success", "sub": "success", "p2": "success"}
    sub = run["nodes"][1]
    assert sub["workflow_id"] == child and sub["run_id"] is not None
    child_run = await env.admin.workflows.run(sub["run_id"])
    assert child_run["state"] == "success" and child_run["parent_run_id"] == run["id"], child_run
    assert child_run["workflow_id"] == child and child_run["context"]["day"] == "d7"
    assert env.order() == [f"{p} {e}" for p in ("p1", "c1 d7", "c2", "p2") for e in ("start", "end")]


async def test_stopping_the_parent_stops_the_child(env: Env) -> None:
    hang = await env.job("hang")
    child = await env.workflow("hanging child", [{"key": "h", "job_id": hang, "params": "H"}], [])
    sub = {"key": "sub", "kind": "subworkflow", "workflow_id": child}
    parent = await env.workflow("stopped parent", [sub], [])
    run_id = (await env.admin.workflows.trigger(parent))["workflow_run_id"]
    running = await env.run_until(run_id, "child started", lambda r: r["nodes"][0]["run_id"] is not None
                                  and "H start" in env.order())
    child_run_id = running["nodes"][0]["run_id"]
    stopped = await env.admin.workflows.stop(run_id, round=running["round"])
    assert stopped["state"] == "stopped"
    child_run = await env.ended(child_run_id)
    assert child_run["state"] == "stopped" and states(child_run) == {"h": "stopped"}, child_run
    assert "H end" not in env.order()


async def test_a_workflow_declared_in_code_is_created_and_runs(env: Env) -> None:
    async def declared() -> dict[str, Any] | None:
        page = await env.admin.workflows.list()
        found = [w for w in page.items if w["name"] == "declared-flow"]
        return found[0] if found else None

    flow = await eventually("the declared workflow", declared)
    assert flow["managed_by"] == "code" and flow["description"] == "declared in code"
    step = await env.job("step")
    assert [n["job_id"] for n in flow["nodes"]] == [step, step]
    run = await env.ended((await env.admin.workflows.trigger(flow["id"]))["workflow_run_id"])
    assert run["state"] == "success", run
    assert env.order() == ["d1 start", "d1 end", "d2 start", "d2 end"]
