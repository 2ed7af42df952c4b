"""The audit log through the API: every audited action leaves one record with the right
actor, source, target and before/after, and never a secret; filters; failures to write."""

from __future__ import annotations

import logging
from typing import Any

import orjson
import pytest

from jobring.admin.security.roles import Role
from jobring.admin.security.sessions import CSRF_HEADER
from jobring.admin.store import Store
from tests.admin.api_harness import ACCESS_TOKEN, PASSWORD, ApiEnv, api_env
from tests.store.transactions_kit import killed_at_write

CLIENT_ADDRESS = "127.0.0.1"  # what httpx's ASGITransport reports as the client


async def _audit(env: ApiEnv, **params: Any) -> list[dict[str, Any]]:
    async with env.client("admin") as http:
        r = await http.get("/audit", params={"limit": 500, **params})
    assert r.status_code == 200, r.text
    items: list[dict[str, Any]] = r.json()["items"]
    return items


async def _one(env: ApiEnv, action: str) -> dict[str, Any]:
    records = await _audit(env, action=action)
    assert len(records) == 1, records
    return records[0]


def _no_secret(env: ApiEnv, records: list[dict[str, Any]], *secrets: str) -> None:
    text = orjson.dumps(records).decode()
    for secret in (*secrets, *env.tokens.values(), ACCESS_TOKEN, PASSWORD):
        assert secret not in text


async def test_logins_failed_and_successful_with_name_and_address(sqlite_store: Store) -> None:
    async with api_env(sqlite_store) as env, env.client() as http:
        alice = await env.add_user("alice", Role.OPERATOR, [env.group_a], password=PASSWORD)
        assert (
            await http.post("/auth/login", json={"username": "alice", "password": "wrong pw 1"})
        ).status_code == 401
        assert (
            await http.post("/auth/login", json={"username": "mallory", "password": "x"})
        ).status_code == 401
        ok = await http.post("/auth/login", json={"username": "alice", "password": PASSWORD})
        assert ok.status_code == 200
        await http.post("/auth/logout", headers={CSRF_HEADER: ok.json()["csrf_token"]})
        failed = await _audit(env, action="auth.login_failed")
        assert [(r["actor"], r["actor_id"], r["actor_kind"], r["outcome"], r["source"]) for r in failed] == [
            ("mallory", None, "anonymous", "failure", CLIENT_ADDRESS),
            ("alice", alice, "anonymous", "failure", CLIENT_ADDRESS),
        ]
        login = await _one(env, "auth.login")
        assert (login["actor"], login["actor_id"], login["actor_kind"], login["outcome"]) == (
            "alice",
            alice,
            "session",
            "success",
        )
        logout = await _one(env, "auth.logout")
        assert logout["actor_kind"] == "session" and logout["actor_id"] == alice
        records = await _audit(env, action="auth")
        assert len(records) == 4
        _no_secret(env, records, "wrong pw 1")
        assert all("password" not in orjson.dumps(r["details"]).decode() for r in records)


async def test_password_change_and_tokens(sqlite_store: Store) -> None:
    async with api_env(sqlite_store) as env, env.client() as http:
        alice = await env.add_user("alice", Role.OPERATOR, [env.group_a], password=PASSWORD)
        csrf = (await http.post("/auth/login", json={"username": "alice", "password": PASSWORD})).json()[
            "csrf_token"
        ]
        headers = {CSRF_HEADER: csrf}
        bad = {"current_password": "not it at all", "new_password": "a new long password"}
        assert (await http.post("/users/me/password", json=bad, headers=headers)).status_code == 403
        good = {"current_password": PASSWORD, "new_password": "a new long password"}
        changed = await http.post("/users/me/password", json=good, headers=headers)
        assert changed.status_code == 200
        headers = {CSRF_HEADER: changed.json()["csrf_token"]}
        created = (await http.post("/tokens", json={"name": "laptop"}, headers=headers)).json()
        assert (await http.delete(f"/tokens/{created['id']}", headers=headers)).status_code == 204
        changes = await _audit(env, action="auth.password_change")
        assert [r["outcome"] for r in changes] == ["success", "failure"]
        assert all(r["target_type"] == "user" and r["target_id"] == str(alice) for r in changes)
        token = await _one(env, "token.create")
        assert (token["target_type"], token["target_id"], token["details"]) == (
            "token",
            str(created["id"]),
            {"name": "laptop"},
        )
        assert (await _one(env, "token.revoke"))["target_id"] == str(created["id"])
        _no_secret(env, await _audit(env), created["token"], "a new long password", "not it at all")


