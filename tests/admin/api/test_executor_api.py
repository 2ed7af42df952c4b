from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest
from starlette.applications import Starlette
from starlette.routing import Mount

from jobring.admin.api.executor_api import executor_api_routes
from jobring.admin.dispatch.client import ExecutorClient
from jobring.admin.monitors.monitors import RegistryService
from jobring.admin.services.callbacks import CallbackService
from jobring.admin.store import Store
from jobring.admin.store.records import JobGroup, NewLog
from jobring.admin.trigger.trigger import TriggerService
from jobring.core.clock import ManualClock
from jobring.core.enums import AddressType
from tests.admin.executor_double import ExecutorDouble

T0 = 1_790_000_000_000
TOKEN = "t0k"
FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "xxl-job-2.4.1"


@dataclass
class Api:
    http: httpx.AsyncClient
    store: Store
    clock: ManualClock
    callbacks: CallbackService

    async def post(self, path: str, body: object, token: str | None = TOKEN) -> httpx.Response:
        headers = {"Content-Type": "application/json;charset=UTF-8"}
        if token is not None:
            headers["XXL-JOB-ACCESS-TOKEN"] = token
        content = body if isinstance(body, bytes) else json.dumps(body).encode()
        return await self.http.post(path, content=content, headers=headers)


@pytest.fixture
async def api(sqlite_store: Store) -> AsyncIterator[Api]:
    clock = ManualClock(T0)
    client = ExecutorClient(access_token=TOKEN, connect=ExecutorDouble(["e1:9999"]).connect)
    trigger = TriggerService(sqlite_store, client, node_id="n1", clock=clock,
                             admin_timezone="UTC")
    callbacks = CallbackService(sqlite_store, trigger, clock)
    routes = executor_api_routes(RegistryService(sqlite_store, clock), callbacks, TOKEN)
    app = Starlette(routes=[Mount("/xxl-job-admin", routes=routes), *routes])
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://admin") as http:
        yield Api(http, sqlite_store, clock, callbacks)
    await callbacks.close()
    await trigger.close()


REGISTRY = {"registryGroup": "EXECUTOR", "registryKey": "demo-app", "registryValue": "http://127.0.0.1:19996/"}


@pytest.mark.parametrize("prefix", ["", "/xxl-job-admin"])
async def test_wrong_token_is_refused_with_reference_bytes(api: Api, prefix: str) -> None:
    for token in ("bad", None):
        response = await api.post(f"{prefix}/api/registry", REGISTRY, token=token)
        assert response.status_code == 200
        assert response.content == b'{"code":500,"msg":"The access token is wrong."}'
    assert await api.store.registry.entries("demo-app") == []


async def test_wrong_method_and_unknown_path(api: Api) -> None:
    response = await api.http.get("/xxl-job-admin/api/registry")
    assert response.content == b'{"code":500,"msg":"invalid request, HttpMethod not support."}'
    response = await api.post("/xxl-job-admin/api/nothing", {})
    assert response.content == b'{"code":500,"msg":"invalid request, uri-mapping(nothing) not found."}'


@pytest.mark.parametrize(
    "body",
    [
        {"registryGroup": "EXECUTOR", "registryKey": "demo-app"},
        {"registryGroup": "", "registryKey": "demo-app", "registryValue": "http://x/"},
        {"registryGroup": "EXECUTOR", "registryKey": "  ", "registryValue": "http://x/"},
        {"registryGroup": "EXECUTOR", "registryKey": "k" * 256, "registryValue": "http://x/"},
        {"registryGroup": "EXECUTOR", "registryKey": "demo-app", "registryValue": "http://x/" + "a" * 250},
        {},
    ],
)
async def test_bad_registry_params_are_illegal_arguments(api: Api, body: dict[str, str]) -> None:
    for path in ("/api/registry", "/api/registryRemove"):
        response = await api.post(path, body)
        assert response.content == b'{"code":500,"msg":"Illegal Argument."}'


@pytest.mark.parametrize(
    "address",
    ["file:///etc/passwd", "10.0.0.1:9999", "http://[::1", "http://169.254.169.254/latest/meta-data/",
     "http://user:pw@10.0.0.1:9999/", "http://0.0.0.0:9999/", "http://[fe80::1]:9999/",
     "http://10.0.0.1:9999/?x=1", "http://metadata.google.internal/"],
)
async def test_refused_executor_addresses_are_not_registered(api: Api, address: str) -> None:
    body = {"registryGroup": "EXECUTOR", "registryKey": "demo-app", "registryValue": address}
    for path in ("/api/registry", "/api/registryRemove"):
        answer = (await api.post(path, body)).json()
        assert answer["code"] == 500 and answer["msg"].startswith("executor address refused"), answer
    assert await api.store.registry.entries("demo-app") == []


