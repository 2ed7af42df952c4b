"""Our executor under XXL-JOB 3.3 and 3.5 admins, replaying tests/fixtures/protocol/.

A fake admin of the version answers as the recorded admin does (3.5: token and appname
headers required, callbacks only as ``{"callbackList": [...]}``). Our executor must send
the recorded requests (registry, callbacks in the version's shape, with ``protocol="auto"``
found out from the admin's answers) and answer the recorded admin requests as the
version's executor does (code, failure message, ``data`` of /log).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from jobring import Executor, JobContext

from .fake_admin import FakeAdmin

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "protocol"


def fixture(version: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((FIXTURES / f"xxl-job-{version}.json").read_text())
    return data


def exchange(spec: dict[str, Any], direction: str, case: str) -> dict[str, Any]:
    found: dict[str, Any] = next(e for e in spec[direction] if e["case"] == case)
    return found


def admin_of(spec: dict[str, Any]) -> FakeAdmin:
    """A fake admin answering as the fixture's admin does."""
    v35 = spec["version"] == "3.5"
    ok = exchange(spec, "executor_to_admin", "registry")["response"]["body"].encode()

    def respond(path: str, headers: dict[str, str], body: bytes) -> tuple[int, bytes]:
        if headers.get("xxl-job-access-token") != spec["token"]:
            return 200, b'{"code":500,"msg":"The access token is wrong."}'
        if v35:
            if not headers.get("xxl-job-appname"):
                return 200, exchange(spec, "executor_to_admin", "no_appname")["response"]["body"].encode()
            if path.endswith("api/callback") and not isinstance(orjson.loads(body), dict):
                return 200, exchange(spec, "executor_to_admin",
                                     "callback_bare_array_refused")["response"]["body"].encode()
        elif path.endswith("api/callback") and not isinstance(orjson.loads(body), list):
            return 200, b'{"code":500,"msg":"openapi invoke error: not a list"}'
        return 200, ok

    return FakeAdmin(responder=respond)


@pytest.fixture(params=["3.3", "3.5"])
async def running(
    request: pytest.FixtureRequest, tmp_path: Path,
) -> AsyncIterator[tuple[dict[str, Any], FakeAdmin, Executor]]:
    spec = fixture(request.param)
    admin = admin_of(spec)
    await admin.start()
    ex = Executor(app_name=spec["app_name"], admin_addresses=[admin.base_url], access_token=spec["token"],
                  host="127.0.0.1", port=0, log_path=str(tmp_path / "logs"), environ={})

    @ex.job("demoJobHandler")
    def demo(ctx: JobContext) -> None:
        ctx.log("hello, param=%s", ctx.params)

    @ex.job("failJobHandler")
    def fail(ctx: JobContext) -> None:
        ctx.fail("failed on purpose")

    ready = asyncio.Event()
    serving = asyncio.create_task(ex.serve(ready=lambda _a: ready.set()))
    try:
        await asyncio.wait_for(ready.wait(), 10)
        yield spec, admin, ex
    finally:
        ex.stop()
        await asyncio.wait_for(serving, 20)
        await admin.stop()


@pytest.mark.timeout(60)
async def test_executor_under_a_3x_admin(running: tuple[dict[str, Any], FakeAdmin, Executor]) -> None:
    spec, admin, ex = running
    v35 = spec["version"] == "3.5"
    await admin.wait_for(lambda a: any(p.endswith("api/registry") for p in a.paths()))
    registry = exchange(spec, "executor_to_admin", "registry")["request"]
    ours = next(r for r in admin.requests if r.path.endswith("api/registry"))
    assert ours.accepted
    for name, value in registry["headers"].items():
        if name != "Content-Type":
            assert ours.headers[name.lower()] == value, name
    want = json.loads(registry["body"])
    assert ours.json() == {**want, "registryValue": ex.address, "jobringHandlers": sorted(ex.handlers)}

    expected: dict[int, dict[str, Any]] = {}
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{ex.bound_port}", timeout=10) as client:
        for case in spec["admin_to_executor"]:
            if case.get("reference_only"):
                continue
            request, ref = case["request"], json.loads(case["response"]["body"])
            if "after_callback" in case:
                log_id = case["after_callback"]
                await admin.wait_for(lambda a, i=log_id: any(c["logId"] == i for c in a.callbacks()))
            response = await client.post(request["path"], content=(request["body"] or "").encode(),
                                         headers=request["headers"])
            assert response.status_code == 200, case["case"]
            answer = orjson.loads(response.content)
            assert answer["code"] == ref["code"], case["case"]
            if ref["code"] != 200:
                assert answer["msg"] == ref["msg"], case["case"]
            if case["case"] == "log":
                assert set(answer["data"]) == set(ref["data"])
                data = answer["data"]
                assert data["fromLineNum"] == 1 and "hello, param=p1" in data["logContent"]
            if "callback" in case:
                expected[case["callback"]["logId"]] = case["callback"]

    await admin.wait_for(lambda a: {c["logId"] for c in a.callbacks()} >= set(expected))
    shape = exchange(spec, "executor_to_admin", "callback")
    recorded_body = json.loads(shape["request"]["body"])
    recorded_item = (recorded_body["callbackList"] if v35 else recorded_body)[0]
    for item in admin.callbacks():
        want_item = expected[item["logId"]]
        assert set(item) - {"handleMsg"} == set(recorded_item) - {"handleMsg"}
        assert item["handleCode"] == want_item["handleCode"]
        assert item.get("handleMsg") == want_item.get("handleMsg")
    accepted = [r for r in admin.requests if r.path.endswith("api/callback") and r.accepted]
    assert all(isinstance(r.json(), dict) == v35 for r in accepted)
    # protocol="auto": a 3.5 admin refuses the first (2.x-shaped) body once, never again.
    refused = [r for r in admin.requests if r.path.endswith("api/callback") and not r.accepted]
    assert len(refused) == (1 if v35 else 0)
    for r in accepted:
        assert r.headers["xxl-job-appname"] == spec["app_name"]


@pytest.mark.parametrize("protocol", ["3.5", "3"])
@pytest.mark.timeout(60)
async def test_a_set_protocol_sends_its_callback_shape_at_once(protocol: str, tmp_path: Path) -> None:
    spec = fixture("3.5" if protocol == "3.5" else "3.3")
    admin = admin_of(spec)
    await admin.start()
    ex = Executor(app_name=spec["app_name"], admin_addresses=[admin.base_url], access_token=spec["token"],
                  host="127.0.0.1", port=0, log_path=str(tmp_path / "logs"),
                  environ={"JOBRING_EXECUTOR_PROTOCOL": protocol})

    @ex.job("demoJobHandler")
    def demo(ctx: JobContext) -> None:
        ctx.log("hello")

    ready = asyncio.Event()
    serving = asyncio.create_task(ex.serve(ready=lambda _a: ready.set()))
    try:
        await asyncio.wait_for(ready.wait(), 10)
        request = exchange(spec, "admin_to_executor", "trigger")["request"]
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{ex.bound_port}", timeout=10) as client:
            response = await client.post(request["path"], content=request["body"].encode(),
                                         headers=request["headers"])
        assert orjson.loads(response.content)["code"] == 200
        await admin.wait_for(lambda a: bool(a.callbacks()))
        callbacks = [r for r in admin.requests if r.path.endswith("api/callback")]
        assert callbacks and all(r.accepted for r in callbacks), "a refused shape was tried first"
    finally:
        ex.stop()
        await asyncio.wait_for(serving, 20)
        await admin.stop()