async def test_token_use_is_attributed_to_the_token(sqlite_store: Store) -> None:
    async with api_env(sqlite_store) as env, env.client("op_in") as http:
        r = await http.post(
            "/jobs", json={"job_group": env.group_a, "job_desc": "j", "executor_handler": "h"}
        )
        assert r.status_code == 201
        [token] = await sqlite_store.tokens.list_for_user(env.user_ids["op_in"])
        record = await _one(env, "job.create")
        assert (record["actor"], record["actor_id"], record["actor_kind"], record["token_id"]) == (
            "op_in",
            env.user_ids["op_in"],
            "api_token",
            token.id,
        )
        assert record["source"] == CLIENT_ADDRESS and record["group_id"] == env.group_a


async def test_users_create_update_reset_delete(sqlite_store: Store) -> None:
    async with api_env(sqlite_store) as env, env.client("admin") as http:
        body = {
            "username": "bob",
            "password": "bob's long password",
            "role": "viewer",
            "group_ids": [env.group_a],
        }
        bob = (await http.post("/users", json=body)).json()["id"]
        patch = {"role": "operator", "group_ids": [env.group_a, env.group_b], "password": "reset password 42"}
        assert (await http.patch(f"/users/{bob}", json=patch)).status_code == 200
        assert (await http.delete(f"/users/{bob}")).status_code == 204
        created = await _one(env, "user.create")
        assert created["target_id"] == str(bob) and created["details"]["after"] == {
            "username": "bob",
            "role": "viewer",
            "group_ids": [env.group_a],
            "glue_permission": False,
            "must_change_password": True,
        }
        updated = await _one(env, "user.update")
        assert updated["details"] == {
            "changes": {
                "role": {"before": "viewer", "after": "operator"},
                "group_ids": {"before": [env.group_a], "after": [env.group_a, env.group_b]},
            }
        }
        reset = await _one(env, "user.password_reset")
        assert reset["target_id"] == str(bob) and reset["details"] is None
        deleted = await _one(env, "user.delete")
        assert deleted["details"]["before"]["username"] == "bob"
        _no_secret(env, await _audit(env), "bob's long password", "reset password 42")


async def test_groups_create_address_change_delete(sqlite_store: Store) -> None:
    async with api_env(sqlite_store) as env, env.client("admin") as http:
        body = {
            "app_name": "billing",
            "title": "Billing",
            "address_type": 1,
            "addresses": ["http://10.0.0.7:9999/"],
        }
        group = (await http.post("/groups", json=body)).json()["id"]
        body["addresses"] = ["http://10.0.0.8:9999/"]
        assert (await http.put(f"/groups/{group}", json=body)).status_code == 200
        assert (await http.delete(f"/groups/{group}")).status_code == 204
        created = await _one(env, "group.create")
        assert created["group_id"] == group and created["details"]["after"]["addresses"] == [
            "http://10.0.0.7:9999/"
        ]
        assert (await _one(env, "group.update"))["details"] == {
            "changes": {
                "addresses": {"before": ["http://10.0.0.7:9999/"], "after": ["http://10.0.0.8:9999/"]}
            }
        }
        assert (await _one(env, "group.delete"))["details"]["before"]["app_name"] == "billing"


async def test_job_lifecycle_records_only_changed_fields(sqlite_store: Store) -> None:
    async with api_env(sqlite_store) as env, env.client("op_in") as http:
        body = {
            "job_group": env.group_a,
            "job_desc": "report",
            "executor_handler": "report",
            "schedule_type": "CRON",
            "schedule_conf": "0 0 2 * * ?",
        }
        job = (await http.post("/jobs", json=body)).json()["id"]
        await http.patch(f"/jobs/{job}", json={"job_desc": "nightly report", "author": "ops"})
        await http.post(f"/jobs/{job}/start")
        await http.post(f"/jobs/{job}/stop")
        trigger = await http.post(f"/jobs/{job}/trigger", json={"executor_param": "full"})
        assert trigger.status_code == 200
        copy = (await http.post(f"/jobs/{job}/copy")).json()["id"]
        assert (await http.delete(f"/jobs/{copy}")).status_code == 204
        records = await _audit(env, target_type="job", target_id=str(job))
        assert [r["action"] for r in records] == [
            "job.trigger",
            "job.stop",
            "job.start",
            "job.update",
            "job.create",
        ]
        assert all(r["group_id"] == env.group_a and r["actor"] == "op_in" for r in records)
        created = records[-1]["details"]["after"]
        assert created["job_desc"] == "report" and created["schedule_conf"] == "0 0 2 * * ?"
        assert records[-2]["details"] == {
            "changes": {
                "job_desc": {"before": "report", "after": "nightly report"},
                "author": {"before": None, "after": "ops"},
            }
        }
        triggered = records[0]
        assert triggered["outcome"] == "success"
        assert triggered["details"]["executor_param"] == "full" and triggered["details"]["log_ids"]
        copies = await _audit(env, target_type="job", target_id=str(copy))
        assert [r["action"] for r in copies] == ["job.delete", "job.create"]
        assert copies[1]["details"]["copied_from"] == job
        assert copies[0]["details"]["before"]["job_desc"] == "nightly report (copy)"


