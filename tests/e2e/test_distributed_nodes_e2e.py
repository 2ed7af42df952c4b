"""An admin node SIGKILLed mid-map, with two admin processes on one PostgreSQL database and
executors that know both: the other node completes the run (once the dead node is no longer
alive it asks the executors which of its running sub-tasks they hold, takes those over and
dispatches the others again), each sub-task runs exactly once and succeeds, and the reduce
runs exactly once."""

from __future__ import annotations

import signal
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from jobring.client import AsyncAdminClient
from tests.e2e.admin_nodes import ADMIN_PASSWORD
from tests.e2e.databases import server_database
from tests.e2e.mapred_kit import Cluster, cluster_of, eventually

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]


@pytest.fixture
async def server_url(tmp_path: Path) -> AsyncIterator[str]:
    async for url in server_database("postgresql", tmp_path):
        yield url


async def test_an_admin_killed_mid_map_the_other_completes_the_run(server_url: str, tmp_path: Path) -> None:
    async for cluster in cluster_of(tmp_path, 3, url=server_url, admins=2):
        (cluster.home / "slow").touch()  # each sub-task takes 0.3 s: the map lasts seconds
        job = await cluster.job("count_words")
        lines = [f"w{i} x" for i in range(60)]
        run_id = await cluster.trigger(job, "|".join(lines))  # through the first node

        async def some_ran(cluster: Cluster = cluster) -> bool | None:
            return True if sum(x.startswith("map ") for x in cluster.ran()) >= 6 else None

        await eventually("sub-tasks running", some_ran)
        victim, survivor = cluster.nodes
        victim.proc.send_signal(signal.SIGKILL)
        await victim.proc.wait()
        async with AsyncAdminClient(survivor.base_url) as admin:
            await admin.login("admin", ADMIN_PASSWORD)

            async def ended(run_id: int = run_id) -> dict[str, Any] | None:
                run = await admin.runs.get(run_id)
                return run if run["state"] not in ("dispatching", "running", "scheduled") else None

            run = await eventually("the surviving node to end the run", ended, 150)
            assert run["state"] == "success", run
            progress = (await admin.runs.subtasks(run_id))["progress"]
            assert (progress["succeeded"], progress["failed"], progress["result"]) == (60, 0, 120)
        assert cluster.ran().count("reduce") == 1
        ran = sorted(x.split()[1] for x in cluster.ran() if x.startswith("map "))
        assert ran == sorted(f"r/0.{i}" for i in range(60))  # none twice: held ones were not resent
