"""Executor lifecycle: results across a restart, mounting in FastAPI, the background thread."""

from __future__ import annotations

import asyncio
import itertools
import socket
import subprocess
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import httpx
import pytest
import uvicorn
from fastapi import FastAPI

from jobring import Executor, JobContext
from jobring.executor.callback import SPOOL_FILE_NAME

from .fake_admin import FakeAdmin

TOKEN = "tok"
HEADERS = {"XXL-JOB-ACCESS-TOKEN": TOKEN}


def trigger(job_id: int, log_id: int, handler: str = "ok", params: str = "") -> dict[str, object]:
    return {"jobId": job_id, "executorHandler": handler, "executorParams": params, "logId": log_id,
            "logDateTime": 1795350973184, "executorBlockStrategy": "SERIAL_EXECUTION"}


def make_executor(admin: FakeAdmin, log_path: Path, **kw: object) -> Executor:
    ex = Executor(app_name="life", admin_addresses=[admin.base_url], access_token=TOKEN,
                  host="127.0.0.1", port=0, log_path=str(log_path), environ={}, beat_interval_s=30,
                  callback_max_backoff_s=0.2, **kw)

    @ex.job("ok")
    def ok(ctx: JobContext) -> None:
        ctx.log("ran %s", ctx.params)

    @ex.job("bad")
    async def bad(ctx: JobContext) -> None:
        ctx.fail("bad on purpose")

    return ex


async def poll(
    ask: Callable[[], Awaitable[httpx.Response]], done: Callable[[httpx.Response], bool], within_s: float = 10
) -> None:
    """Ask again every 10 ms until done (a state with no event to wait on), failing after within_s."""
    async with asyncio.timeout(within_s):
        for _attempt in itertools.count():
            if done(await ask()):
                return
            await asyncio.sleep(0.01)


@pytest.fixture
async def admin() -> AsyncIterator[FakeAdmin]:
    fake = FakeAdmin()
    await fake.start()
    try:
        yield fake
    finally:
        await fake.stop()


async def test_results_spooled_while_admin_down_are_delivered_once_by_the_next_instance(
    admin: FakeAdmin, tmp_path: Path
) -> None:
    await admin.stop()
    first = make_executor(admin, tmp_path)
    await first.startup()
    try:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=first.asgi_app()),
                                     base_url="http://ex", headers=HEADERS) as client:
            for n in range(1, 4):
                assert (await client.post("/run", json=trigger(n, 100 + n))).json() == {"code": 200}
            assert (await client.post("/run", json=trigger(9, 109, "bad"))).json() == {"code": 200}
            # Wait until every run has ended (its worker idle) before stopping.
            for job_id in (1, 2, 3, 9):
                await poll(lambda j=job_id: client.post("/idleBeat", json={"jobId": j}),
                           lambda r: r.json()["code"] == 200)
    finally:
        await first.shutdown()
    spool = tmp_path / SPOOL_FILE_NAME
    assert len(spool.read_bytes().splitlines()) == 4
    assert admin.requests == []

    await admin.start()  # same port: the admin is back
    second = make_executor(admin, tmp_path)
    await second.startup()
    try:
        await admin.wait_for(lambda a: len(a.callbacks()) >= 4)
    finally:
        await second.shutdown()
    items = sorted(admin.callbacks(), key=lambda i: i["logId"])
    assert [(i["logId"], i["handleCode"]) for i in items] == [(101, 200), (102, 200), (103, 200), (109, 500)]
    assert items[-1]["handleMsg"] == "bad on purpose"
    assert not spool.exists()
    assert admin.paths()[-1].endswith("api/registryRemove")


async def test_mounted_in_fastapi_with_the_lifespan_helper(admin: FakeAdmin, tmp_path: Path) -> None:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    ex = make_executor(admin, tmp_path, address=f"http://127.0.0.1:{port}/xxl-job-executor/")
    app = FastAPI(lifespan=ex.lifespan)
    app.mount("/xxl-job-executor", ex.asgi_app())

    @app.get("/hello")
    async def hello() -> dict[str, str]:
        return {"hello": "world"}

    server = uvicorn.Server(uvicorn.Config(app, lifespan="on", log_level="warning"))
    serving = asyncio.create_task(server.serve(sockets=[sock]))
    try:
        await admin.wait_for(lambda a: any(p.endswith("api/registry") for p in a.paths()))
        registered = next(r for r in admin.requests if r.path.endswith("api/registry")).json()
        assert registered["registryValue"] == f"http://127.0.0.1:{port}/xxl-job-executor/"
        async with httpx.AsyncClient(base_url=registered["registryValue"], headers=HEADERS) as client:
            assert (await client.post("run", json=trigger(1, 501))).json() == {"code": 200}
            assert (await client.post("beat")).json() == {"code": 200}
            assert (await client.get(f"http://127.0.0.1:{port}/hello")).json() == {"hello": "world"}
        await admin.wait_for(lambda a: [c["logId"] for c in a.callbacks()] == [501])
    finally:
        server.should_exit = True
        await asyncio.wait_for(serving, 20)
        sock.close()
    assert admin.paths()[-1].endswith("api/registryRemove")


