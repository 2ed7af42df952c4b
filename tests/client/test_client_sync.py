"""The blocking client against the real app: it runs in a worker thread and reaches the app
on the test's loop through ``LoopBridgeTransport``."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from jobring.client import AdminApiError, AdminClient, AdminConnectionError
from tests.client.adminkit import ADMIN_PASSWORD, BASE_URL, AdminEnv, LoopBridgeTransport


def _client(env: AdminEnv, *, token: str | None) -> AdminClient:
    transport = LoopBridgeTransport(env.app, asyncio.get_running_loop())
    return AdminClient(BASE_URL, token=token, transport=transport)


async def test_sync_client_creates_starts_and_triggers_with_a_token(env: AdminEnv) -> None:
    group = await env.group()

    def script(admin: AdminClient) -> tuple[dict[str, object], dict[str, object], int]:
        with admin:
            job = admin.jobs.create({"job_group": group, "job_desc": "sync", "executor_handler": "h",
                                     "schedule_type": "FIX_RATE", "schedule_conf": "10"})
            started = admin.jobs.start(int(job["id"]))
            fired = admin.jobs.trigger(int(job["id"]), executor_param="p")
            return started, fired, admin.runs.list(job=int(job["id"])).total

    started, fired, runs = await asyncio.to_thread(script, _client(env, token=env.token))
    assert started["trigger_status"] == 1 and fired["trigger_code"] == 200 and runs == 1
    assert [c.body["executorParams"] for c in env.executors.runs()] == ["p"]


async def test_sync_client_session_login_write_and_logout(env: AdminEnv) -> None:
    def script(admin: AdminClient) -> tuple[str, int, int]:
        with admin:
            me = admin.login("admin", ADMIN_PASSWORD)
            created = admin.groups.create("sync-app", "Sync")  # a write: needs the CSRF header
            admin.logout()
            try:
                admin.auth.me()
            except AdminApiError as exc:
                return str(me["auth"]), int(created["id"]), exc.status
            raise AssertionError("the session outlived logout")

    auth, group_id, status_after = await asyncio.to_thread(script, _client(env, token=None))
    assert auth == "session" and status_after == 401
    assert (await env.store.groups.get(group_id)) is not None


async def test_sync_client_raises_the_server_error_with_its_field(env: AdminEnv) -> None:
    def script(admin: AdminClient) -> AdminApiError:
        with admin, pytest.raises(AdminApiError) as info:
            admin.jobs.preview("CRON", "61 * * * * ?")
        return info.value

    error = await asyncio.to_thread(script, _client(env, token=env.token))
    assert error.status in (400, 422) and error.field == "schedule_conf" and error.message


def test_sync_client_connection_error_names_the_url() -> None:
    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectTimeout("timed out", request=request)

    transport = httpx.MockTransport(refuse)
    with AdminClient("http://10.255.0.1:8080", token="jr_x", transport=transport) as admin, pytest.raises(
        AdminConnectionError
    ) as info:
        admin.dashboard.get()
    assert info.value.url == "http://10.255.0.1:8080" and "timed out" in str(info.value)


def test_requests_carry_the_api_prefix_query_and_auth() -> None:
    seen: list[httpx.Request] = []

    def record(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, json={"items": [], "total": 0, "offset": 0, "limit": 5})

    with AdminClient("http://admin:8080/", token="jr_t", transport=httpx.MockTransport(record)) as admin:
        page = admin.jobs.list(group=3, trigger_status=1, desc="a b", limit=5)
    assert page.total == 0 and page.items == []
    (request,) = seen
    assert request.url.path == "/api/v1/jobs"
    assert dict(request.url.params) == {"job_group": "3", "trigger_status": "1", "desc": "a b", "offset": "0",
                                        "limit": "5"}
    assert request.headers["authorization"] == "Bearer jr_t" and "x-csrf-token" not in request.headers


def test_unexpected_answer_shape_is_an_error_not_a_crash() -> None:
    def wrong(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json=[1, 2, 3])

    transport = httpx.MockTransport(wrong)
    with AdminClient("http://admin", token="jr_t", transport=transport) as admin, pytest.raises(
        AdminApiError
    ) as info:
        admin.jobs.get(1)
    assert "unexpected answer to GET /jobs/1" in info.value.message


async def test_sync_client_trigger_at(env: AdminEnv) -> None:
    from datetime import timedelta

    group = await env.group()

    def script(admin: AdminClient) -> tuple[dict[str, object], int]:
        with admin:
            job = admin.jobs.create({"job_group": group, "job_desc": "later", "executor_handler": "h"})
            pending = admin.jobs.trigger_at(int(job["id"]), delay=timedelta(seconds=90), params="p")
            return pending, len(admin.jobs.delayed(int(job["id"])))

    pending, count = await asyncio.to_thread(script, _client(env, token=env.token))
    assert pending["state"] == "scheduled" and pending["executor_param"] == "p" and count == 1
