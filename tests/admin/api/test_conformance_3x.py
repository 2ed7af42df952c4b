"""Our admin against XXL-JOB 3.3 and 3.5 executors, replaying tests/fixtures/protocol/.

Executor -> admin: the fixture's requests are sent to our executor API and must be taken
(code 200) with their effects (registration, results). Admin -> executor: a fake executor
of the version answers only the fixture's requests (3.5: ``/trigger``, token and appname
required); every call our admin makes must be one of them and get the recorded answer.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
from starlette.applications import Starlette
from starlette.routing import Mount

from jobring.admin.api.executor_api import executor_api_routes
from jobring.admin.dispatch.client import ExecutorClient
from jobring.admin.monitors.monitors import RegistryService
from jobring.admin.services.callbacks import CallbackService
from jobring.admin.store import Store
from jobring.admin.store.records import JobGroup, JobInfo, NewLog
from jobring.admin.trigger.trigger import FireRequest, TriggerService
from jobring.core.clock import ManualClock
from jobring.core.enums import AddressType, TriggerType
from jobring.protocol.models import LogParam, TriggerParam
from tests.admin.loopback import LoopbackServer

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "protocol"
VERSIONS = ["3.3", "3.5"]
T0 = 1_790_000_000_000


def fixture(version: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((FIXTURES / f"xxl-job-{version}.json").read_text())
    return data


def _key(body: Any) -> Any:
    """What decides the answer: a trigger's handler (ids and times vary), else the body."""
    return body["executorHandler"] if isinstance(body, dict) and "executorHandler" in body else body


@dataclass
class FakeExecutor:
    """Answers the fixture's admin->executor requests the way that version's executor does."""

    spec: dict[str, Any]
    seen: list[tuple[str, dict[str, str], Any]] = field(default_factory=list)

    def handle(self, request: httpx.Request) -> httpx.Response:
        path = request.url.path
        body = json.loads(request.content) if request.content.strip() else None
        headers = {k.lower(): v for k, v in request.headers.items()}
        self.seen.append((path, headers, body))
        if self.spec["version"] == "3.5" and not headers.get("xxl-job-appname"):
            # 3.5 checks the token and the appname before it looks at the path.
            refusal = next(c for c in self.spec["admin_to_executor"] if c["case"] == "no_appname")
            return httpx.Response(200, content=refusal["response"]["body"].encode())
        for case in self.spec["admin_to_executor"]:
            want = case["request"]
            want_body = json.loads(want["body"]) if want["body"] is not None else None
            wanted_headers = {k.lower(): v for k, v in want["headers"].items() if k != "Content-Type"}
            if (want["path"], _key(want_body)) != (path, _key(body if body != {} else None)):
                continue
            if all(headers.get(k) == v for k, v in wanted_headers.items()):
                return httpx.Response(200, content=case["response"]["body"].encode(),
                                      headers={"Content-Type": "text/html;charset=UTF-8"})
        return httpx.Response(200, content=b'{"code":500,"msg":"not a recorded request"}')


@dataclass
class Admin:
    http: httpx.AsyncClient
    store: Store
    client: ExecutorClient
    executor: FakeExecutor
    trigger: TriggerService

    async def send(self, request: dict[str, Any], body: Any = None) -> dict[str, Any]:
        content = (json.dumps(body) if body is not None else request["body"] or "").encode()
        response = await self.http.post("/xxl-job-admin/" + request["path"], content=content,
                                        headers=request["headers"])
        assert response.status_code == 200
        answer: dict[str, Any] = response.json()
        return answer


@pytest.fixture(params=VERSIONS)
async def admin(request: pytest.FixtureRequest, sqlite_store: Store) -> AsyncIterator[Admin]:
    spec = fixture(request.param)
    fake = FakeExecutor(spec)
    clock = ManualClock(T0)
    client = ExecutorClient(access_token=spec["token"], connect=LoopbackServer(fake.handle).connect)
    trigger = TriggerService(sqlite_store, client, node_id="n1", clock=clock,
                             admin_timezone="UTC")
    callbacks = CallbackService(sqlite_store, trigger, clock)
    routes = executor_api_routes(RegistryService(sqlite_store, clock, trigger), callbacks, spec["token"])
    app = Starlette(routes=[Mount("/xxl-job-admin", routes=routes), *routes])
    now = datetime.fromtimestamp(T0 / 1000, tz=UTC)
    await sqlite_store.groups.create(
        JobGroup(app_name=spec["app_name"], title="Demo", address_type=AddressType.AUTO), now)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://admin") as http:
        yield Admin(http, sqlite_store, client, fake, trigger)
    await callbacks.close()
    await trigger.close()
    await client.aclose()


def exchange(spec: dict[str, Any], direction: str, case: str) -> dict[str, Any]:
    found: dict[str, Any] = next(e for e in spec[direction] if e["case"] == case)
    return found


async def new_log(store: Store) -> int:
    now = datetime.fromtimestamp(T0 / 1000, tz=UTC)
    (log_id,) = await store.logs.insert_fires([NewLog(job_group=1, job_id=7, trigger_time=now,
                                                       trigger_code=200)])
    assert log_id is not None
    return log_id


