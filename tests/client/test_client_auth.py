from __future__ import annotations

import httpx
import pytest

from jobring.client import AdminApiError, AdminConnectionError, AsyncAdminClient
from tests.client.adminkit import ADMIN_PASSWORD, BASE_URL, AdminEnv


async def test_token_authenticates_every_call(env: AdminEnv) -> None:
    async with env.client() as admin:
        me = await admin.auth.me()
    assert me["user"]["username"] == "admin" and me["auth"] == "token"


async def test_without_credentials_the_server_message_is_raised(env: AdminEnv) -> None:
    async with env.client(with_token=False) as anonymous:
        with pytest.raises(AdminApiError) as info:
            await anonymous.jobs.list()
    assert info.value.status == 401 and "authentication required" in info.value.message


async def test_a_wrong_token_is_refused(env: AdminEnv) -> None:
    async with env.client(token="jr_" + "x" * 43) as admin:
        with pytest.raises(AdminApiError) as info:
            await admin.auth.me()
    assert info.value.status == 401 and "token" in info.value.message


async def test_login_session_sends_cookie_and_csrf_header_then_logout_ends_it(env: AdminEnv) -> None:
    seen: list[httpx.Request] = []
    inner = env.transport()

    class Recording(httpx.AsyncBaseTransport):
        async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
            seen.append(request)
            return await inner.handle_async_request(request)

    group = await env.group()
    async with AsyncAdminClient(BASE_URL, transport=Recording()) as admin:
        login = await admin.login("admin", ADMIN_PASSWORD)
        assert login["auth"] == "session" and login["user"]["role"] == "admin"
        # An unsafe method through a session is refused without the CSRF header; the
        # client sends it, so this write succeeds.
        job = await admin.jobs.create({"job_group": group, "job_desc": "via session",
                                       "executor_handler": "h"})
        write = seen[-1]
        assert write.method == "POST" and write.headers["X-CSRF-Token"] == login["csrf_token"]
        assert "jobring_session=" in write.headers["cookie"] and "authorization" not in write.headers
        assert (await admin.jobs.get(job["id"]))["job_desc"] == "via session"
        await admin.logout()
        with pytest.raises(AdminApiError) as info:
            await admin.auth.me()
    assert info.value.status == 401


async def test_session_write_without_csrf_header_is_refused_by_the_server(env: AdminEnv) -> None:
    async with AsyncAdminClient(BASE_URL, transport=env.transport()) as admin:
        await admin.login("admin", ADMIN_PASSWORD)
        # Forget the token the client learned (and the readable cookie): the server must refuse.
        admin._core.csrf_token = None
        admin._http.cookies.delete("jobring_csrf")
        with pytest.raises(AdminApiError) as info:
            await admin.tokens.create("no-csrf")
    assert info.value.status == 403 and "X-CSRF-Token" in info.value.message


async def test_wrong_password_raises_401_with_the_server_message(env: AdminEnv) -> None:
    async with env.client(with_token=False) as admin:
        with pytest.raises(AdminApiError) as info:
            await admin.login("admin", "not-the-password")
    assert info.value.status == 401 and info.value.message


async def test_token_created_through_a_session_works_alone_and_can_be_revoked(env: AdminEnv) -> None:
    async with env.client() as admin:
        created = await admin.tokens.create("ci")
        assert created["token"].startswith("jr_")
        assert "ci" in [t["name"] for t in await admin.tokens.list()]
    async with env.client(token=created["token"]) as ci:
        assert (await ci.auth.me())["user"]["username"] == "admin"
        await ci.tokens.revoke(created["id"])
        with pytest.raises(AdminApiError) as info:
            await ci.auth.me()
    assert info.value.status == 401 and "revoked" in info.value.message


async def test_unreachable_admin_raises_a_connection_error() -> None:
    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused", request=request)

    transport = httpx.MockTransport(refuse)
    async with AsyncAdminClient("http://127.0.0.1:9", token="jr_x", transport=transport) as c:
        with pytest.raises(AdminConnectionError) as info:
            await c.jobs.list()
    assert str(info.value).startswith("cannot reach the admin at http://127.0.0.1:9")


async def test_non_json_error_page_is_reported_by_its_text() -> None:
    def proxy(request: httpx.Request) -> httpx.Response:
        return httpx.Response(502, text="Bad Gateway from the proxy", headers={"content-type": "text/plain"})

    async with AsyncAdminClient("http://admin", token="jr_x", transport=httpx.MockTransport(proxy)) as c:
        with pytest.raises(AdminApiError) as info:
            await c.jobs.get(1)
    assert info.value.status == 502 and info.value.message == "Bad Gateway from the proxy"
    assert not info.value.is_client_error
