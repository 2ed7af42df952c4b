"""Replay XXL-JOB 2.4.1's recorded executor exchanges against our executor over real HTTP.

Handlers are equivalent to the reference's samples. Answers must match (code, msg,
content); /log answers are compared by structure and by their deterministic parts
(the framework lines, the script output), timestamps and thread names aside. The
callbacks our executor sends must carry the reference's outcomes.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from jobring import Executor, JobContext

from .fake_admin import FakeAdmin

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "xxl-job-2.4.1"
CASES: list[dict[str, Any]] = json.loads((FIXTURES / "reference_executor_answers.json").read_text())
REQUESTS: list[dict[str, Any]] = json.loads((FIXTURES / "reference_executor_requests.json").read_text())
LINE = re.compile(r"^\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2} \[[^\]]+#[^\]]+\]-\[\d+\]-\[[^\]]+\] (.*)$")
TOKEN = "t0k"


def build_executor(admin: FakeAdmin, log_path: Path) -> Executor:
    ex = Executor(app_name="demo-app", admin_addresses=[admin.base_url], access_token=TOKEN,
                  host="127.0.0.1", port=0, log_path=str(log_path), glue_enabled=True, environ={})

    @ex.job("demoJobHandler")
    def demo(ctx: JobContext) -> None:
        ctx.log("hello from python, param=%s", ctx.params)

    @ex.job("failJobHandler")
    def fail(ctx: JobContext) -> None:
        ctx.fail("failed on purpose")

    @ex.job("shardJobHandler")
    def shard(ctx: JobContext) -> None:
        ctx.log("shard %d/%d", ctx.shard_index, ctx.shard_total)

    @ex.job("sleepJobHandler")
    async def sleep(ctx: JobContext) -> None:
        await asyncio.sleep(int(ctx.params) / 1000)

    return ex


@pytest.fixture
async def running(tmp_path: Path) -> AsyncIterator[tuple[FakeAdmin, Executor, httpx.AsyncClient]]:
    admin = FakeAdmin()
    await admin.start()
    ex = build_executor(admin, tmp_path / "logs")
    ready = asyncio.Event()
    serving = asyncio.create_task(ex.serve(ready=lambda _a: ready.set()))
    try:
        await asyncio.wait_for(ready.wait(), 10)
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{ex.bound_port}", timeout=10) as client:
            yield admin, ex, client
    finally:
        ex.stop()
        await asyncio.wait_for(serving, 20)
        await admin.stop()


def messages(content: str) -> list[str]:
    """The message part of each framework-formatted line, product names removed."""
    out = []
    for line in content.split("\n"):
        match = LINE.match(line)
        if match:
            out.append(match.group(1).replace("xxl-job ", "").replace("jobring ", ""))
    return out


def check_log(case: str, ours: dict[str, Any], ref: dict[str, Any]) -> None:
    assert ours["code"] == ref["code"] == 200
    got, want = ours["content"], ref["content"]
    assert set(got) == set(want)
    assert (got["fromLineNum"], got["isEnd"]) == (want["fromLineNum"], want["isEnd"])
    if case == "log_missing":
        assert got == want
        return
    text = got["logContent"]
    assert got["toLineNum"] >= got["fromLineNum"]
    assert text.endswith("\n")
    mine, theirs = messages(text), messages(want["logContent"])
    assert mine, text
    if want["fromLineNum"] == 1:
        assert mine[0] == theirs[0]  # "<br>--- job execute start ---<br>--- Param:..."
    for message in (m for m in theirs if "Result: handleCode" in m):
        assert message in mine, (case, message, text)
    if case == "log_timeout":  # we add the limit: "job execute timeout (1 s)"
        assert any(m.startswith("<br>----------- job execute timeout") for m in mine), text
    if case == "log_glue_shell":
        assert "\nshell args: hello 0 1\n" in text
    if case == "log_killed":
        assert "scheduling center kill job." in text


async def send(client: httpx.AsyncClient, request: dict[str, Any]) -> httpx.Response:
    body = request["body"]
    content = b"" if body is None else body.encode() if isinstance(body, str) else orjson.dumps(body)
    headers = {"XXL-JOB-ACCESS-TOKEN": request["token"]} if request["token"] is not None else {}
    return await client.request(request["method"], request["path"], content=content, headers=headers)


def reference_callbacks() -> dict[int, dict[str, Any]]:
    items = {}
    for request in REQUESTS:
        if request["path"].endswith("api/callback"):
            for item in json.loads(request["body"]):
                items[item["logId"]] = item
    return items


@pytest.mark.timeout(60)
async def test_replay_reference_exchanges(running: tuple[FakeAdmin, Executor, httpx.AsyncClient]) -> None:
    admin, ex, client = running
    expected_callbacks = reference_callbacks()
    for case in CASES:
        name, request = case["case"], case["request"]
        if name.startswith("log_") and request["body"]["logId"] in expected_callbacks:
            # The reference read these logs after the run had ended: wait for its result.
            log_id = request["body"]["logId"]
            await admin.wait_for(lambda a, i=log_id: any(c["logId"] == i for c in a.callbacks()))
        response = await send(client, request)
        assert response.status_code == case["response"]["status"] == 200, name
        ours, ref = orjson.loads(response.content), json.loads(case["response"]["body"])
        if name.startswith("log_"):
            check_log(name, ours, ref)
        elif name == "malformed_json":
            assert ours["code"] == 500 and set(ours) == {"code", "msg"}
            assert ours["msg"].startswith("request error:")
        else:
            assert ours == ref, name
            assert response.content == case["response"]["body"].encode(), name
    await admin.wait_for(lambda a: {c["logId"] for c in a.callbacks()} >= set(expected_callbacks))
    got = {c["logId"]: c for c in admin.callbacks()}
    for log_id, want in expected_callbacks.items():
        assert got[log_id] == want, log_id
    assert len(admin.callbacks()) == len(got), "a result was sent twice"


async def test_registry_request_matches_the_reference(
    running: tuple[FakeAdmin, Executor, httpx.AsyncClient],
) -> None:
    admin, ex, _client = running
    await admin.wait_for(lambda a: any(p.endswith("api/registry") for p in a.paths()))
    ours = next(r for r in admin.requests if r.path.endswith("api/registry"))
    ref = next(r for r in REQUESTS if r["path"].endswith("api/registry"))
    assert ours.path == ref["path"]
    assert ours.headers["xxl-job-access-token"] == ref["headers"]["XXL-JOB-ACCESS-TOKEN"]
    ref_body, our_body = json.loads(ref["body"]), ours.json()
    # The reference's fields in its order, then the one jobring extension (admins read the
    # body with Gson, which skips a field it does not know): the handlers this executor has.
    assert list(our_body) == [*ref_body, "jobringHandlers"]
    assert our_body["jobringHandlers"] == sorted(ex.handlers)
    assert (our_body["registryGroup"], our_body["registryKey"]) == ("EXECUTOR", "demo-app")
    assert our_body["registryValue"] == ex.address
    assert re.fullmatch(r"http://[\d.]+:\d+/", our_body["registryValue"])
