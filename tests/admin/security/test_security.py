"""Authentication: sessions and their cookies, CSRF, API tokens, forced password change,
login rate limiting."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from sqlalchemy import text

from jobring.admin.security.passwords import PasswordWorkers
from jobring.admin.security.roles import Role
from jobring.admin.security.sessions import CSRF_COOKIE, CSRF_HEADER, SESSION_COOKIE, hash_session_id
from jobring.admin.services.settings import AdminSettings
from jobring.admin.store import Store
from tests.admin.api_harness import PASSWORD, ApiEnv, api_env


async def _login(http: httpx.AsyncClient, username: str, password: str = PASSWORD) -> httpx.Response:
    return await http.post("/auth/login", json={"username": username, "password": password})


async def _operator(env: ApiEnv, name: str = "alice", *, must_change: bool = False) -> int:
    return await env.add_user(name, Role.OPERATOR, [env.group_a], password=PASSWORD, must_change=must_change)


async def test_login_sets_hardened_cookies_and_returns_the_csrf_token(sqlite_store: Store) -> None:
    async with api_env(sqlite_store) as env, env.client() as http:
        await _operator(env)
        r = await _login(http, "alice")
        assert r.status_code == 200, r.text
        body = r.json()
        assert body["user"]["username"] == "alice" and body["user"]["role"] == "operator"
        assert body["auth"] == "session" and body["csrf_token"]
        cookies = r.headers.get_list("set-cookie")
        session = next(c for c in cookies if c.startswith(SESSION_COOKIE + "="))
        assert "HttpOnly" in session and "samesite=lax" in session.lower() and "Secure" not in session
        csrf = next(c for c in cookies if c.startswith(CSRF_COOKIE + "="))
        assert "HttpOnly" not in csrf and body["csrf_token"] in csrf
        me = await http.get("/auth/me")
        assert me.status_code == 200 and me.json()["csrf_token"] == body["csrf_token"]


async def test_secure_cookies_when_configured(sqlite_store: Store) -> None:
    settings = AdminSettings(secure_cookies=True)
    async with api_env(sqlite_store, settings=settings) as env, env.client() as http:
        await _operator(env)
        r = await _login(http, "alice")
        assert all("Secure" in c for c in r.headers.get_list("set-cookie"))


async def test_unsafe_methods_need_the_csrf_header_with_a_session(sqlite_store: Store) -> None:
    async with api_env(sqlite_store) as env, env.client() as http:
        await _operator(env)
        csrf = (await _login(http, "alice")).json()["csrf_token"]
        job = {"job_group": env.group_a, "job_desc": "x", "executor_handler": "h"}
        refused = await http.post("/jobs", json=job)
        assert refused.status_code == 403 and CSRF_HEADER in refused.json()["error"]
        wrong = await http.post("/jobs", json=job, headers={CSRF_HEADER: csrf + "x"})
        assert wrong.status_code == 403
        assert (await sqlite_store.jobs.list()).total == 0
        ok = await http.post("/jobs", json=job, headers={CSRF_HEADER: csrf})
        assert ok.status_code == 201, ok.text
        # Reads need no CSRF token.
        assert (await http.get("/jobs")).status_code == 200


async def test_wrong_password_and_unknown_user_look_the_same(
    sqlite_store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with api_env(sqlite_store) as env, env.client() as http:
        await _operator(env)
        argon2_calls: list[str] = []
        workers = env.services.passwords
        run = workers.run

        async def counted(work: Any, *args: object) -> Any:
            argon2_calls.append(work.__name__)
            return await run(work, *args)

        monkeypatch.setattr(workers, "run", counted)
        a = await _login(http, "alice", "wrong password")
        b = await _login(http, "nobody", "wrong password")
        assert a.status_code == b.status_code == 401
        assert a.json() == b.json()
        assert SESSION_COOKIE not in http.cookies
        # The unknown user costs one argon2 computation too (a hash: as costly as a verify).
        assert argon2_calls == ["verify_password", "hash_password"]


async def test_a_user_without_an_argon2_hash_never_logs_in(sqlite_store: Store) -> None:
    async with api_env(sqlite_store) as env, env.client() as http:
        await env.add_user("legacy", Role.OPERATOR, [env.group_a])  # adopted: MD5 only, no hash
        for guess in ("jobring-no-such-user", "123456", ""):
            assert (await _login(http, "legacy", guess or "x")).status_code == 401


async def test_forged_or_expired_session_is_refused(sqlite_store: Store) -> None:
    async with api_env(sqlite_store) as env, env.client() as http:
        await _operator(env)
        await _login(http, "alice")
        good = http.cookies[SESSION_COOKIE]
        http.cookies.set(SESSION_COOKIE, good[:-2] + ("AA" if not good.endswith("AA") else "BB"))
        assert (await http.get("/auth/me")).status_code == 401
        http.cookies.set(SESSION_COOKIE, "../" + good)
        assert (await http.get("/auth/me")).status_code == 401
        http.cookies.set(SESSION_COOKIE, good)
        assert (await http.get("/auth/me")).status_code == 200
        env.clock.advance(env.services.session_max_age_s * 1000)
        assert (await http.get("/auth/me")).status_code == 401


async def test_the_database_keeps_only_a_hash_of_the_session_id(sqlite_store: Store) -> None:
    async with api_env(sqlite_store) as env, env.client() as http:
        await _operator(env)
        await _login(http, "alice")
        cookie = http.cookies[SESSION_COOKIE]
        assert await sqlite_store.sessions.get(cookie) is None
        stored = await sqlite_store.sessions.get(hash_session_id(cookie))
        assert stored is not None and not stored.revoked


async def test_role_permission_glue_and_reset_changes_and_deletion_end_sessions_and_tokens(
    sqlite_store: Store,
) -> None:
    async with api_env(sqlite_store) as env, env.client("admin") as admin:
        alice = await _operator(env)
        password = PASSWORD
        for change in ({"role": "viewer"}, {"group_ids": [env.group_b]}, {"glue_permission": True},
                       {"password": "reset password 2026"}, None):
            token = await env.add_token(alice)
            async with env.client() as http, env.client() as script:
                script.headers["Authorization"] = f"Bearer {token}"
                assert (await _login(http, "alice", password)).status_code == 200
                assert (await http.get("/auth/me")).status_code == 200
                assert (await script.get("/auth/me")).status_code == 200
                if change is None:
                    assert (await admin.delete(f"/users/{alice}")).status_code == 204
                else:
                    answer = await admin.patch(f"/users/{alice}", json=change)
                    assert answer.status_code == 200
                    assert answer.json()["revoked"] == {"sessions": 1, "tokens": 1}, change
                    password = change.get("password", password)
                assert (await http.get("/auth/me")).status_code == 401, change
                assert (await script.get("/auth/me")).status_code == 401, change
        revocations = [e for e in (await env.store.audit.list(limit=100)).items
                       if e.action == "user.access_revoke"]
        assert len(revocations) == 5
        assert all(e.target_id == str(alice) and e.actor == "admin" for e in revocations)


async def test_a_rename_keeps_sessions_and_tokens(sqlite_store: Store) -> None:
    async with api_env(sqlite_store) as env, env.client("admin") as admin, env.client() as http:
        alice = await _operator(env)
        await _login(http, "alice")
        answer = await admin.patch(f"/users/{alice}", json={"username": "alice2"})
        assert answer.status_code == 200 and answer.json()["revoked"] is None
        assert (await http.get("/auth/me")).status_code == 200


async def test_must_change_password_limits_the_user_until_changed(sqlite_store: Store) -> None:
    async with api_env(sqlite_store) as env, env.client() as http:
        await _operator(env, must_change=True)
        login = await _login(http, "alice")
        assert login.status_code == 200 and login.json()["user"]["must_change_password"]
        csrf = {CSRF_HEADER: login.json()["csrf_token"]}
        blocked = await http.get("/jobs")
        assert blocked.status_code == 403 and "change your password" in blocked.json()["error"]
        assert (await http.post("/tokens", json={"name": "t"}, headers=csrf)).status_code == 403
        assert (await http.get("/auth/me")).status_code == 200
        wrong = await http.post(
            "/users/me/password",
            headers=csrf,
            json={"current_password": "nope", "new_password": "a new password"},
        )
        assert wrong.status_code == 403 and wrong.json()["field"] == "current_password"
        short = await http.post(
            "/users/me/password", headers=csrf, json={"current_password": PASSWORD, "new_password": "short"}
        )
        assert short.status_code == 422 and short.json()["field"] == "new_password"
        changed = await http.post(
            "/users/me/password",
            headers=csrf,
            json={"current_password": PASSWORD, "new_password": "a new password"},
        )
        assert changed.status_code == 200, changed.text
        assert not changed.json()["user"]["must_change_password"]
        # The answer carries a fresh session (the old one ended with the old password).
        assert (await http.get("/jobs")).status_code == 200
        user = await sqlite_store.users.by_username("alice")
        assert user is not None and not user.must_change_password


async def test_password_change_ends_other_sessions(sqlite_store: Store) -> None:
    async with api_env(sqlite_store) as env, env.client() as first, env.client() as second:
        await _operator(env)
        await _login(first, "alice")
        csrf = (await _login(second, "alice")).json()["csrf_token"]
        r = await second.post(
            "/users/me/password",
            headers={CSRF_HEADER: csrf},
            json={"current_password": PASSWORD, "new_password": "another password"},
        )
        assert r.status_code == 200
        assert (await first.get("/auth/me")).status_code == 401
        assert (await second.get("/auth/me")).status_code == 200


async def test_logout_ends_the_session_on_the_server(sqlite_store: Store) -> None:
    async with api_env(sqlite_store) as env, env.client() as http, env.client() as thief:
        await _operator(env)
        csrf = (await _login(http, "alice")).json()["csrf_token"]
        thief.cookies.set(SESSION_COOKIE, http.cookies[SESSION_COOKIE])
        assert (await thief.get("/auth/me")).status_code == 200
        r = await http.post("/auth/logout", headers={CSRF_HEADER: csrf})
        assert r.status_code == 204
        assert SESSION_COOKIE not in http.cookies
        assert (await http.get("/auth/me")).status_code == 401
        # The copied cookie is dead too: the session was revoked, not just forgotten by the browser.
        assert (await thief.get("/auth/me")).status_code == 401


async def test_login_backoff_is_per_user_and_address(sqlite_store: Store) -> None:
    async with api_env(sqlite_store) as env, env.client() as http:
        await _operator(env)
        limiter = env.services.limiter
        for _ in range(limiter.free_failures):
            assert (await _login(http, "alice", "bad guess")).status_code == 401
        limited = await _login(http, "alice")  # even the right password waits, from this address
        assert limited.status_code == 429
        assert int(limited.headers["Retry-After"]) == limiter.base_delay_ms // 1000
        # The real user from another address is not locked out.
        other = httpx.AsyncClient(transport=httpx.ASGITransport(app=env.asgi, client=("10.1.2.3", 5000)),
                                  base_url="http://admin.test/api/v1")
        async with other:
            assert (await _login(other, "alice")).status_code == 200
        env.clock.advance(limiter.base_delay_ms)
        assert (await _login(http, "alice")).status_code == 200


async def test_a_flood_of_logins_is_refused_before_hashing(sqlite_store: Store) -> None:
    async with api_env(sqlite_store) as env, env.client() as http:
        await _operator(env)
        env.services.passwords = PasswordWorkers(workers=1, max_pending=0)
        busy = await _login(http, "alice")
        assert busy.status_code == 429 and busy.headers["Retry-After"] == "1"


async def test_api_token_lifecycle(sqlite_store: Store) -> None:
    async with api_env(sqlite_store) as env, env.client("op_in") as http:
        created = await http.post("/tokens", json={"name": "ci"})
        assert created.status_code == 201
        token = created.json()["token"]
        assert token.startswith("jr_")
        stored = await sqlite_store.tokens.list_for_user(env.user_ids["op_in"])
        assert all(t.token_hash != token for t in stored)  # only the hash is kept
        listed = (await http.get("/tokens")).json()
        assert created.json()["id"] in [t["id"] for t in listed] and all("token" not in t for t in listed)
        async with env.client() as other:
            other.headers["Authorization"] = f"Bearer {token}"
            me = await other.get("/auth/me")
            assert me.status_code == 200 and me.json()["auth"] == "token"
            # A token needs no CSRF header.
            r = await other.post(
                "/jobs", json={"job_group": env.group_a, "job_desc": "x", "executor_handler": "h"}
            )
            assert r.status_code == 201
            assert (await http.delete(f"/tokens/{created.json()['id']}")).status_code == 204
            assert (await other.get("/auth/me")).status_code == 401


@pytest.mark.parametrize("header", ["Bearer jr_not-a-real-token-000000", "Basic abc", "Bearer ", "jr_x"])
async def test_bad_authorization_headers(sqlite_store: Store, header: str) -> None:
    async with api_env(sqlite_store) as env, env.client() as http:
        r = await http.get("/jobs", headers={"Authorization": header})
        assert r.status_code == 401 and r.headers["WWW-Authenticate"] == "Bearer"


async def test_token_expiry(sqlite_store: Store) -> None:
    async with api_env(sqlite_store) as env, env.client("op_in") as http:
        created = await http.post("/tokens", json={"name": "ci", "expires_in_days": 2})
        assert created.status_code == 201, created.text
        assert created.json()["expires_at"].startswith("2026-01-03T00:00:00")
        listed = {t["id"]: t for t in (await http.get("/tokens")).json()}
        assert listed[created.json()["id"]]["expires_at"] == created.json()["expires_at"]
        for bad in ({"expires_in_days": 0}, {"expires_at": "2025-12-31T00:00:00Z"},
                    {"expires_in_days": 1, "expires_at": "2026-02-01T00:00:00Z"}):
            refused = await http.post("/tokens", json={"name": "x", **bad})
            assert refused.status_code == 422 and refused.json()["field"], bad
        at = await http.post("/tokens", json={"name": "at", "expires_at": "2026-01-01T06:00:00+02:00"})
        assert at.status_code == 201 and at.json()["expires_at"].startswith("2026-01-01T04:00:00")
        async with env.client() as other:
            other.headers["Authorization"] = f"Bearer {created.json()['token']}"
            assert (await other.get("/auth/me")).status_code == 200
            env.clock.advance(2 * 86_400_000)
            expired = await other.get("/auth/me")
            assert expired.status_code == 401 and "expired" in expired.json()["error"]


async def test_token_last_use_is_recorded(sqlite_store: Store) -> None:
    async with api_env(sqlite_store) as env, env.client("viewer") as http:
        assert (await http.get("/auth/me")).status_code == 200
        (token,) = await sqlite_store.tokens.list_for_user(env.user_ids["viewer"])
        assert token.last_used_time is not None


async def test_a_token_cannot_create_a_token_that_outlives_it(sqlite_store: Store) -> None:
    async with api_env(sqlite_store) as env, env.client("op_in") as http:
        # A token without expiry may create any token: here one that lives 4 s.
        parent = await http.post("/tokens", json={"name": "short", "expires_at": "2026-01-01T00:00:04Z"})
        assert parent.status_code == 201, parent.text
        async with env.client() as short:
            short.headers["Authorization"] = f"Bearer {parent.json()['token']}"
            for outliving in ({}, {"expires_in_days": 1}, {"expires_at": "2026-01-01T00:00:05Z"}):
                refused = await short.post("/tokens", json={"name": "longer", **outliving})
                assert refused.status_code == 422, (outliving, refused.text)
                assert refused.json()["field"] in ("expires_at", "expires_in_days")
            child = await short.post("/tokens", json={"name": "child", "expires_at": "2026-01-01T00:00:04Z"})
            assert child.status_code == 201, child.text
            assert child.json()["parent_token_id"] == parent.json()["id"]
            async with env.client() as grand:
                grand.headers["Authorization"] = f"Bearer {child.json()['token']}"
                assert (await grand.get("/auth/me")).status_code == 200
                env.clock.advance(4_000)
                assert (await grand.get("/auth/me")).status_code == 401
                assert (await short.get("/auth/me")).status_code == 401
        listed = {t["name"]: t for t in (await http.get("/tokens")).json()}
        assert set(listed) == {"test", "short", "child"}


async def test_revoking_a_token_revokes_what_it_created(sqlite_store: Store) -> None:
    async with api_env(sqlite_store) as env, env.client("op_in") as http, \
            env.client() as first, env.client() as second:
        made = (await http.post("/tokens", json={"name": "first"})).json()
        first.headers["Authorization"] = f"Bearer {made['token']}"
        child = (await first.post("/tokens", json={"name": "second"})).json()
        second.headers["Authorization"] = f"Bearer {child['token']}"
        assert (await second.get("/auth/me")).status_code == 200
        assert (await http.delete(f"/tokens/{made['id']}")).status_code == 204
        assert (await second.get("/auth/me")).status_code == 401
        assert (await http.get("/auth/me")).status_code == 200  # the token of the call is not its child
        record = next(e for e in (await env.store.audit.list(limit=50)).items if e.action == "token.revoke")
        assert record.details is not None and str(child["id"]) in record.details


async def test_changing_your_password_revokes_your_tokens(sqlite_store: Store) -> None:
    async with api_env(sqlite_store) as env, env.client() as http, env.client() as script:
        alice = await _operator(env)
        script.headers["Authorization"] = f"Bearer {await env.add_token(alice)}"
        csrf = (await _login(http, "alice")).json()["csrf_token"]
        changed = await http.post("/users/me/password", headers={CSRF_HEADER: csrf}, json={
            "current_password": PASSWORD, "new_password": "a fresh password 2027"})
        assert changed.status_code == 200, changed.text
        assert changed.json()["revoked"] == {"sessions": 1, "tokens": 1}
        assert (await script.get("/auth/me")).status_code == 401
        # The session that changed it goes on with the new session of the answer.
        assert (await http.get("/auth/me")).status_code == 200


async def test_a_token_whose_ancestor_is_no_longer_valid_is_refused(sqlite_store: Store) -> None:
    from jobring.admin.api.management.deps import MAX_TOKEN_CHAIN
    from jobring.admin.security.tokens import generate_api_token, hash_api_token
    from tests.admin.api_harness import at

    async with api_env(sqlite_store) as env:
        user = env.user_ids["op_in"]
        chain: list[tuple[int, str]] = []
        parent: int | None = None
        for n in range(MAX_TOKEN_CHAIN + 1):
            secret = generate_api_token()
            parent = await sqlite_store.tokens.create(
                user, f"t{n}", hash_api_token(secret), at(env.clock.now_ms()), parent_token_id=parent)
            chain.append((parent, secret))
        async with env.client() as http:
            # The end of the longest chain allowed works, but may not make it longer.
            http.headers["Authorization"] = f"Bearer {chain[-1][1]}"
            assert (await http.get("/auth/me")).status_code == 200
            assert (await http.post("/tokens", json={"name": "longer"})).status_code == 409
            http.headers["Authorization"] = f"Bearer {chain[-2][1]}"
            assert (await http.post("/tokens", json={"name": "sibling"})).status_code == 201
            # An ancestor revoked without its descendants (a child made while it was revoked).
            async with sqlite_store.engine.begin() as conn:
                await conn.execute(text("UPDATE jobring_api_token SET revoked = 1 WHERE id = :id"),
                                   {"id": chain[3][0]})
            for _, secret in chain[4:]:
                http.headers["Authorization"] = f"Bearer {secret}"
                assert (await http.get("/auth/me")).status_code == 401
            http.headers["Authorization"] = f"Bearer {chain[2][1]}"
            assert (await http.get("/auth/me")).status_code == 200
