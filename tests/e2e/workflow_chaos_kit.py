"""A workflow run driven by an admin that is SIGKILLed: two admin processes on one database,
a real jobring executor that calls back the first while it lives, a 50-node graph (chains
with a fan-in on every layer) of short jobs, and the checks that the survivor ends the run
with every node run exactly once. Used by tests/e2e/test_workflows_chaos_e2e.py and
tests/e2e/test_workflows_chaos_claim_e2e.py (two files, so that parallel workers share them)."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from jobring.client import AsyncAdminClient
from tests.e2e.admin_nodes import ADMIN_PASSWORD, AdminNode, kill, start_admin
from tests.e2e.databases import server_database
from tests.e2e.waiting import eventually
from tests.e2e.workflow_kit import start_executor, stop_executor, wait_online

APP = "chaos-flow"
LAYERS, WIDTH = 8, 6  # a root, 8 layers of 6, an end: 50 nodes
# Each run appends "<node key> <run id>" to done.log when it ends.
EXECUTOR_CODE = '''
import time
from pathlib import Path

from jobring import Executor, JobContext

executor = Executor(app_name="{app}")


@executor.job("node")
def node(ctx: JobContext) -> None:
    time.sleep(0.15)
    with Path("done.log").open("a", encoding="utf-8") as out:
        out.write(f"{{ctx.params}} {{ctx.log_id}}\\n")
'''


def graph(job_id: int, group: int) -> dict[str, Any]:
    """Chains L<i>_<j> -> L<i+1>_<j>, and L<i+1>_0 joining the whole layer i."""
    keys = ["start"] + [f"L{i}_{j}" for i in range(LAYERS) for j in range(WIDTH)] + ["end"]
    edges = [{"from": "start", "to": f"L0_{j}"} for j in range(WIDTH)]
    for i in range(1, LAYERS):
        edges += [{"from": f"L{i - 1}_{j}", "to": f"L{i}_{j}"} for j in range(WIDTH)]
        edges += [{"from": f"L{i - 1}_{j}", "to": f"L{i}_0"} for j in range(1, WIDTH)]
    edges += [{"from": f"L{LAYERS - 1}_{j}", "to": "end"} for j in range(WIDTH)]
    nodes = [{"key": k, "job_id": job_id, "params": k} for k in keys]
    return {"name": "chaos", "job_group": group, "nodes": nodes, "edges": edges}


def done_log(home: Path) -> list[tuple[str, int]]:
    path = home / "done.log"
    if not path.exists():
        return []
    lines = path.read_text(encoding="utf-8").splitlines()
    return [(key, int(run)) for key, run in (line.split() for line in lines if line.count(" ") == 1)]


@dataclass
class Cluster:
    """Two admins on one database, the executor calling back the first, the 50-node run
    started on it."""

    driver: AdminNode
    other: AsyncAdminClient
    home: Path
    run_id: int
    survivor: AdminNode


@asynccontextmanager
async def chaos_cluster(database_url: str, tmp_path: Path, driver_env: dict[str, str] | None = None,
                        survivor_env: dict[str, str] | None = None) -> AsyncIterator[Cluster]:
    driver = await start_admin(database_url, "driver", tmp_path, env=driver_env)
    survivor: AdminNode | None = None
    executor: asyncio.subprocess.Process | None = None
    home = tmp_path / "executor"
    try:
        survivor = await start_admin(database_url, "survivor", tmp_path, env=survivor_env)
        async with AsyncAdminClient(driver.base_url) as admin, AsyncAdminClient(survivor.base_url) as other:
            await admin.login("admin", ADMIN_PASSWORD)
            await other.login("admin", ADMIN_PASSWORD)
            group = (await admin.groups.create(APP, "Chaos"))["id"]
            code = EXECUTOR_CODE.format(app=APP)
            executor = await start_executor(home, [driver, survivor], "chaos_jobs", code)
            await wait_online(admin, group)
            job = await admin.jobs.create({"job_group": group, "job_desc": "node",
                                           "executor_handler": "node"})
            created = await admin.workflows.create(graph(int(job["id"]), group))
            run_id = (await admin.workflows.trigger(created["id"]))["workflow_run_id"]
            yield Cluster(driver, other, home, run_id, survivor)
    finally:
        await stop_executor(executor)
        await kill(driver)
        if survivor is not None:
            await kill(survivor)


async def completed_once_each(cluster: Cluster) -> dict[str, Any]:
    """The run as the survivor ends it: a success, every node run once and exactly once."""

    async def ended() -> dict[str, Any] | None:
        run = await cluster.other.workflows.run(cluster.run_id)
        return run if run["state"] != "running" else None

    # A node the killed admin had claimed and not reported fired is taken over once its claim
    # is stale (the survivor's workflow_stale_claim_ms); the rest within the sweep's seconds.
    run = await eventually("the run to end on the survivor", ended, limit_s=120)
    assert run["state"] == "success", run
    assert {(n["state"], n["attempt"]) for n in run["nodes"]} == {("success", 1)}, run["nodes"]
    ran = done_log(cluster.home)
    counts = Counter(key for key, _ in ran)
    assert {k for k, c in counts.items() if c != 1} == set(), sorted(ran)
    assert set(counts) == {n["key"] for n in run["nodes"]} and len(counts) == 50
    # What the executor ran is what the run records, node by node.
    assert dict(ran) == {n["key"]: n["run_id"] for n in run["nodes"]}
    return run


async def database_of(kind: str, tmp_path: Path) -> AsyncIterator[str]:
    """A new database of ``kind`` (sqlite, postgresql) for one chaos test."""
    if kind == "sqlite":
        yield f"sqlite+aiosqlite:///{tmp_path / 'chaos.db'}"
        return
    async for url in server_database(kind, tmp_path):
        yield url