async def test_bad_registry_params_store_nothing(api: Api) -> None:
    await api.post("/api/registry", {"registryGroup": "EXECUTOR", "registryKey": "demo-app",
                                     "registryValue": "gopher://x/"})
    assert await api.store.registry.entries("demo-app") == []


async def test_oversized_body_is_refused(api: Api) -> None:
    response = await api.post("/api/callback", b"[" + b" " * (16 * 1024 * 1024 + 1) + b"]")
    assert response.status_code == 413 and response.json()["code"] == 500


async def test_malformed_json_is_a_clear_400(api: Api) -> None:
    response = await api.post("/api/callback", b"[{not json")
    assert response.status_code == 400
    assert response.json()["code"] == 500 and response.json()["msg"].startswith("request error:")
    response = await api.post("/api/callback", {"logId": 1})
    assert response.status_code == 400 and "array" in response.json()["msg"]


async def test_registry_updates_auto_group_at_once_and_remove_takes_it_out(api: Api) -> None:
    now = datetime.fromtimestamp(T0 / 1000, tz=UTC)
    group_id = await api.store.groups.create(
        JobGroup(app_name="demo-app", title="Demo", address_type=AddressType.AUTO), now)
    response = await api.post("/xxl-job-admin/api/registry", REGISTRY)
    assert response.content == b'{"code":200}'
    group = await api.store.groups.get(group_id)
    assert group is not None and group.addresses == ["http://127.0.0.1:19996/"]
    other = dict(REGISTRY, registryValue="http://127.0.0.1:19995/")
    await api.post("/api/registry", other)
    group = await api.store.groups.get(group_id)
    assert group is not None and group.addresses == ["http://127.0.0.1:19995/", "http://127.0.0.1:19996/"]
    # A repeat beat refreshes the heartbeat time.
    api.clock.advance(20_000)
    await api.post("/api/registry", REGISTRY)
    (entry,) = [e for e in await api.store.registry.entries("demo-app")
                if e.registry_value == REGISTRY["registryValue"]]
    assert entry.update_time == (now + timedelta(seconds=20)).replace(tzinfo=None, microsecond=0)
    response = await api.post("/api/registryRemove", REGISTRY)
    assert response.content == b'{"code":200}'
    group = await api.store.groups.get(group_id)
    assert group is not None and group.addresses == ["http://127.0.0.1:19995/"]


async def test_registry_leaves_manual_group_alone(api: Api) -> None:
    now = datetime.fromtimestamp(T0 / 1000, tz=UTC)
    group_id = await api.store.groups.create(
        JobGroup(app_name="demo-app", title="Demo", address_type=AddressType.MANUAL,
                 address_list="http://10.1.1.1:9999/"), now)
    await api.post("/api/registry", REGISTRY)
    group = await api.store.groups.get(group_id)
    assert group is not None and group.addresses == ["http://10.1.1.1:9999/"]
    entries = await api.store.registry.entries("demo-app")
    assert [e.registry_value for e in entries] == [REGISTRY["registryValue"]]


async def _log(store: Store, job_id: int = 1) -> int:
    now = datetime.fromtimestamp(T0 / 1000, tz=UTC)
    (log_id,) = await store.logs.insert_fires([NewLog(job_group=1, job_id=job_id, trigger_time=now,
                                                       trigger_code=200)])
    assert log_id is not None
    return log_id


