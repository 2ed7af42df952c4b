"""What bench/pull_dispatch.py and bench/broker_dispatch.py share: a minimal admin side.

``BenchAdmin`` answers the executor API a bench needs (``api/registry`` remembers addresses,
``api/callback`` counts results by run id, ``api/pull`` is the admin's own PullApi) and
``serving`` runs it on uvicorn; ``trigger_body`` makes /run bodies whose run ids never repeat.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import time
from collections.abc import AsyncIterator, Callable

import orjson
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from jobring.admin.api.executor_api import GlobalToken
from jobring.admin.api.pull_api import PullApi
from jobring.admin.dispatch.pull import PullHub
from jobring.protocol.models import ACCESS_TOKEN_HEADER, TriggerParam, dumps

_OK = b'{"code":200}'


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class BenchAdmin:
    """The admin's executor API, as far as a dispatch bench needs it (``token``: the global one)."""

    def __init__(self, token: str, *, max_boxes: int = 1_000, max_polls: int = 1_000) -> None:
        self.hub = PullHub(lambda: time.monotonic_ns() // 1_000_000, max_boxes=max_boxes, max_polls=max_polls)
        self.pull = PullApi(self.hub)
        self.tokens = GlobalToken(token)
        self.done: set[int] = set()  # run ids whose result came
        self.addresses: set[str] = set()  # registered so far
        self.address: str | None = None  # the last one registered
        self.registered = asyncio.Event()
        self.changed = asyncio.Event()  # a registration or a result
        self.next_id = [1]

    async def endpoint(self, request: Request) -> Response:
        uri = request.path_params["uri"]
        body = await request.body()
        scope = await self.tokens.scope(request.headers.get(ACCESS_TOKEN_HEADER))
        assert scope is not None
        if uri == "pull":
            answer, status = await self.pull.poll(body, scope, None, request.receive)
            return Response(answer.encode(), status_code=status, media_type="application/json")
        if uri == "registry":
            self.address = orjson.loads(body)["registryValue"]
            self.addresses.add(self.address)
            self.registered.set()
            self.changed.set()
        elif uri == "callback":
            items = orjson.loads(body)
            for item in items if isinstance(items, list) else items["callbackList"]:
                self.done.add(item["logId"])
            self.changed.set()
        return Response(_OK, media_type="application/json")

    def trigger_body(self) -> Callable[[], tuple[int, bytes]]:
        """A maker of /run bodies for the no-op handler: (run id, body); ids never repeat."""
        next_id = self.next_id

        def body() -> tuple[int, bytes]:
            log_id = next_id[0]
            next_id[0] += 1
            param = TriggerParam(job_id=log_id % 1000 + 1, executor_handler="noop", log_id=log_id,
                                 log_date_time=1795350973184, executor_block_strategy="CONCURRENT_EXECUTION")
            return log_id, dumps(param.to_dict())

        return body


@contextlib.asynccontextmanager
async def serving(admin: BenchAdmin) -> AsyncIterator[int]:
    """``admin`` served on a free port of 127.0.0.1 (yields the port); the hub's polls are
    released and the server stopped at the end."""
    app = Starlette(routes=[Route("/api/{uri:path}", admin.endpoint, methods=["POST"])])
    port = free_port()
    config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", http="httptools",
                            loop="uvloop", lifespan="off")
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve())
    while not server.started:  # noqa: ASYNC110 (uvicorn offers no event)
        await asyncio.sleep(0.05)
    try:
        yield port
    finally:
        admin.hub.release()
        server.should_exit = True
        with contextlib.suppress(asyncio.CancelledError):
            await task