async def test_failed_trigger_is_recorded_as_a_failure(sqlite_store: Store) -> None:
    async with api_env(sqlite_store) as env, env.client("admin") as http:
        job = await env.add_job(env.group_b)  # an automatic group with no executor online
        r = await http.post(f"/jobs/{job}/trigger")
        assert r.status_code == 200 and r.json()["trigger_code"] != 200
        record = await _one(env, "job.trigger")
        assert record["outcome"] == "failure" and record["group_id"] == env.group_b


async def test_glue_save_and_restore_keep_digests_not_sources(sqlite_store: Store) -> None:
    async with api_env(sqlite_store) as env, env.client("admin") as http:
        job = await env.add_job(env.group_a, glue_type="GLUE_SHELL", glue_source="echo first")
        secret_source = "curl -u admin:hunter2hunter2 http://internal/"
        r = await http.put(f"/jobs/{job}/glue", json={"glue_source": secret_source, "glue_remark": "v2"})
        assert r.status_code == 200
        [version] = [v["id"] for v in (await http.get(f"/jobs/{job}/glue/versions")).json()]
        assert (await http.post(f"/jobs/{job}/glue/versions/{version}/restore")).status_code == 200
        saved = await _one(env, "glue.save")
        source = saved["details"]["changes"]["glue_source"]
        assert source["before"]["length"] == len("echo first") and source["after"]["length"] == len(
            secret_source
        )
        assert saved["details"]["glue_remark"] == "v2" and saved["target_id"] == str(job)
        restored = await _one(env, "glue.restore")
        assert restored["details"]["restored_version"] == version
        _no_secret(env, await _audit(env), "hunter2hunter2", "echo first")


async def test_kill_and_clear(sqlite_store: Store) -> None:
    async with api_env(sqlite_store) as env, env.client("op_in") as http:
        job = await env.add_job(env.group_a)
        run = await env.add_run(job, env.group_a)
        assert (await http.post(f"/runs/{run}/kill")).json()["killed"]
        cleared = await http.post("/runs/clear", json={"rule": "all", "job_group": env.group_a})
        assert cleared.status_code == 200
        kill = await _one(env, "run.kill")
        assert (kill["target_type"], kill["target_id"], kill["group_id"], kill["outcome"]) == (
            "run",
            str(run),
            env.group_a,
            "success",
        )
        clear = await _one(env, "runs.clear")
        assert clear["group_id"] == env.group_a and clear["details"] == {
            "rule": "all",
            "job_id": None,
            "deleted": 1,
        }


async def test_a_clear_that_fails_midway_is_audited_with_what_it_deleted(sqlite_store: Store) -> None:
    # A clear is many short writes (one run each here): the third one fails.
    sqlite_store.db.bulk_rows = 1
    async with api_env(sqlite_store) as env, env.client("op_in") as http:
        job = await env.add_job(env.group_a)
        for _ in range(3):
            await env.add_run(job, env.group_a)
        with killed_at_write(sqlite_store, 3):
            broken = await http.post("/runs/clear", json={"rule": "all", "job_group": env.group_a})
        assert broken.status_code == 500
        failed = await _one(env, "runs.clear")
        assert (failed["outcome"], failed["details"]["deleted"]) == ("failure", 2)
        again = await http.post("/runs/clear", json={"rule": "all", "job_group": env.group_a})
        assert again.json() == {"deleted": 1}
        records = await _audit(env, action="runs.clear")
        assert [(r["outcome"], r["details"]["deleted"]) for r in records] == [("success", 1), ("failure", 2)]


async def test_reading_the_access_token_is_recorded_without_it(sqlite_store: Store) -> None:
    async with api_env(sqlite_store) as env, env.client("admin") as http:
        assert (await http.get("/settings/access-token")).json()["access_token"] == ACCESS_TOKEN
        record = await _one(env, "settings.secret_read")
        assert record["target_id"] == "access_token" and record["actor"] == "admin"
        _no_secret(env, [record])


