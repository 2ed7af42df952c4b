"""A management API under test: the app mounted at /api/v1 over a real Store, a manual
clock, a real TriggerService and ExecutorClient talking to an in-process executor double,
and users of every role with API tokens."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import httpx
from fastapi import FastAPI
from starlette.applications import Starlette
from starlette.routing import Mount

from jobring.admin.api.management import ManagementServices, management_app, xxl3_api_routes
from jobring.admin.api.management.declared import declare_api_routes
from jobring.admin.dispatch.client import ExecutorClient
from jobring.admin.security.passwords import hash_password
from jobring.admin.security.roles import Role
from jobring.admin.security.tokens import generate_api_token, hash_api_token
from jobring.admin.services.bootstrap import Secrets
from jobring.admin.services.settings import AdminSettings
from jobring.admin.store import Store
from jobring.admin.store.records import JobGroup, JobInfo, NewLog
from jobring.admin.trigger.trigger import TriggerService
from jobring.core.clock import ManualClock
from jobring.protocol.models import LogResult, ReturnT
from tests.admin.executor_double import ExecutorDouble

T0 = 1_767_225_600_000  # 2026-01-01T00:00:00Z
HOSTS = ["exec-a:9999", "exec-b:9999"]
ACCESS_TOKEN = "executor-token-for-tests"
PASSWORD = "correct horse battery"


def at(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, tz=UTC).replace(tzinfo=None)


@dataclass
class ApiEnv:
    store: Store
    services: ManagementServices
    clock: ManualClock
    double: ExecutorDouble
    asgi: Starlette
    tokens: dict[str, str] = field(default_factory=dict)
    user_ids: dict[str, int] = field(default_factory=dict)
    group_a: int = 0
    group_b: int = 0

    def client(self, role: str | None = None, **kwargs: Any) -> httpx.AsyncClient:
        """A client authenticated with ``role``'s API token (None: anonymous)."""
        headers = {"Authorization": f"Bearer {self.tokens[role]}"} if role else {}
        return httpx.AsyncClient(
            transport=httpx.ASGITransport(app=self.asgi),
            base_url="http://admin.test/api/v1",
            headers=headers,
            **kwargs,
        )

    def raw_client(self) -> httpx.AsyncClient:
        return httpx.AsyncClient(transport=httpx.ASGITransport(app=self.asgi), base_url="http://admin.test")

    async def add_user(
        self,
        name: str,
        role: Role,
        groups: list[int],
        *,
        glue: bool = False,
        password: str | None = None,
        must_change: bool = False,
    ) -> int:
        user_id = await self.store.users.create(
            username=name,
            role=int(role),
            password_hash=hash_password(password) if password else None,
            permission=",".join(map(str, groups)) or None,
            glue_permission=glue,
            must_change_password=must_change,
        )
        return user_id

    async def add_token(self, user_id: int) -> str:
        token = generate_api_token()
        await self.store.tokens.create(user_id, "test", hash_api_token(token), at(self.clock.now_ms()))
        return token

    async def add_job(self, group: int, **fields: Any) -> int:
        values: dict[str, Any] = {
            "job_desc": "a job",
            "executor_handler": "demo",
            "schedule_type": "CRON",
            "schedule_conf": "0 0 * * * ?",
        }
        values.update(fields)
        return await self.store.jobs.create(JobInfo(job_group=group, **values))

    async def add_run(
        self,
        job_id: int,
        group: int,
        *,
        handle_code: int = 0,
        trigger_code: int = 200,
        address: str | None = None,
    ) -> int:
        return await self.store.logs.insert(
            NewLog(
                job_group=group,
                job_id=job_id,
                trigger_time=at(self.clock.now_ms()),
                executor_handler="demo",
                executor_address=address or self.double.address(0),
                trigger_code=trigger_code,
                handle_code=handle_code,
                trigger_type="MANUAL",
            )
        )


async def _log_answer(body: dict[str, Any]) -> ReturnT:
    first = int(body.get("fromLineNum", 1))
    lines = [f"line {n} of run {body.get('logId')}" for n in range(first, 4)]
    return ReturnT.success(LogResult(first, first + len(lines) - 1, "\n".join(lines), False).to_dict())


_APP: list[FastAPI] = []


def _shared_app(services: ManagementServices) -> FastAPI:
    # Building the FastAPI app costs more than most tests; tests run one at a time, so one
    # app serves them all with the current test's services swapped in.
    if not _APP:
        _APP.append(management_app(services))
    _APP[0].state.services = services
    return _APP[0]


ROLES = ("admin", "op_in", "op_out", "viewer")


@asynccontextmanager
async def api_env(
    store: Store, *, glue_enabled: bool = True, users: bool = True, settings: AdminSettings | None = None
) -> AsyncIterator[ApiEnv]:
    """Groups A (manual, the double's addresses) and B; users admin, op_in (operator on A, with
    GLUE permission), op_out (operator on B), viewer (on A); one API token each."""
    clock = ManualClock(T0)
    double = ExecutorDouble(list(HOSTS))
    client = ExecutorClient(access_token=ACCESS_TOKEN, connect=double.connect)
    trigger = TriggerService(
        store, client, node_id="api-test", clock=clock, admin_timezone="UTC"
    )
    services = ManagementServices(
        store=store,
        settings=settings or AdminSettings(glue_enabled=glue_enabled),
        secrets=Secrets(access_token=ACCESS_TOKEN, session_secret="session-secret-for-tests"),
        trigger=trigger,
        executors=client,
        clock=clock,
    )
    asgi = Starlette(routes=[
        *xxl3_api_routes(services), *declare_api_routes(services), Mount("/api/v1", app=_shared_app(services))
    ])
    env = ApiEnv(store, services, clock, double, asgi)
    for address in double.addresses:
        double.answer(address, "log", _log_answer)
    now = at(T0)
    env.group_a = await store.groups.create(
        JobGroup(app_name="app-a", title="A", address_type=1, address_list=",".join(double.addresses)), now
    )
    env.group_b = await store.groups.create(JobGroup(app_name="app-b", title="B", address_type=0), now)
    if users:
        specs = {
            "admin": (Role.ADMIN, [], False),
            "op_in": (Role.OPERATOR, [env.group_a], True),
            "op_out": (Role.OPERATOR, [env.group_b], True),
            "viewer": (Role.VIEWER, [env.group_a], False),
        }
        for name, (role, groups, glue) in specs.items():
            env.user_ids[name] = await env.add_user(name, role, groups, glue=glue)
            env.tokens[name] = await env.add_token(env.user_ids[name])
    try:
        yield env
    finally:
        await trigger.close()
        await client.aclose()
