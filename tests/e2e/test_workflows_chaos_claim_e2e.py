"""A workflow survives the death of its admin inside the claim window (SQLite and PostgreSQL):
the driver holds a node attempt it claimed before sending its job run (its step recorded the
run with the attempt) (``JOBRING_TEST_PAUSE_AFTER_CLAIMS``, a test-only fault point) and is
SIGKILLed there; the survivor takes the attempt over once the claim is stale and runs it once
(tests/e2e/workflow_chaos_kit.py). The survivor's ``workflow_stale_claim_ms`` is short (7 s,
the default is 30 s) so the takeover comes within seconds; the driver keeps the default, so it
cannot take its own held claim back before it dies."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from jobring.admin.services.claim_fault import ENV as CLAIM_FAULT_ENV
from jobring.admin.services.claim_fault import PAUSED as CLAIM_FAULT_PAUSED
from jobring.admin.store import Store
from tests.e2e.admin_nodes import kill
from tests.e2e.waiting import eventually
from tests.e2e.workflow_chaos_kit import chaos_cluster, completed_once_each, database_of

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]

SURVIVOR_STALE_CLAIM_MS = "7000"  # above the executor's connect + read time limits (3 + 3 s)


@pytest.fixture(params=["sqlite", "postgresql"])
async def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[str]:
    async for url in database_of(request.param, tmp_path):
        yield url


async def test_a_node_claimed_by_the_killed_admin_and_never_recorded_runs_once(
    database_url: str, tmp_path: Path
) -> None:
    """SIGKILL inside the claim window: the driver holds its 20th claimed attempt between the
    claim and sending its job run (the test-only fault point), and dies there."""
    async with chaos_cluster(database_url, tmp_path, {CLAIM_FAULT_ENV: "20"},
                             {"JOBRING_WORKFLOW_STALE_CLAIM_MS": SURVIVOR_STALE_CLAIM_MS}) as cluster:
        async def held_attempt() -> int | None:
            found = re.search(re.escape(CLAIM_FAULT_PAUSED) + r" (\d+)", cluster.driver.log_text())
            return None if found is None else int(found.group(1))

        held = await eventually("the driver holding a claimed attempt", held_attempt)
        await kill(cluster.driver)
        await completed_once_each(cluster)
    # The held attempt ran once (completed_once_each), and only a takeover sent it: the driver
    # held it from its claim until it died. Its step recorded the run with the attempt, so the
    # survivor found it recorded and unconfirmed, asked the executor, and sent it under that id.
    store = await Store.open(database_url, upgrade=False)
    try:
        log_id = await store.workflows.log_of_node_run(held)
        assert log_id is not None
        entry = await store.logs.get(log_id)
    finally:
        await store.close()
    assert entry is not None and (entry.trigger_code, entry.admin_node) == (200, "driver"), entry
    assert f"run {log_id} sent again: code 200" in cluster.survivor.log_text()