@pytest.mark.timeout(30)
async def test_executor_requests_are_taken(admin: Admin) -> None:
    spec = admin.executor.spec
    registry = exchange(spec, "executor_to_admin", "registry")
    assert (await admin.send(registry["request"]))["code"] == 200
    entries = await admin.store.registry.entries(spec["app_name"])
    assert [e.registry_value for e in entries] == [spec["executor_address"]]
    address = spec["executor_address"]
    assert admin.client.dialect_of(address, spec["app_name"]) == ("3.5" if spec["version"] == "3.5" else "2")

    callback = exchange(spec, "executor_to_admin", "callback")
    ids = {old: await new_log(admin.store) for old in callback["logs"]}
    body = json.loads(callback["request"]["body"])
    items = body["callbackList"] if isinstance(body, dict) else body
    for item in items:
        item["logId"] = ids[item["logId"]]
    assert (await admin.send(callback["request"], body))["code"] == 200
    for item in items:
        entry = await admin.store.logs.get(item["logId"])
        assert entry is not None and entry.handle_code == item["handleCode"]
        assert entry.handle_msg == item.get("handleMsg")

    remove = exchange(spec, "executor_to_admin", "registryRemove")
    assert (await admin.send(remove["request"]))["code"] == 200
    assert await admin.store.registry.entries(spec["app_name"]) == []


async def test_a_35_registration_must_name_the_app_of_its_token(admin: Admin) -> None:
    spec = admin.executor.spec
    registry = exchange(spec, "executor_to_admin", "registry")
    headers = {**registry["request"]["headers"], "XXL-JOB-APPNAME": "other-app"}
    answer = await admin.send({**registry["request"], "headers": headers})
    assert answer["code"] == 500
    assert await admin.store.registry.entries(spec["app_name"]) == []


@pytest.mark.timeout(30)
async def test_admin_calls_match_the_version(admin: Admin) -> None:
    spec = admin.executor.spec
    v35 = spec["version"] == "3.5"
    address, token, app = spec["executor_address"], spec["token"], spec["app_name"]
    assert (await admin.send(exchange(spec, "executor_to_admin", "registry")["request"]))["code"] == 200
    client = admin.client

    for case in ("trigger", "trigger_fail", "handler_not_found"):
        recorded = exchange(spec, "admin_to_executor", case)
        param = TriggerParam.decode(recorded["request"]["body"].encode())
        want = json.loads(recorded["response"]["body"])
        answer = await client.run(address, param, token, app)
        assert (answer.code, answer.msg) == (want["code"], want["msg"]), case
        answer = await client.run_now(address, param, token, app)
        assert answer.code == want["code"], case
    assert {path for path, _h, _b in admin.executor.seen} == {"/trigger" if v35 else "/run"}

    assert (await client.beat(address, token, app)).ok
    assert (await client.idle_beat(address, 7, token, app)).ok
    kill = await client.kill(address, 9, token, app)
    assert kill.ok and kill.content == json.loads(
        exchange(spec, "admin_to_executor", "kill_idle")["response"]["body"]).get("data")
    recorded = json.loads(exchange(spec, "admin_to_executor", "log")["request"]["body"])
    log_date = recorded.get("logDateTime", recorded.get("logDateTim"))
    answer = await client.log(address, LogParam(log_date, recorded["logId"], 1), token, app)
    assert answer.ok and answer.content == json.loads(
        exchange(spec, "admin_to_executor", "log")["response"]["body"])["data"]
    for path, headers, _body in admin.executor.seen:
        assert headers["xxl-job-access-token"] == token, path
        assert headers.get("xxl-job-appname") == (spec["app_name"] if v35 else None), path


async def test_a_heartbeat_without_the_appname_header_goes_back_to_run(admin: Admin) -> None:
    spec = admin.executor.spec
    address = spec["executor_address"]
    registry = exchange(spec, "executor_to_admin", "registry")
    await admin.send(registry["request"])
    plain = {k: v for k, v in registry["request"]["headers"].items() if k != "XXL-JOB-APPNAME"}
    await admin.send({**registry["request"], "headers": plain})
    assert admin.client.dialect_of(address, spec["app_name"]) == "2"


@pytest.mark.timeout(30)
async def test_a_fire_reaches_an_executor_whose_heartbeat_went_to_another_node(admin: Admin) -> None:
    spec = admin.executor.spec
    v35 = spec["version"] == "3.5"
    now = datetime.fromtimestamp(T0 / 1000, tz=UTC)
    group = await admin.store.groups.by_app_name(spec["app_name"])
    assert group is not None and group.id is not None
    group_id = group.id
    await admin.store.groups.update(replace(group, address_type=AddressType.MANUAL,
                                            address_list=spec["executor_address"]), now)
    job_id = await admin.store.jobs.create(JobInfo(
        job_group=group_id, job_desc="demo", executor_handler="demoJobHandler",
        executor_route_strategy="FIRST", glue_type="BEAN"))
    job = await admin.store.jobs.get(job_id)
    assert job is not None
    result = await admin.trigger.fire(FireRequest(job, TriggerType.MANUAL))
    assert result.trigger_code == 200
    paths = [(path, headers.get("xxl-job-appname")) for path, headers, _b in admin.executor.seen]
    if v35:  # refused without the appname, learned, sent again to /trigger
        assert paths == [("/run", None), ("/trigger", spec["app_name"])]
        assert admin.client.dialect_of(spec["executor_address"], spec["app_name"]) == "3.5"
    else:
        assert paths == [("/run", None)]


async def test_a_probe_refused_for_want_of_the_appname_teaches_the_dialect(admin: Admin) -> None:
    spec = admin.executor.spec
    address, token = spec["executor_address"], spec["token"]
    beat, idle_beat = admin.client.probes(token, spec["app_name"])
    assert (await idle_beat(address, 7)).ok
    assert (await beat(address, 7)).ok
    want = "3.5" if spec["version"] == "3.5" else "2"
    assert admin.client.dialect_of(address, spec["app_name"]) == want
