"""A workflow survives the death of the admin driving it: two admin processes on one database
(SQLite and PostgreSQL), a real jobring executor that calls back the first admin while it
lives, a 50-node graph (chains with a fan-in on every layer) of short jobs. The admin that
triggered the run and receives its callbacks is SIGKILLed mid-run; the survivor finishes
the run, and the executor's own record shows every node ran exactly once. A variant kills it
inside the claim window: the driver holds a node attempt it claimed before recording its job
run (``JOBRING_TEST_PAUSE_AFTER_CLAIMS``, a test-only fault point) and is killed there; the
survivor takes the attempt over and runs it once."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from jobring.admin.services.claim_fault import ENV as CLAIM_FAULT_ENV
from jobring.admin.services.claim_fault import PAUSED as CLAIM_FAULT_PAUSED
from jobring.client import AsyncAdminClient
from tests.e2e.admin_nodes import ADMIN_PASSWORD, AdminNode, kill, start_admin
from tests.e2e.databases import server_database
from tests.e2e.sqlite_kit import database  # noqa: F401  (a fixture)
from tests.e2e.waiting import eventually
from tests.e2e.workflow_kit import start_executor, stop_executor, wait_online

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]

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


@pytest.fixture(params=["sqlite", "postgresql"])
async def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[str]:
    if request.param == "sqlite":
        yield f"sqlite+aiosqlite:///{tmp_path / 'chaos.db'}"
        return
    async for url in server_database(request.param, tmp_path):
        yield url


def _done(home: Path) -> list[tuple[str, int]]:
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


@asynccontextmanager
async def _cluster(database_url: str, tmp_path: Path, driver_env: dict[str, str] | None = None,
                   ) -> AsyncIterator[Cluster]:
    driver = await start_admin(database_url, "driver", tmp_path, env=driver_env)
    survivor: AdminNode | None = None
    executor: asyncio.subprocess.Process | None = None
    home = tmp_path / "executor"
    try:
        survivor = await start_admin(database_url, "survivor", tmp_path)
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
            yield Cluster(driver, other, home, run_id)
    finally:
        await stop_executor(executor)
        await kill(driver)
        if survivor is not None:
            await kill(survivor)


async def _completed_once_each(cluster: Cluster) -> dict[str, Any]:
    """The run as the survivor ends it: a success, every node run once and exactly once."""

    async def ended() -> dict[str, Any] | None:
        run = await cluster.other.workflows.run(cluster.run_id)
        return run if run["state"] != "running" else None

    # A node the killed admin had claimed and not reported fired is taken over 30 s after its
    # claim; the rest within the sweep's seconds.
    run = await eventually("the run to end on the survivor", ended, limit_s=120)
    assert run["state"] == "success", run
    assert {(n["state"], n["attempt"]) for n in run["nodes"]} == {("success", 1)}, run["nodes"]
    ran = _done(cluster.home)
    counts = Counter(key for key, _ in ran)
    assert {k for k, c in counts.items() if c != 1} == set(), sorted(ran)
    assert set(counts) == {n["key"] for n in run["nodes"]} and len(counts) == 50
    # What the executor ran is what the run records, node by node.
    assert dict(ran) == {n["key"]: n["run_id"] for n in run["nodes"]}
    return run


@pytest.mark.parametrize("kill_after", [12, 30])
async def test_the_run_completes_each_node_once_when_its_admin_is_killed(
    database_url: str, tmp_path: Path, kill_after: int
) -> None:
    async with _cluster(database_url, tmp_path) as cluster:
        async def far_enough() -> bool | None:
            return True if len(_done(cluster.home)) >= kill_after else None

        await eventually(f"{kill_after} nodes run", far_enough)
        await kill(cluster.driver)  # SIGKILL: mid-run, whatever it was doing
        await _completed_once_each(cluster)


async def test_a_node_claimed_by_the_killed_admin_and_never_recorded_runs_once(
    database_url: str, tmp_path: Path
) -> None:
    """SIGKILL inside the claim window: the driver holds its 20th claimed attempt between the
    claim and recording its job run (the test-only fault point), and dies there."""
    async with _cluster(database_url, tmp_path, {CLAIM_FAULT_ENV: "20"}) as cluster:
        async def holding() -> bool | None:
            return True if CLAIM_FAULT_PAUSED in cluster.driver.log_text() else None

        await eventually("the driver holding a claimed attempt", holding)
        during = await cluster.other.workflows.run(cluster.run_id)
        # Claimed (its node running) and never dispatched: no job run of it anywhere.
        held = {n["key"] for n in during["nodes"] if n["state"] == "running" and n["run_id"] is None}
        assert during["state"] == "running" and held, during["nodes"]
        assert not held & {key for key, _ in _done(cluster.home)}
        await kill(cluster.driver)
        run = await _completed_once_each(cluster)
        assert all(n["run_id"] is not None for n in run["nodes"] if n["key"] in held)
