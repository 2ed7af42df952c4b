"""Workflows with a real admin process and a real jobring executor process: a diamond
A -> (B, C) -> D with the all-success join runs each node once, in order; a node failing under
the stop rule fails the run, and retry-from-failed completes it without re-running what had
succeeded; a handler's ctx.workflow.set reaches the next node's params and ctx.workflow.get."""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, TypeVar

import pytest

from jobring.client import AsyncAdminClient
from tests.e2e.admin_nodes import ADMIN_PASSWORD, TOKEN, AdminNode, free_port, kill, start_admin
from tests.e2e.waiting import eventually

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(180)]

T = TypeVar("T")
APP = "flow-app"
# Each run appends "<param> start" and "<param> end" to order.log; "flaky" fails until the
# file flaky.ok exists (the test creates it before retrying).
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


@executor.job("flaky")
def flaky(ctx: JobContext) -> None:
    _note(f"{{ctx.params}} start")
    if not Path("flaky.ok").exists():
        _note(f"{{ctx.params}} failed")
        ctx.fail("flaky: not yet")
        return
    _note(f"{{ctx.params}} end")


@executor.job("produce")
def produce(ctx: JobContext) -> None:
    assert ctx.workflow is not None
    ctx.workflow.set("rows", 1234)


@executor.job("consume")
def consume(ctx: JobContext) -> None:
    _note(f"consume params={{ctx.params}} rows={{ctx.workflow.get('rows')!r}}")