async def test_callback_records_each_item_alone(api: Api) -> None:
    ok_id, fail_id = await _log(api.store), await _log(api.store)
    body = [
        {"logId": ok_id, "logDateTim": T0, "handleCode": 200},
        {"logId": fail_id, "logDateTim": T0, "handleCode": 500, "handleMsg": "failed on purpose"},
        {"logId": 999_999, "logDateTim": T0, "handleCode": 200},
        {"logId": ok_id, "logDateTim": T0, "handleCode": 500, "handleMsg": "late repeat"},
    ]
    response = await api.post("/xxl-job-admin/api/callback", body)
    # The unknown run is refused by name (and never kept for later); the others are recorded.
    assert response.status_code == 400
    answer = response.json()
    assert answer["code"] == 500 and "runs [999999]" in answer["msg"]
    ok, failed = await api.store.logs.get(ok_id), await api.store.logs.get(fail_id)
    assert ok is not None and ok.handle_code == 200 and ok.handle_msg is None
    assert ok.handle_time == datetime.fromtimestamp(T0 // 1000, tz=UTC).replace(tzinfo=None)
    assert failed is not None and failed.handle_code == 500 and failed.handle_msg == "failed on purpose"


async def test_callback_message_is_capped(api: Api) -> None:
    log_id = await _log(api.store)
    await api.post("/api/callback", [{"logId": log_id, "logDateTim": T0, "handleCode": 500,
                                      "handleMsg": "x" * 20_000}])
    entry = await api.store.logs.get(log_id)
    assert entry is not None and entry.handle_msg == "x" * 15_000


async def test_reference_executor_requests_are_accepted(api: Api) -> None:
    """Every request XXL-JOB's Java executor made in the recorded session gets {"code":200}."""
    requests = json.loads((FIXTURES / "reference_executor_requests.json").read_text())
    assert requests
    # The runs the recorded callbacks report exist here too (a result for an unknown run is
    # refused).
    reported = sorted({item["logId"] for r in requests if r["path"].endswith("/callback")
                       for item in json.loads(r["body"])})
    now = datetime.fromtimestamp(T0 / 1000, tz=UTC)
    ids = await api.store.logs.insert_fires([NewLog(job_group=1, job_id=1, trigger_time=now, trigger_code=200)
                                             for _ in range(reported[-1])])
    assert set(reported) <= set(ids)
    for req in requests:
        response = await api.http.request(req["method"], req["path"], content=req["body"].encode(),
                                          headers=req["headers"])
        assert response.status_code == 200 and response.content == b'{"code":200}', req
    paths = {r["path"].rsplit("/", 1)[1] for r in requests}
    assert {"registry", "callback"} <= paths
    assert await api.store.registry.entries("demo-app")


async def test_callback_with_non_string_message_keeps_its_json_text(api: Api) -> None:
    # pyxxl passes a handler's return value through as handleMsg, whatever its type.
    a, b = await _log(api.store), await _log(api.store)
    response = await api.post("/api/callback", [
        {"logId": a, "logDateTim": T0, "handleCode": 200, "handleMsg": {"rows": 3}},
        {"logId": b, "logDateTim": T0, "handleCode": 200, "handleMsg": 42,
         "executeResult": {"code": 200, "msg": 42}},
    ])
    assert response.content == b'{"code":200}'
    got_a, got_b = await api.store.logs.get(a), await api.store.logs.get(b)
    assert got_a is not None and got_a.handle_msg == '{"rows":3}'
    assert got_b is not None and got_b.handle_msg == "42"


async def test_started_at_header_reaches_the_registry_and_bad_values_are_ignored(sqlite_store: Store) -> None:
    clock = ManualClock(T0)
    client = ExecutorClient(access_token=TOKEN, connect=ExecutorDouble(["e1:9999"]).connect)
    trigger = TriggerService(sqlite_store, client, node_id="n1", clock=clock,
                             admin_timezone="UTC")
    callbacks = CallbackService(sqlite_store, trigger, clock)
    registry = RegistryService(sqlite_store, clock)
    app = Starlette(routes=executor_api_routes(registry, callbacks, TOKEN))
    try:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://admin") as http:
            for started in ("abc", "-5", str(T0 - 5000)):
                response = await http.post("/api/registry", content=json.dumps(REGISTRY).encode(), headers={
                    "XXL-JOB-ACCESS-TOKEN": TOKEN, "X-Jobring-Started-At": started})
                assert response.json()["code"] == 200
        assert registry.restarts_due(T0 + 60_000) == [
            (REGISTRY["registryKey"], REGISTRY["registryValue"], T0 - 5000)]
    finally:
        await callbacks.close()
        await trigger.close()


async def test_callback_batch_is_capped_at_1000_items_and_recorded_in_chunks(api: Api) -> None:
    over = [{"logId": 5_000_000 + k, "logDateTim": T0, "handleCode": 200} for k in range(1001)]
    response = await api.post("/api/callback", over)
    assert response.status_code == 413 and "at most 1000 items per request" in response.json()["msg"]
    ids = [await _log(api.store) for _ in range(3)]
    # Past the chunk size (200 per transaction): every item still gets its own outcome.
    body = [{"logId": 6_000_000 + k, "logDateTim": T0, "handleCode": 200} for k in range(450)]
    body[7] = {"logId": ids[0], "logDateTim": T0, "handleCode": 200}
    body[260] = {"logId": ids[1], "logDateTim": T0, "handleCode": 500, "handleMsg": "late chunk"}
    body[449] = {"logId": ids[2], "logDateTim": T0, "handleCode": 200}
    response = await api.post("/api/callback", body)
    assert response.status_code == 400 and "refused for runs [6000000, " in response.json()["msg"]
    entries = [await api.store.logs.get(i) for i in ids]
    assert [(e.handle_code if e else None) for e in entries] == [200, 500, 200]
    assert api.callbacks.received >= 450
