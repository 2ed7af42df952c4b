"""The executor's pull channel against the admin's real PullHub and PullApi (in memory)."""

from __future__ import annotations

import asyncio
import socket
import time
from pathlib import Path

import httpx
import orjson
import pytest
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from jobring.admin.api.pull_api import PullApi
from jobring.admin.dispatch.client import ExecutorClient
from jobring.admin.dispatch.pull import PullCallError, PullHub
from jobring.admin.services.executor_tokens import TokenScope
from jobring.configbase import ConfigError
from jobring.executor.config import load_executor_settings
from jobring.executor.executor import Executor
from jobring.executor.pull import POLL_WAIT_MS, PollTransport, PullChannel, pull_address
from jobring.protocol.models import TriggerParam

ADDRESS = "pull://worker-1/"
KEY = "pull://worker-1"
ADMIN = "http://admin.test/"


async def never() -> None:
    await asyncio.Event().wait()


def via_httpx(client: httpx.AsyncClient, token: str) -> PollTransport:
    """Polls through ``client`` (a mock transport) instead of the lean HTTP/1.1 client."""
    return PollTransport(client, token, wait_ms=POLL_WAIT_MS, connect_timeout_s=3.0, lean=False)


def admin_transport(hub: PullHub, app: str = "app", carried: list[int] | None = None) -> httpx.MockTransport:
    """The admin's PullApi; ``carried`` gets the number of answers of each poll that had some."""
    api = PullApi(hub)

    async def handle(request: httpx.Request) -> httpx.Response:
        assert request.url.path == "/api/pull"
        if carried is not None and (answers := orjson.loads(request.content)["answers"]):
            carried.append(len(answers))
        token = request.headers.get("XXL-JOB-ACCESS-TOKEN")
        scope = TokenScope(False, frozenset({1}), frozenset({app} if token == "good" else set()))
        answer, status = await api.poll(request.content, scope, None, never)
        return httpx.Response(status, content=answer.encode())

    return httpx.MockTransport(handle)


async def test_calls_reach_the_handler_and_answers_come_back() -> None:
    hub = PullHub(lambda: 0)
    seen: list[tuple[str, bytes]] = []

    async def answer(path: str, body: bytes) -> bytes:
        seen.append((path, body))
        return b'{"code":200,"msg":"ran"}'

    async with httpx.AsyncClient(transport=admin_transport(hub)) as client:
        channel = PullChannel(via_httpx(client, "good"), [ADMIN], "app", ADDRESS, answer)
        channel.start()
        try:
            # The first poll does not wait: the admin's acceptance is known at once.
            await asyncio.wait_for(channel.polling.wait(), 5)
            for _ in range(100):  # the long poll reaches the hub within a few loop steps
                if hub.alive(KEY, "app"):
                    break
                await asyncio.sleep(0)
            assert hub.alive(KEY, "app")
            got = await asyncio.wait_for(hub.send(KEY, "run", b'{"logId":1}', "app", 5), 5)
            assert orjson.loads(got) == {"code": 200, "msg": "ran"}
            assert seen == [("/run", b'{"logId":1}')]
            # Several calls at once: all answered, each to its own caller.
            many = await asyncio.gather(*(hub.send(KEY, "beat", str(i).encode(), "app", 5)
                                          for i in range(50)))
            assert len(many) == 50 and channel.calls_served == 51
        finally:
            await channel.stop()


async def test_a_large_batch_answers_a_first_part_at_once() -> None:
    hub = PullHub(lambda: 0)
    carried: list[int] = []

    async def answer(path: str, body: bytes) -> bytes:
        return b'{"code":200}'

    async with httpx.AsyncClient(transport=admin_transport(hub, carried=carried)) as client:
        channel = PullChannel(via_httpx(client, "good"), [ADMIN], "app", ADDRESS, answer)
        channel.start()
        try:
            await asyncio.wait_for(channel.polling.wait(), 5)
            for _ in range(100):
                if hub.alive(KEY, "app"):
                    break
                await asyncio.sleep(0)
            many = await asyncio.wait_for(asyncio.gather(
                *(hub.send(KEY, "run", b"{}", "app", 5) for _ in range(40))), 5)
            assert len(many) == 40 and channel.calls_served == 40
            # One poll took the 40; the answers of the first 16 left before the rest were
            # answered, so the admin could send more calls meanwhile.
            assert carried[0] == 16 and sum(carried) == 40, carried
        finally:
            await channel.stop()


