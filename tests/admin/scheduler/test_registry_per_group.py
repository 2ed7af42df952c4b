"""Registry state is per (appname, address) and learned only from beats with that appname's
token; registered addresses are stored in canonical form (issue 19, item 1.2)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime

import httpx
import pytest
from starlette.applications import Starlette

from jobring.admin.api.executor_api import executor_api_routes
from jobring.admin.dispatch.client import ExecutorClient
from jobring.admin.monitors.monitors import RegistryService
from jobring.admin.services.callbacks import CallbackService
from jobring.admin.services.executor_tokens import ExecutorTokens
from jobring.admin.store import Store
from jobring.admin.store.records import JobGroup, JobInfo, NewLog
from jobring.admin.trigger.trigger import FireRequest, TriggerService
from jobring.core.addresses import address_key, check_executor_address
from jobring.core.clock import ManualClock
from jobring.core.enums import TriggerType
from tests.admin.api_harness import T0
from tests.admin.executor_double import ExecutorDouble

TOKEN_A = "token-of-group-a-0123456789abcdef"
TOKEN_B = "token-of-group-b-0123456789abcdef"
NOW = datetime(2026, 1, 1)
B_ADDRESS = "http://exec-b:9999/"


@dataclass
class Env:
    http: httpx.AsyncClient
    store: Store
    client: ExecutorClient
    trigger: TriggerService
    registry: RegistryService
    double: ExecutorDouble
    group_b: int

    async def post(self, path: str, body: object, token: str, app_header: str | None = None,
                   started_at: int | None = None) -> dict[str, object]:
        headers = {"XXL-JOB-ACCESS-TOKEN": token}
        if app_header is not None:
            headers["XXL-JOB-APPNAME"] = app_header
        if started_at is not None:
            headers["X-Jobring-Started-At"] = str(started_at)
        response = await self.http.post(path, content=json.dumps(body).encode(), headers=headers)
        answer: dict[str, object] = response.json()
        return answer


def _beat(app: str, address: str = B_ADDRESS) -> dict[str, str]:
    return {"registryGroup": "EXECUTOR", "registryKey": app, "registryValue": address}


@pytest.fixture
async def env(sqlite_store: Store) -> AsyncIterator[Env]:
    clock = ManualClock(T0)
    double = ExecutorDouble(["exec-b:9999"])
    client = ExecutorClient(access_token=None, connect=double.connect)
    trigger = TriggerService(sqlite_store, client, node_id="n1", clock=clock, admin_timezone="UTC",
                             group_cache_ms=0)
    callbacks = CallbackService(sqlite_store, trigger, clock)
    await sqlite_store.groups.create(JobGroup(app_name="app-a", title="A", access_token=TOKEN_A), NOW)
    group_b = await sqlite_store.groups.create(JobGroup(app_name="app-b", title="B", access_token=TOKEN_B),
                                               NOW)
    registry = RegistryService(sqlite_store, clock, trigger)
    tokens = ExecutorTokens(sqlite_store, None, clock)
    app = Starlette(routes=executor_api_routes(registry, callbacks, tokens))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://admin") as http:
        yield Env(http, sqlite_store, client, trigger, registry, double, group_b)
    await callbacks.close()
    await trigger.close()


async def _fire_b(env: Env) -> int:
    job_id = await env.store.jobs.create(JobInfo(job_group=env.group_b, job_desc="b", executor_handler="h",
                                                 executor_route_strategy="FIRST"))
    job = await env.store.jobs.get(job_id)
    assert job is not None
    return (await env.trigger.fire(FireRequest(job, TriggerType.MANUAL))).trigger_code


async def test_another_groups_token_cannot_take_or_switch_b_s_executor(env: Env) -> None:
    assert (await env.post("/api/registry", _beat("app-b"), TOKEN_B))["code"] == 200
    # A's token registers B's address under A's appname, speaking "3.5", then removes it.
    assert (await env.post("/api/registry", _beat("app-a"), TOKEN_A, app_header="app-a"))["code"] == 200
    assert env.client.dialect_of(B_ADDRESS, "app-b") == "2"
    assert (await env.post("/api/registryRemove", _beat("app-a"), TOKEN_A))["code"] == 200
    group = await env.store.groups.get(env.group_b)
    assert group is not None and group.routable_addresses == [B_ADDRESS]
    assert await _fire_b(env) == 200
    runs = env.double.runs(B_ADDRESS)
    assert len(runs) == 1 and "xxl-job-appname" not in runs[0].headers
    # B's own removal does take it out of B's routing.
    assert (await env.post("/api/registryRemove", _beat("app-b"), TOKEN_B))["code"] == 200
    assert await _fire_b(env) != 200


async def test_a_restart_reported_under_another_appname_leaves_b_s_runs_alone(env: Env) -> None:
    assert (await env.post("/api/registry", _beat("app-b"), TOKEN_B, started_at=T0 - 60_000))["code"] == 200
    job_id = await env.store.jobs.create(JobInfo(job_group=env.group_b, job_desc="b", executor_handler="h"))
    (run,) = await env.store.logs.insert_fires([NewLog(
        env.group_b, job_id, datetime.fromtimestamp((T0 - 30_000) / 1000, tz=UTC), trigger_code=200,
        executor_address=B_ADDRESS, dispatch_time=T0 - 30_000)])
    assert (await env.post("/api/registry", _beat("app-a"), TOKEN_A, started_at=T0))["code"] == 200
    due = env.registry.restarts_due(T0 + 60_000)
    assert ("app-a", B_ADDRESS, T0) in due
    assert await env.store.logs.running_on(B_ADDRESS, T0, app_name="app-a") == []
    assert [e.id for e in await env.store.logs.running_on(B_ADDRESS, T0, app_name="app-b")] == [run]


async def test_registered_addresses_are_stored_canonical(env: Env) -> None:
    for spelling in ("http://0x0a.0.0.7:9999/", "http://167772167:9999/", "HTTP://10.0.0.7:9999/"):
        assert (await env.post("/api/registry", _beat("app-b", spelling), TOKEN_B))["code"] == 200
    assert (await env.post("/api/registry", _beat("app-b", "http://EXEC-B:9999/"), TOKEN_B))["code"] == 200
    entries = await env.store.registry.entries("app-b")
    assert [e.registry_value for e in entries] == ["http://10.0.0.7:9999/", B_ADDRESS]


def test_an_address_is_disabled_in_every_spelling() -> None:
    group = JobGroup(id=1, app_name="x", address_list="http://0x7f.0.0.1:9999,http://10.0.0.8:9999/",
                     disabled_addresses="http://127.0.0.1:9999/")
    assert group.routable_addresses == ["http://10.0.0.8:9999/"]
    assert address_key("http://0177.0.0.1:80/") == address_key("HTTP://127.0.0.1") == "http://127.0.0.1"
    assert check_executor_address("http://[::ffff:7f00:1]:9999/") == "http://127.0.0.1:9999/"
    assert address_key("not an address") == "not an address"


async def test_disabling_by_one_spelling_disables_a_legacy_row_of_another(env: Env) -> None:
    await env.store.registry.beat("EXECUTOR", "app-b", "http://0x7f.0.0.1:9999/", NOW)  # stored raw before
    await env.store.groups.refresh_addresses({"app-b": ["http://0x7f.0.0.1:9999/"]}, NOW)
    assert await env.store.groups.set_address_disabled(env.group_b, "http://127.0.0.1:9999/", True, NOW)
    group = await env.store.groups.get(env.group_b)
    assert group is not None and group.routable_addresses == []
    await env.store.groups.refresh_addresses({"app-b": ["http://0x7f.0.0.1:9999/"]}, NOW)
    group = await env.store.groups.get(env.group_b)
    assert group is not None and group.addresses == []
