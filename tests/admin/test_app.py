"""The admin app in-process: lifespan wiring, /health, routes, the loop firing, clean stop;
and `jobring admin` refusing invalid settings."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import datetime
from pathlib import Path

import httpx
import pytest
from starlette.applications import Starlette

from jobring.admin.runtime.admin_runtime import AdminRuntime
from jobring.admin.runtime.app import create_app
from jobring.admin.services import callbacks as callbacks_module
from jobring.admin.services.settings import AdminSettings
from jobring.admin.store.records import JobGroup
from jobring.cli import main
from tests.e2e.admin_nodes import fix_rate, now_ms

TOKEN = "app-test-token-0123"


@pytest.fixture
def settings(tmp_path: Path) -> AdminSettings:
    return AdminSettings(database_url=f"sqlite+aiosqlite:///{tmp_path / 'admin.db'}", access_token=TOKEN,
                         admin_password="app-test-password", node_id="node-t")


@pytest.fixture
async def running(settings: AdminSettings) -> AsyncIterator[tuple[Starlette, httpx.AsyncClient]]:
    app = create_app(settings)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://admin") as client:
            yield app, client


async def test_health_reports_node_backend_and_version(running: tuple[Starlette, httpx.AsyncClient]) -> None:
    _, client = running
    response = await client.get("/health")
    assert response.status_code == 200
    body = response.json()
    assert body["status"] == "ok"
    assert body["node"] == "node-t" and body["backend"] == "sqlite"
    assert body["version"]


async def test_executor_api_is_served_at_root_and_base_path(
    running: tuple[Starlette, httpx.AsyncClient]
) -> None:
    _, client = running
    beat = {"registryGroup": "EXECUTOR", "registryKey": "demo", "registryValue": "http://127.0.0.1:9/"}
    for prefix in ("", "/xxl-job-admin"):
        refused = await client.post(prefix + "/api/registry", json=beat)
        assert refused.json()["code"] == 500  # no token
        headers = {"XXL-JOB-ACCESS-TOKEN": TOKEN}
        accepted = await client.post(prefix + "/api/registry", json=beat, headers=headers)
        assert accepted.json()["code"] == 200
    # The management API answers under /api/v1 (unauthenticated: 401, not 404).
    assert (await client.get("/api/v1/jobs")).status_code == 401


async def test_the_workflow_driver_takes_claims_over_after_the_set_delay(settings: AdminSettings) -> None:
    app = create_app(settings.model_copy(update={"workflow_stale_claim_ms": 7_000}))
    async with app.router.lifespan_context(app):
        runtime: AdminRuntime = app.state.runtime
        assert runtime.workflows is not None and runtime.workflows.fires.stale_ms == 7_000


async def test_no_task_outlives_the_lifespan(settings: AdminSettings) -> None:
    # A runner left behind after stop would hang the event loop's shutdown (a test's teardown).
    before = set(asyncio.all_tasks())
    app = create_app(settings)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://admin") as client:
            beat = {"registryGroup": "EXECUTOR", "registryKey": "demo", "registryValue": "http://127.0.0.1:9/"}
            accepted = await client.post("/api/registry", json=beat, headers={"XXL-JOB-ACCESS-TOKEN": TOKEN})
            assert accepted.json()["code"] == 200
    left = [task.get_coro() for task in asyncio.all_tasks() - before]
    assert left == []


async def test_child_fires_still_running_at_stop_do_not_outlive_it(
    settings: AdminSettings, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The callback service's background work (child fires, recovery alarms) uses the trigger
    # service, the alarms and the store: the stop waits for it briefly, then cancels it.
    monkeypatch.setattr(callbacks_module, "STOP_WAIT_S", 0.01)
    started = asyncio.Event()

    async def hanging() -> None:
        started.set()
        await asyncio.Event().wait()

    app = create_app(settings)
    async with app.router.lifespan_context(app):
        runtime: AdminRuntime = app.state.runtime
        runtime.callbacks._spawn(hanging())
        await started.wait()
        (task,) = runtime.callbacks._children_tasks.tasks
    await asyncio.wait({task}, timeout=5.0)
    assert task.cancelled()


async def test_the_loop_fires_and_stop_releases_leases(settings: AdminSettings) -> None:
    app = create_app(settings)
    async with app.router.lifespan_context(app):
        runtime: AdminRuntime = app.state.runtime
        store = runtime.store
        group_id = await store.groups.create(
            JobGroup(app_name="gone", title="gone", address_type=1, address_list="http://127.0.0.1:9/"),
            datetime(2024, 1, 1))
        first = now_ms() + 300
        job_id = await store.jobs.create(fix_rate(group_id, first))
        async with asyncio.timeout(20):
            while runtime.loop.stats.fired < 2:  # noqa: ASYNC110 - the loop has no event for this
                await asyncio.sleep(0.05)
    # Stopped: the in-flight fires were recorded and the lease given back.
    from jobring.admin.store import Store

    reopened = await Store.open(settings.database_url, upgrade=False)
    try:
        logs = await reopened.logs.for_job(job_id)
        planned = sorted(log.planned_time for log in logs if log.planned_time is not None)
        assert planned[:2] == [first, first + 1_000]
        # The executor is unreachable: recorded as a failed trigger, not lost.
        assert {log.trigger_code for log in logs} == {500}
        job = await reopened.jobs.get(job_id)
        assert job is not None and job.lease_owner is None
        assert job.trigger_next_time == planned[-1] + 1_000
    finally:
        await reopened.close()


@pytest.mark.parametrize("args, message", [
    (["--port", "0"], "port"),
    (["--database-url", "oracle://x/y"], "database_url"),
])
def test_invalid_settings_exit_2_with_a_clear_message(
    args: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["admin", *args]) == 2
    err = capsys.readouterr().err
    assert "invalid settings" in err and message in err


def test_invalid_timezone_from_the_environment_exits_2(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("JOBRING_TIMEZONE", "Mars/Olympus")
    assert main(["run"]) == 2
    assert "timezone" in capsys.readouterr().err