async def test_a_refused_token_takes_nothing() -> None:
    hub = PullHub(lambda: 0)

    async def answer(path: str, body: bytes) -> bytes:
        raise AssertionError("no call may arrive")

    async with httpx.AsyncClient(transport=admin_transport(hub)) as client:
        channel = PullChannel(via_httpx(client, "wrong"), [ADMIN], "app", ADDRESS, answer, max_backoff_s=0.01)
        channel.start()
        try:
            for _ in range(20):
                await asyncio.sleep(0)
            assert not channel.polling.is_set()
            with pytest.raises(PullCallError):
                await hub.send(KEY, "run", b"{}", "app", 5)
        finally:
            await channel.stop()


def test_pull_settings_and_addresses() -> None:
    settings = load_executor_settings({}, app_name="a", dispatch="pull", address="pull://w1")
    assert settings.dispatch == "pull" and pull_address(settings.address) == "pull://w1/"
    assert pull_address(None).startswith("pull://")
    with pytest.raises(ConfigError, match="dispatch"):
        load_executor_settings({}, app_name="a", dispatch="carrier-pigeon")
    with pytest.raises(ConfigError, match="does not fit dispatch"):
        load_executor_settings({}, app_name="a", dispatch="push", address="pull://w1/")
    with pytest.raises(ConfigError, match="does not fit dispatch"):
        load_executor_settings({}, app_name="a", dispatch="pull", address="http://10.0.0.1:9999/")
    env = load_executor_settings({"JOBRING_EXECUTOR_DISPATCH": "pull"}, app_name="a")
    assert env.dispatch == "pull"


