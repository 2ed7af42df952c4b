"""A workflow survives the death of its admin inside the claim window (SQLite and PostgreSQL):
the driver holds a node attempt it claimed before recording its job run
(``JOBRING_TEST_PAUSE_AFTER_CLAIMS``, a test-only fault point) and is SIGKILLed there; the
survivor takes the attempt over and runs it once (tests/e2e/workflow_chaos_kit.py)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from jobring.admin.services.claim_fault import ENV as CLAIM_FAULT_ENV
from jobring.admin.services.claim_fault import PAUSED as CLAIM_FAULT_PAUSED
from tests.e2e.admin_nodes import kill
from tests.e2e.waiting import eventually
from tests.e2e.workflow_chaos_kit import chaos_cluster, completed_once_each, database_of, done_log

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]


@pytest.fixture(params=["sqlite", "postgresql"])
async def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[str]:
    async for url in database_of(request.param, tmp_path):
        yield url


async def test_a_node_claimed_by_the_killed_admin_and_never_recorded_runs_once(
    database_url: str, tmp_path: Path
) -> None:
    """SIGKILL inside the claim window: the driver holds its 20th claimed attempt between the
    claim and recording its job run (the test-only fault point), and dies there."""
    async with chaos_cluster(database_url, tmp_path, {CLAIM_FAULT_ENV: "20"}) as cluster:
        async def holding() -> bool | None:
            return True if CLAIM_FAULT_PAUSED in cluster.driver.log_text() else None

        await eventually("the driver holding a claimed attempt", holding)
        during = await cluster.other.workflows.run(cluster.run_id)
        # Claimed (its node running) and never dispatched: no job run of it anywhere.
        held = {n["key"] for n in during["nodes"] if n["state"] == "running" and n["run_id"] is None}
        assert during["state"] == "running" and held, during["nodes"]
        assert not held & {key for key, _ in done_log(cluster.home)}
        await kill(cluster.driver)
        run = await completed_once_each(cluster)
        assert all(n["run_id"] is not None for n in run["nodes"] if n["key"] in held)