async def test_background_thread_runner_starts_serves_and_stops(admin: FakeAdmin, tmp_path: Path) -> None:
    ex = make_executor(admin, tmp_path)
    await asyncio.to_thread(ex.start_in_thread)
    try:
        assert ex.running and ex.bound_port
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{ex.bound_port}", headers=HEADERS) as client:
            assert (await client.post("/run", json=trigger(4, 601, params="x"))).json() == {"code": 200}
            await admin.wait_for(lambda a: [c["logId"] for c in a.callbacks()] == [601])
            log = (await client.post("/log", json={"logDateTim": 1795350973184, "logId": 601,
                                                   "fromLineNum": 1})).json()
            assert "ran x" in log["content"]["logContent"]
    finally:
        await asyncio.to_thread(ex.stop)
    assert not ex.running
    assert admin.paths()[-1].endswith("api/registryRemove")


async def test_background_thread_reports_a_start_failure(admin: FakeAdmin, tmp_path: Path) -> None:
    blocker = socket.socket()
    blocker.bind(("127.0.0.1", 0))
    blocker.listen()
    try:
        ex = make_executor(admin, tmp_path)
        ex.configure(port=blocker.getsockname()[1])
        with pytest.raises(Exception, match="is in use"):
            await asyncio.to_thread(ex.start_in_thread)
        assert not ex.running
    finally:
        blocker.close()


async def test_asgi_app_alone_runs_under_an_asgi_server_with_its_own_lifespan(
    admin: FakeAdmin, tmp_path: Path
) -> None:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    ex = make_executor(admin, tmp_path, address=f"http://127.0.0.1:{port}/")
    server = uvicorn.Server(uvicorn.Config(ex.asgi_app(), lifespan="on", log_level="warning"))
    serving = asyncio.create_task(server.serve(sockets=[sock]))
    try:
        await admin.wait_for(lambda a: any(p.endswith("api/registry") for p in a.paths()))
        assert ex.running
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", headers=HEADERS) as client:
            assert (await client.post("/run", json=trigger(2, 701, "bad"))).json() == {"code": 200}
        await admin.wait_for(lambda a: [c["logId"] for c in a.callbacks()] == [701])
    finally:
        server.should_exit = True
        await asyncio.wait_for(serving, 20)
        sock.close()
    assert not ex.running
    assert admin.paths()[-1].endswith("api/registryRemove")
    assert admin.callbacks()[0]["handleMsg"] == "bad on purpose"


async def test_asgi_lifespan_reports_a_startup_failure(tmp_path: Path) -> None:
    ex = Executor(app_name="nope", log_path=str(tmp_path), environ={})  # no token: refused
    app = ex.asgi_app()
    sent: list[dict[str, object]] = []
    messages = iter([{"type": "lifespan.startup"}])

    async def receive() -> dict[str, object]:
        return next(messages)

    async def send(message: dict[str, object]) -> None:
        sent.append(message)

    await app({"type": "lifespan"}, receive, send)
    assert sent[0]["type"] == "lifespan.startup.failed"
    assert "access token is missing" in str(sent[0]["message"])


async def test_a_start_that_fails_half_way_releases_what_it_opened(admin: FakeAdmin, tmp_path: Path) -> None:
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("a file where the log folder should be")
    ex = make_executor(admin, blocker)
    with pytest.raises(OSError):
        await ex.startup()
    assert not ex.running
    assert ex._client is None and ex._callback is None


def test_the_standalone_gc_tuning_freezes_startup_and_widens_the_young_generation() -> None:
    # In a child process: the tuning is process-wide, and the test process keeps its own GC.
    code = ("import gc; from jobring.executor.standalone import tune_gc; tune_gc(); "
            "print(gc.get_threshold(), gc.get_freeze_count() > 0)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.strip() == "(20000, 50, 100) True"