async def test_xxl3_job_calls_are_recorded_as_the_token_user(sqlite_store: Store) -> None:
    async with api_env(sqlite_store) as env, env.raw_client() as http:
        headers = {"XXL-JOB-ACCESS-TOKEN": env.tokens["admin"]}

        async def call(name: str, body: dict[str, Any]) -> dict[str, Any]:
            answer: dict[str, Any] = (await http.post(f"/api/{name}", json=body, headers=headers)).json()
            assert answer["code"] == 200, answer
            return answer

        job = int(
            (
                await call(
                    "addJob",
                    {
                        "jobGroup": env.group_a,
                        "jobDesc": "x",
                        "executorHandler": "h",
                        "scheduleType": "CRON",
                        "scheduleConf": "0 0 * * * ?",
                    },
                )
            )["content"]
        )
        await call("updateJob", {"id": job, "jobDesc": "y"})
        await call("startJob", {"id": job})
        await call("stopJob", {"id": job})
        await call("triggerJob", {"id": job, "executorParam": "p"})
        await call("removeJob", {"id": job})
        records = await _audit(env, target_id=str(job))
        assert [r["action"] for r in records] == [
            "job.delete",
            "job.trigger",
            "job.stop",
            "job.start",
            "job.update",
            "job.create",
        ]
        assert {(r["actor"], r["actor_kind"], r["actor_id"], r["source"]) for r in records} == {
            ("admin", "api_token", env.user_ids["admin"], CLIENT_ADDRESS)
        }
        assert records[4]["details"] == {"changes": {"job_desc": {"before": "x", "after": "y"}}}
        _no_secret(env, records)


async def test_filters(sqlite_store: Store) -> None:
    async with api_env(sqlite_store) as env:
        a = await env.add_job(env.group_a)
        b = await env.add_job(env.group_b)
        async with env.client("op_in") as http:
            await http.post(f"/jobs/{a}/start")
        env.clock.advance(3_600_000)
        async with env.client("admin") as http:
            await http.post(f"/jobs/{b}/start")
            await http.post(f"/jobs/{b}/stop")
        starts = await _audit(env, action="job.start")
        assert [r["actor"] for r in starts] == ["admin", "op_in"]
        assert [r["at"] for r in starts] == ["2026-01-01T01:00:00Z", "2026-01-01T00:00:00Z"]
        assert [r["action"] for r in await _audit(env, actor="admin")] == ["job.stop", "job.start"]
        assert [r["action"] for r in await _audit(env, actor_id=env.user_ids["op_in"])] == ["job.start"]
        assert [r["target_id"] for r in await _audit(env, group_id=env.group_a)] == [str(a)]
        later = "2026-01-01T00:30:00Z"
        assert [r["target_id"] for r in await _audit(env, since=later)] == [str(b), str(b)]
        assert [r["target_id"] for r in await _audit(env, until=later)] == [str(a)]
        assert await _audit(env, outcome="failure") == []
        newest = (await _audit(env))[0]["id"]
        assert len(await _audit(env, before_id=newest)) == 2
        async with env.client("admin") as http:
            page = (await http.get("/audit", params={"limit": 1, "offset": 1})).json()
            assert page["total"] == 3 and page["items"][0]["action"] == "job.start"
            bad = await http.get("/audit", params={"since": "yesterday"})
            assert bad.status_code == 422 and bad.json()["field"] == "since"
            assert (await http.get("/audit", params={"outcome": "maybe"})).status_code == 422


async def test_only_admins_read_the_audit_log(sqlite_store: Store) -> None:
    async with api_env(sqlite_store) as env:
        for role in ("op_in", "viewer"):
            async with env.client(role) as http:
                r = await http.get("/audit")
            assert r.status_code == 403 and r.json()["error"]
        async with env.client() as http:
            assert (await http.get("/audit")).status_code == 401


async def test_a_failed_audit_write_is_logged_and_the_action_stands(
    sqlite_store: Store, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    async def broken(event: object) -> int:
        raise RuntimeError("disk full")

    async with api_env(sqlite_store) as env, env.client("admin") as http:
        job = await env.add_job(env.group_a)
        monkeypatch.setattr(sqlite_store.audit, "insert", broken)
        with caplog.at_level(logging.ERROR, logger="jobring.admin.services.audit"):
            r = await http.post(f"/jobs/{job}/start")
        assert r.status_code == 200
        [message] = [rec.getMessage() for rec in caplog.records if rec.levelno == logging.ERROR]
        assert "audit record NOT stored" in message and "job.start" in message and "disk full" in message


async def test_a_transient_audit_write_failure_is_retried(
    sqlite_store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    from sqlalchemy.exc import TimeoutError as PoolTimeout

    async with api_env(sqlite_store) as env, env.client("admin") as http:
        job = await env.add_job(env.group_a)
        real = sqlite_store.audit.insert
        failures = [PoolTimeout("pool exhausted")]

        async def flaky(event: Any) -> int:
            if failures:
                raise failures.pop()
            return await real(event)

        monkeypatch.setattr(sqlite_store.audit, "insert", flaky)
        assert (await http.post(f"/jobs/{job}/start")).status_code == 200
        monkeypatch.setattr(sqlite_store.audit, "insert", real)
        assert (await _one(env, "job.start"))["target_id"] == str(job)
