"""The real management API in-process, for client and CLI tests.

``admin_env`` builds the app on a SQLite store (the ``sqlite_store`` fixture), with a
trigger service whose executors are ``tests.admin.executor_double.ExecutorDouble``, and
an API token for the bootstrapped ``admin`` user. ``LoopBridgeTransport`` lets the
blocking client (and the CLI) call that app on the test's own event loop from a thread.
"""

from __future__ import annotations

import asyncio
import functools
import io
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import httpx
from starlette.applications import Starlette
from starlette.routing import Mount

from jobring.admin.api.management.app import management_app
from jobring.admin.api.management.services import ManagementServices
from jobring.admin.dispatch.client import ExecutorClient
from jobring.admin.security.passwords import hash_password
from jobring.admin.security.roles import Role
from jobring.admin.security.tokens import generate_api_token, hash_api_token
from jobring.admin.services.bootstrap import ADMIN_USERNAME, bootstrap
from jobring.admin.services.settings import AdminSettings
from jobring.admin.store import Store
from jobring.admin.trigger.trigger import TriggerService
from jobring.client import AsyncAdminClient
from jobring.core.clock import ManualClock
from tests.admin.executor_double import ExecutorDouble

BASE_URL = "http://admin.test"
ADMIN_PASSWORD = "Correct-Horse-Battery-9"
T0 = 1_790_000_000_000  # epoch ms, the admin's (manual) clock
EXECUTOR_HOSTS = ["10.0.0.1:9999", "10.0.0.2:9999"]
BRIDGE_TIMEOUT_S = 30.0


@dataclass
class AdminEnv:
    app: Starlette
    store: Store
    services: ManagementServices
    executors: ExecutorDouble
    clock: ManualClock
    token: str

    def transport(self) -> httpx.ASGITransport:
        return httpx.ASGITransport(app=self.app)

    def client(self, *, token: str | None = None, with_token: bool = True) -> AsyncAdminClient:
        """An async client of the app; the admin's token unless told otherwise."""
        use = token if token is not None else (self.token if with_token else None)
        return AsyncAdminClient(BASE_URL, token=use, transport=self.transport())

    async def group(self, app_name: str = "demo-app", title: str = "Demo") -> int:
        async with self.client() as admin:
            created = await admin.groups.create(app_name, title, addresses=self.executors.addresses)
        return int(created["id"])

    async def job(self, group_id: int, **fields: Any) -> dict[str, Any]:
        body: dict[str, Any] = {
            "job_group": group_id, "job_desc": "demo job", "executor_handler": "demoJobHandler",
            "schedule_type": "CRON", "schedule_conf": "0 0 * * * ?",
        }
        body.update(fields)
        async with self.client() as admin:
            return await admin.jobs.create(body)


@functools.cache
def _admin_password_hash() -> str:
    # argon2 takes about a second here: hash once per session, not once per test.
    return hash_password(ADMIN_PASSWORD)


async def _admin_token(store: Store, now: datetime) -> str:
    """The first user, created as bootstrap would, and an API token of theirs."""
    await store.users.create(username=ADMIN_USERNAME, role=int(Role.ADMIN),
                             password_hash=_admin_password_hash(), must_change_password=False,
                             glue_permission=True)
    user = await store.users.by_username(ADMIN_USERNAME)
    assert user is not None
    token = generate_api_token()
    await store.tokens.create(user.id, "tests", hash_api_token(token), now)
    return token


async def admin_env(store: Store, *, glue_enabled: bool = False) -> AsyncIterator[AdminEnv]:
    """The management app on ``store`` (body of a fixture)."""
    settings = AdminSettings(database_url="sqlite+aiosqlite://", timezone="UTC", glue_enabled=glue_enabled)
    token = await _admin_token(store, datetime.fromtimestamp(T0 / 1000, tz=UTC).replace(tzinfo=None))
    secrets = await bootstrap(store, settings, out=io.StringIO())
    clock = ManualClock(T0)
    double = ExecutorDouble(list(EXECUTOR_HOSTS))
    executors = ExecutorClient(access_token=secrets.access_token, connect=double.connect)
    trigger = TriggerService(store, executors, node_id="node-a",
                             clock=clock, admin_timezone="UTC")
    services = ManagementServices(store, settings, secrets, trigger=trigger, executors=executors, clock=clock)
    app = Starlette(routes=[Mount("/api/v1", app=management_app(services))])
    try:
        yield AdminEnv(app, store, services, double, clock, token)
    finally:
        await trigger.close()
        await executors.aclose()


class LoopBridgeTransport(httpx.BaseTransport):
    """A blocking transport that hands each request to an ASGI app on ``loop``.

    The blocking client runs in a worker thread (``asyncio.to_thread``) while the test's
    loop, which owns the app and its store, keeps serving.
    """

    def __init__(self, app: Any, loop: asyncio.AbstractEventLoop) -> None:
        self._inner = httpx.ASGITransport(app=app)
        self._loop = loop

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        content = request.read()

        async def forward() -> tuple[int, list[tuple[bytes, bytes]], bytes]:
            copy = httpx.Request(request.method, request.url, headers=request.headers, content=content)
            response = await self._inner.handle_async_request(copy)
            body = await response.aread()
            return response.status_code, response.headers.raw, body

        future = asyncio.run_coroutine_threadsafe(forward(), self._loop)
        status, headers, body = future.result(timeout=BRIDGE_TIMEOUT_S)
        return httpx.Response(status, headers=headers, content=body, request=request)


def log_answer(lines: Mapping[int, str], *, end_after: int) -> Any:
    """An executor /log answer serving ``lines`` (1-based); ``is_end`` once the reader has
    passed ``end_after``."""
    from jobring.protocol.models import ReturnT

    async def answer(body: dict[str, Any]) -> ReturnT:
        start = int(body["fromLineNum"])
        chosen = [lines[n] for n in sorted(lines) if n >= start]
        to_line = start + len(chosen) - 1
        content = {
            "fromLineNum": start, "toLineNum": to_line, "logContent": "".join(f"{line}\n" for line in chosen),
            "isEnd": to_line >= end_after,
        }
        return ReturnT(code=200, msg=None, content=content)

    return answer