async def test_lean_polls_over_one_kept_connection_and_a_stop_closes_the_poll() -> None:
    # The production path: jobring's HTTP/1.1 client against the admin's PullApi under uvicorn.
    hub = PullHub(lambda: time.monotonic_ns() // 1_000_000)
    api = PullApi(hub)
    peers: set[object] = set()

    async def endpoint(request: Request) -> Response:
        peers.add(request.client)  # (host, port): one per connection the executor opened
        assert request.headers.get("XXL-JOB-ACCESS-TOKEN") == "good"
        scope = TokenScope(False, frozenset({1}), frozenset({"app"}))
        answer, status = await api.poll(await request.body(), scope, None, request.receive)
        return Response(answer.encode(), status_code=status, media_type="application/json")

    app = Starlette(routes=[Route("/api/pull", endpoint, methods=["POST"])])
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    url = f"http://127.0.0.1:{sock.getsockname()[1]}/"
    server = uvicorn.Server(uvicorn.Config(app, lifespan="off", log_level="warning"))
    serving = asyncio.create_task(server.serve(sockets=[sock]))
    seen: list[str] = []

    async def answer(path: str, body: bytes) -> bytes:
        seen.append(path)
        if path == "/log":
            await asyncio.sleep(0.01)  # an answer that waits: served in a task, sent by a short poll
        return b'{"code":200}'

    async with httpx.AsyncClient() as client:
        transport = PollTransport(client, "good", wait_ms=POLL_WAIT_MS, connect_timeout_s=3.0)
        channel = PullChannel(transport, [url], "app", ADDRESS, answer)
        try:
            while not server.started:  # noqa: ASYNC110 (uvicorn offers no event)
                await asyncio.sleep(0.01)
            channel.start()
            await asyncio.wait_for(channel.polling.wait(), 5)
            for _ in range(500):
                if hub.alive(KEY, "app"):
                    break
                await asyncio.sleep(0.01)
            for round_ in range(20):
                got = await asyncio.wait_for(asyncio.gather(
                    *(hub.send(KEY, "run", b"{}", "app", 5) for _ in range(10))), 5)
                assert all(orjson.loads(g) == {"code": 200} for g in got), round_
            logged = await asyncio.wait_for(hub.send(KEY, "log", b"{}", "app", 5), 5)
            assert orjson.loads(logged) == {"code": 200}
            assert channel.calls_served == 201 and seen.count("/log") == 1
            # 21 batches and their answers on at most the long poll's and a short poll's connections.
            assert len(peers) <= 2, peers
        finally:
            await channel.stop()
        # The stopped executor's poll connection closed: the node no longer delivers to it.
        for _ in range(500):
            if not hub.alive(KEY, "app"):
                break
            await asyncio.sleep(0.01)
        assert not hub.alive(KEY, "app")
        with pytest.raises(PullCallError, match="PullNoPoll"):
            await hub.send(KEY, "run", b"{}", "app", 5)
    server.should_exit = True
    await asyncio.wait_for(serving, 20)
    sock.close()


async def test_a_pull_executor_runs_a_job_sent_through_the_admin_client(tmp_path: Path) -> None:
    # The executor's own wiring (Executor(dispatch="pull")) against PullApi under uvicorn: the
    # admin's ExecutorClient sends /run to the pull:// address, the result comes back.
    hub = PullHub(lambda: time.monotonic_ns() // 1_000_000)
    api = PullApi(hub)
    results: list[int] = []
    registered: list[str] = []

    async def endpoint(request: Request) -> Response:
        uri, body = request.path_params["uri"], await request.body()
        if uri == "pull":
            scope = TokenScope(False, frozenset({1}), frozenset({"app"}))
            answer, status = await api.poll(body, scope, None, request.receive)
            return Response(answer.encode(), status_code=status, media_type="application/json")
        if uri == "registry":
            registered.append(orjson.loads(body)["registryValue"])
        elif uri == "callback":
            items = orjson.loads(body)
            results.extend(i["logId"] for i in (items if isinstance(items, list) else items["callbackList"]))
        return Response(b'{"code":200}', media_type="application/json")

    app = Starlette(routes=[Route("/api/{uri:path}", endpoint, methods=["POST"])])
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(app, lifespan="off", log_level="warning"))
    serving = asyncio.create_task(server.serve(sockets=[sock]))
    ex = Executor(app_name="app", admin_addresses=[f"http://127.0.0.1:{sock.getsockname()[1]}/"],
                  access_token="good-token-0123456789", dispatch="pull", address=ADDRESS,
                  log_path=str(tmp_path))

    @ex.job("hello")
    async def hello(ctx: object) -> None:
        return None

    client = ExecutorClient(access_token="good-token-0123456789", read_timeout=5.0, pull=hub)
    try:
        while not server.started:  # noqa: ASYNC110 (uvicorn offers no event)
            await asyncio.sleep(0.01)
        await ex.startup(binds=False)
        for _ in range(500):
            if hub.alive(KEY, "app") and registered:
                break
            await asyncio.sleep(0.01)
        assert registered == [ADDRESS] or registered[0] == ADDRESS
        param = TriggerParam(job_id=1, executor_handler="hello", log_id=77, log_date_time=1795350973184)
        answer = await client.run(ADDRESS, param, app_name="app")
        assert answer.ok, answer.msg
        for _ in range(500):
            if results:
                break
            await asyncio.sleep(0.01)
        assert results == [77]
        await ex.shutdown()
        # Its last request said it leaves: the node stops delivering to it at once (not
        # after the 5 s grace of a poll that just ended).
        assert not hub.alive(KEY, "app")
        with pytest.raises(PullCallError, match="PullNoPoll"):
            await hub.send(KEY, "run", b"{}", "app", 5)
    finally:
        await client.aclose()
        await ex.shutdown()
        server.should_exit = True
        await asyncio.wait_for(serving, 20)
        sock.close()