'''


class Flow:
    def __init__(self, admin: AsyncAdminClient, home: Path, group: int) -> None:
        self.admin, self.home, self.group = admin, home, group

    def order(self) -> list[str]:
        path = self.home / "order.log"
        return path.read_text(encoding="utf-8").splitlines() if path.exists() else []

    async def job(self, handler: str) -> int:
        job = await self.admin.jobs.create({"job_group": self.group, "job_desc": handler,
                                            "executor_handler": handler})
        return int(job["id"])

    async def ended(self, run_id: int) -> dict[str, Any]:
        async def done() -> dict[str, Any] | None:
            run = await self.admin.workflows.run(run_id)
            return run if run["state"] != "running" else None

        return await eventually(f"workflow run {run_id} to end", done)


@pytest.fixture
async def flow(tmp_path: Path) -> AsyncIterator[Flow]:
    node = await start_admin(f"sqlite+aiosqlite:///{tmp_path / 'e2e.db'}", "flow", tmp_path)
    executor: asyncio.subprocess.Process | None = None
    try:
        async with AsyncAdminClient(node.base_url) as admin:
            await admin.login("admin", ADMIN_PASSWORD)
            group = (await admin.groups.create(APP, "Flow"))["id"]
            home = tmp_path / "executor"
            executor = await _start_executor(home, node)

            async def online() -> bool | None:
                return True if (await admin.groups.get(group))["online"] else None

            await eventually("the executor online", online)
            yield Flow(admin, home, group)
    finally:
        if executor is not None and executor.returncode is None:
            executor.kill()
            await executor.wait()
        await kill(node)


def _write_executor(home: Path) -> None:
    home.mkdir()
    (home / "flow_jobs.py").write_text(EXECUTOR_CODE.format(app=APP), encoding="utf-8")


async def _start_executor(home: Path, admin: AdminNode) -> asyncio.subprocess.Process:
    _write_executor(home)
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("JOBRING_")}
    with (home / "executor.log").open("wb") as log:
        return await asyncio.create_subprocess_exec(
            sys.executable, "-m", "jobring.cli", "executor", "flow_jobs:executor",
            "--admin", admin.base_url + "/xxl-job-admin/", "--token", TOKEN, "--host", "127.0.0.1",
            "--port", str(port), "--address", f"http://127.0.0.1:{port}/", "--log-path", str(home / "logs"),
            cwd=home, env=env, stdout=log, stderr=log,
        )


async def test_a_diamond_runs_each_node_once_in_order(flow: Flow) -> None:
    step = await flow.job("step")
    nodes = [{"key": k, "job_id": step, "params": k} for k in "ABCD"]
    edges = [{"from": "A", "to": "B"}, {"from": "A", "to": "C"}, {"from": "B", "to": "D"},
             {"from": "C", "to": "D"}]
    created = await flow.admin.workflows.create({"name": "diamond", "job_group": flow.group,
                                                 "nodes": nodes, "edges": edges})
    started = await flow.admin.workflows.trigger(created["id"])
    run = await flow.ended(started["workflow_run_id"])
    assert run["state"] == "success", run["nodes"]
    assert [(n["key"], n["state"], n["attempt"]) for n in run["nodes"]] == [(k, "success", 1) for k in "ABCD"]
    order = flow.order()
    assert sorted(order) == sorted(f"{k} {e}" for k in "ABCD" for e in ("start", "end")), order  # once each
    at = {line: i for i, line in enumerate(order)}
    assert at["A end"] < at["B start"] and at["A end"] < at["C start"]
    assert at["B end"] < at["D start"] and at["C end"] < at["D start"]
    # Each node's run is a run of the run log, triggered by the workflow.
    for node in run["nodes"]:
        job_run = await flow.admin.runs.get(node["run_id"])
        assert (job_run["trigger_type"], job_run["executor_param"], job_run["handle_code"]) == (
            "WORKFLOW", node["key"], 200)
    listed = await flow.admin.workflows.runs(workflow=created["id"])
    assert [r["id"] for r in listed.items] == [started["workflow_run_id"]]


async def test_a_failed_node_stops_the_run_and_retry_from_failed_completes_it(flow: Flow) -> None:
    step, flaky = await flow.job("step"), await flow.job("flaky")
    nodes = [{"key": "A", "job_id": step, "params": "A"}, {"key": "F", "job_id": flaky, "params": "F"},
             {"key": "S", "job_id": step, "params": "S"}, {"key": "D", "job_id": step, "params": "D"}]
    edges = [{"from": "A", "to": "F"}, {"from": "A", "to": "S"}, {"from": "F", "to": "D"},
             {"from": "S", "to": "D"}]
    created = await flow.admin.workflows.create({"name": "flaky", "job_group": flow.group,
                                                 "nodes": nodes, "edges": edges})
    started = await flow.admin.workflows.trigger(created["id"])
    run = await flow.ended(started["workflow_run_id"])
    states = {n["key"]: n["state"] for n in run["nodes"]}
    assert run["state"] == "failed" and states["A"] == "success" and states["F"] == "failed", run
    assert states["D"] in ("stopped", "waiting") and "D start" not in flow.order()
    (flow.home / "flaky.ok").write_text("", encoding="utf-8")
    retried = await flow.admin.workflows.retry(run["id"], round=run["round"])
    assert retried["state"] == "running"
    run = await flow.ended(run["id"])
    assert run["state"] == "success", run["nodes"]
    attempts = {n["key"]: n["attempt"] for n in run["nodes"]}
    assert attempts["A"] == 1 and attempts["F"] == 2 and attempts["D"] == 1
    order = flow.order()
    assert order.count("A start") == 1 and order.count("F start") == 2 and order.count("D start") == 1, order
    # The same repair again is refused: the round moved on.
    with pytest.raises(Exception, match="409|round|success"):
        await flow.admin.workflows.retry(run["id"], round=0)


async def test_a_handler_passes_data_to_the_next_node_through_the_context(flow: Flow) -> None:
    produce, consume = await flow.job("produce"), await flow.job("consume")
    nodes = [{"key": "A", "job_id": produce}, {"key": "B", "job_id": consume, "params": "n={{ rows }}"}]
    created = await flow.admin.workflows.create({"name": "data", "job_group": flow.group, "nodes": nodes,
                                                 "edges": [{"from": "A", "to": "B"}]})
    started = await flow.admin.workflows.trigger(created["id"], params={"day": "20261201"})
    run = await flow.ended(started["workflow_run_id"])
    assert run["state"] == "success", run["nodes"]
    assert run["context"] == {"day": "20261201", "rows": 1234}
    assert flow.order() == ["consume params=n=1234 rows=1234"]
