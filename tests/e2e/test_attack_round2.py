"""Security issue #19, items 4, 6 and 7(b), attacked end to end: real admin processes, the
`jobring` CLI as a process, direct HTTP with an executor group's token for declarations and a
real executor process for child jobs. Each test passes only because every attack fails.
"""

from __future__ import annotations

import asyncio
import os
import re
import sqlite3
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.e2e.admin_nodes import AdminNode, kill, start_admin, stop
from tests.e2e.security_kit import eventually, logged_in

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(420)]

DECLARE = "/xxl-job-admin/api/jobring/declareJobs"
# What a database error's text is made of: the statement, the tables, the bound values.
SQL_TEXT = re.compile(r"SELECT|INSERT|UPDATE |FROM |xxl_job|\[SQL|\[parameters|sqlite3", re.I)


def _url(tmp_path: Path, name: str) -> str:
    return f"sqlite+aiosqlite:///{tmp_path / (name + '.db')}"


async def _user(admin: httpx.AsyncClient, name: str, password: str, **fields: Any) -> int:
    made = await admin.post("/users", json={"username": name, "password": password, "role": "operator",
                                            "must_change_password": False, **fields})
    assert made.status_code == 201, made.text
    return int(made.json()["id"])


def _bearer(node: AdminNode, token: str) -> httpx.AsyncClient:
    return httpx.AsyncClient(base_url=node.base_url + "/api/v1", timeout=30,
                             headers={"Authorization": f"Bearer {token}"})


async def _token(http: httpx.AsyncClient, name: str, **expiry: Any) -> dict[str, Any]:
    made = await http.post("/tokens", json={"name": name, **expiry})
    assert made.status_code == 201, made.text
    body: dict[str, Any] = made.json()
    return body


async def _refused(node: AdminNode, token: str) -> bool | None:
    async with _bearer(node, token) as http:
        return True if (await http.get("/auth/me")).status_code == 401 else None


def _iso(at: datetime) -> str:
    return at.astimezone(UTC).isoformat().replace("+00:00", "Z")


async def _cli(*args: str) -> tuple[int, str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("JOBRING_")}
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", "import sys; from jobring.cli import main; sys.exit(main())", *args,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=env)
    out, err = await asyncio.wait_for(proc.communicate(), 120)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


async def test_item4_tokens_outlive_neither_their_parent_token_nor_a_password_or_role_change(
    tmp_path: Path,
) -> None:
    url = _url(tmp_path, "tokens")
    node = await start_admin(url, "tokens", tmp_path)
    try:
        async with logged_in(node) as admin:
            alice = await _user(admin, "alice", "alice-password-2026")
            async with logged_in(node, "alice", "alice-password-2026") as session:
                long_lived = await _token(session, "laptop")
            # The attack: a token that expires in 4 s made a token that never expires.
            short_until = datetime.now(UTC) + timedelta(seconds=4)
            async with _bearer(node, long_lived["token"]) as laptop:
                short = await _token(laptop, "short", expires_at=_iso(short_until))
            async with _bearer(node, short["token"]) as stolen:
                later = _iso(short_until + timedelta(hours=1))
                for outliving in ({}, {"expires_in_days": 30}, {"expires_at": later}):
                    answer = await stolen.post("/tokens", json={"name": "forever", **outliving})
                    assert answer.status_code == 422, (outliving, answer.text)
                child = await _token(stolen, "child", expires_at=_iso(short_until))
            assert child["parent_token_id"] == short["id"]
            await eventually(lambda: _refused(node, child["token"]), "the child token to expire")
            assert await _refused(node, short["token"])

            # An admin's password reset revokes every API token and session of the user.
            async with logged_in(node, "alice", "alice-password-2026") as session:
                reset = await admin.patch(f"/users/{alice}", json={"password": "reset-by-admin-2026"})
                assert reset.status_code == 200, reset.text
                # Both of alice's sessions, and her one token still alive (the others expired).
                assert reset.json()["revoked"] == {"sessions": 2, "tokens": 1}
                assert (await session.get("/auth/me")).status_code == 401
            assert await _refused(node, long_lived["token"])

            # A role change too.
            bob = await _user(admin, "bob", "bob-password-2026")
            async with logged_in(node, "bob", "bob-password-2026") as session:
                bobs = await _token(session, "ci")
            demoted = await admin.patch(f"/users/{bob}", json={"role": "viewer"})
            assert demoted.json()["revoked"] == {"sessions": 1, "tokens": 1}
            assert await _refused(node, bobs["token"])

            # And `jobring users reset-password --offline`, while the admin keeps running.
            async with logged_in(node, "bob", "bob-password-2026") as session:
                again = await _token(session, "ci again")
            code, out, err = await _cli("users", "reset-password", "bob", "--offline", "--database-url", url)
            assert code == 0, err
            assert out.strip() and "1 session ended and 1 API token revoked" in err
            assert await _refused(node, again["token"])
            audit = (await admin.get("/audit", params={"action": "user.access_revoke", "limit": 50})).json()
            assert {r["details"]["reason"] for r in audit["items"]} >= {"password_reset", "role_change"}
    finally:
        await kill(node)


async def _group_with_token(admin: httpx.AsyncClient, app_name: str) -> tuple[int, str]:
    made = await admin.post("/groups", json={"app_name": app_name, "title": app_name[:12]})
    assert made.status_code == 201, made.text
    group = int(made.json()["id"])
    token = (await admin.post(f"/groups/{group}/access-token/rotate")).json()["access_token"]
    return group, str(token)


async def _declare(
    node: AdminNode, token: str, app_name: str, handlers: list[dict[str, Any]]
) -> dict[str, Any]:
    async with httpx.AsyncClient(base_url=node.base_url, timeout=120) as http:
        answer = await http.post(DECLARE, headers={"XXL-JOB-ACCESS-TOKEN": token},
                                 json={"appname": app_name, "declarations": handlers})
    assert answer.status_code == 200, answer.text
    body: dict[str, Any] = answer.json()
    return body


def _rate(prefix: str, count: int) -> list[dict[str, Any]]:
    return [{"handler": f"{prefix}{n}", "fields": {"schedule_type": "FIX_RATE", "schedule_conf": "3600"}}
            for n in range(count)]


async def _jobs(admin: httpx.AsyncClient, group: int) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    while True:
        params = {"job_group": group, "offset": len(items), "limit": 500}
        page = (await admin.get("/jobs", params=params)).json()
        items += page["items"]
        if len(items) >= page["total"]:
            return items


async def test_item6_an_executor_token_manages_only_its_own_declared_jobs_within_caps(
    tmp_path: Path,
) -> None:
    url = _url(tmp_path, "declared")
    env = {"JOBRING_DECLARED_JOBS_RETIRED_GRACE_DAYS": "0"}
    node = await start_admin(url, "declared", tmp_path, env=env)
    try:
        async with logged_in(node) as admin:
            group, token = await _group_with_token(admin, "team-app")
            made = await admin.post("/jobs", json={
                "job_group": group, "job_desc": "made in the console", "executor_handler": "nightly",
                "executor_param": "keep", "alarm_email": "ops@example.com"})
            console_job = made.json()
            # (a) The attack: the group token adopted and started the console's job.
            hijack = [{"handler": "nightly", "start": True, "fields": {
                "schedule_type": "CRON", "schedule_conf": "0 * * * * ?", "executor_param": "evil",
                "alarm_email": "attacker@example.com", "executor_fail_retry_count": 9}}]
            answer = await _declare(node, token, "team-app", hijack)
            assert answer["code"] == 200 and [s["job_id"] for s in answer["content"]["skipped"]] == [
                console_job["id"]]
            now = (await admin.get(f"/jobs/{console_job['id']}")).json()
            assert now == console_job
            # (c) Declared alarm targets work (the attack got a 500 quoting the SQL).
            targets = [{"kind": "webhook", "url": "https://hooks.example.com/jobs"}]
            answer = await _declare(node, token, "team-app", [
                {"handler": "report", "fields": {"schedule_type": "NONE", "alarm_targets": targets}}])
            assert answer["code"] == 200, answer
            report = next(j for j in await _jobs(admin, group) if j["executor_handler"] == "report")
            assert report["alarm_targets"] == targets and report["managed_by"] == "code"
            # (b) The attack: 1,000 handlers in one request, then 300 renamed to 300 more.
            answer = await _declare(node, token, "team-app", _rate("h", 600))
            assert answer["code"] == 500 and "JOBRING_DECLARED_JOBS_MAX_PER_GROUP" in answer["msg"]
            assert (await _declare(node, token, "team-app", _rate("a", 300)))["code"] == 200
            answer = await _declare(node, token, "team-app", _rate("b", 300))
            assert answer["code"] == 500 and "at most 500" in answer["msg"], answer
            jobs = await _jobs(admin, group)
            assert len(jobs) == 302 and not any(j["executor_handler"].startswith("b") for j in jobs)
            # Retired jobs are stopped at once and deleted after the grace period (0 days here).
            answer = await _declare(node, token, "team-app", _rate("a", 10))
            assert len(answer["content"]["stopped"]) == 290  # a10..a299 (report went with the a's)
            retired = [j for j in await _jobs(admin, group) if j["declared_retired_at"]]
            assert len(retired) == 291 and all(j["trigger_status"] == 0 for j in retired)
        # The retirement monitor runs at start and then every 10 minutes: a restart makes it run.
        port = node.port
        assert await stop(node) == 0
        node = await start_admin(url, "declared-2", tmp_path, env=env, port=port)
        async with logged_in(node) as admin:

            async def cleaned() -> list[dict[str, Any]] | None:
                jobs = await _jobs(admin, group)
                return jobs if len(jobs) == 11 else None

            left = await eventually(cleaned, "the retired declared jobs to be deleted", 120)
            expected = sorted(["nightly", *(f"a{n}" for n in range(10))])
            assert sorted(j["executor_handler"] for j in left) == expected

            async def audited() -> bool | None:
                params = {"action": "job.declared_delete", "limit": 1}
                return True if (await admin.get("/audit", params=params)).json()["total"] == 291 else None

            await eventually(audited, "an audit record per deleted job")
    finally:
        await kill(node)


async def test_item6c_a_database_error_is_answered_without_sql(tmp_path: Path) -> None:
    url = _url(tmp_path, "nosql")
    node = await start_admin(url, "nosql", tmp_path)
    try:
        async with logged_in(node) as admin:
            group, token = await _group_with_token(admin, "team-app")
            with sqlite3.connect(tmp_path / "nosql.db") as db:
                db.execute("ALTER TABLE xxl_job_info RENAME TO moved_away")
                db.execute("ALTER TABLE xxl_job_registry RENAME TO moved_registry")
            secret = "param-secret-4711"
            answers = [
                await admin.get("/jobs", params={"desc": secret}),
                await admin.post("/jobs", json={"job_group": group, "job_desc": secret,
                                                "executor_handler": "h"}),
            ]
            async with httpx.AsyncClient(base_url=node.base_url, timeout=30) as http:
                headers = {"XXL-JOB-ACCESS-TOKEN": token}
                declaration = {"handler": "x", "fields": {"executor_param": secret}}
                answers.append(await http.post(DECLARE, headers=headers, json={
                    "appname": "team-app", "declarations": [declaration]}))
                answers.append(await http.post("/xxl-job-admin/api/registry", headers=headers, json={
                    "registryGroup": "EXECUTOR", "registryKey": "team-app",
                    "registryValue": "http://127.0.0.1:9/"}))
        log_text = node.log_text()
        for answer in answers:
            assert answer.status_code == 500, answer.text
            assert not SQL_TEXT.search(answer.text) and secret not in answer.text, answer.text
            error_id = re.search(r"[0-9a-f]{12}", answer.text)
            assert error_id and f"internal error {error_id.group(0)}" in log_text, answer.text
        assert answers[0].json()["error"] == "internal error"
        assert "[SQL:" in log_text  # the details are in the admin's log, not in the answers
    finally:
        await kill(node)


@asynccontextmanager
async def _demo_executor(node: AdminNode, token: str, workdir: Path) -> AsyncIterator[None]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("JOBRING_")}
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", "import sys; from jobring.cli import main; sys.exit(main())",
        "executor", "jobring.demo:executor", "--host", "127.0.0.1", "--port", "0", "--ip", "127.0.0.1",
        "--admin", node.base_url + "/xxl-job-admin/", "--token", token,
        "--log-path", str(workdir / "runlogs"),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL, env=env)
    try:
        assert proc.stdout is not None
        line = (await asyncio.wait_for(proc.stdout.readline(), 60)).decode()
        assert re.search(r"listening on 127\.0\.0\.1:\d+", line), line
        yield
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()


async def test_item7b_one_trigger_of_a_child_tree_fires_at_most_the_budget(tmp_path: Path) -> None:
    url = _url(tmp_path, "children")
    node = await start_admin(url, "children", tmp_path)
    try:
        async with logged_in(node) as admin:
            group, token = await _group_with_token(admin, "jobring-demo")
            await _user(admin, "olga", "olga-password-2026", group_ids=[group])

            async def job(desc: str, children: list[int]) -> int:
                made = await admin.post("/jobs", json={"job_group": group, "job_desc": desc,
                                                       "executor_handler": "hello",
                                                       "child_job_ids": children})
                assert made.status_code == 201, made.text
                return int(made.json()["id"])

            leaves = [await job(f"leaf {n}", []) for n in range(8)]
            middles = [await job(f"middle {n}", leaves) for n in range(8)]
            tops = [await job(f"top {n}", middles) for n in range(8)]
            root = await job("root", tops)
            # Cycles are refused, also through several jobs (root -> top -> middle -> root).
            async with logged_in(node, "olga", "olga-password-2026") as olga:
                cycle = await olga.patch(f"/jobs/{middles[0]}", json={"child_job_ids": [root]})
                assert cycle.status_code == 409 and cycle.json()["field"] == "child_job_ids", cycle.text
            async with _demo_executor(node, token, tmp_path):

                async def online() -> bool | None:
                    return True if (await admin.get(f"/groups/{group}")).json().get("online") else None

                await eventually(online, "the demo executor to register", 60)
                triggered = await admin.post(f"/jobs/{root}/trigger")
                assert triggered.status_code == 200, triggered.text
                root_run = triggered.json()["log_ids"][0]

                async def settled() -> list[dict[str, Any]] | None:
                    params = {"job_group": group, "limit": 500}
                    runs = (await admin.get("/runs", params=params)).json()["items"]
                    done = [r for r in runs if r["state"] not in ("running", "scheduled", "dispatching")]
                    return runs if len(runs) == 101 and len(done) == 101 else None

                runs = await eventually(settled, "the tree to settle", 180)
            # The attack made 585 runs from one trigger (8 + 64 + 512 children); the budget is 100.
            assert len([r for r in runs if r["trigger_type"] == "PARENT"]) == 100
            with sqlite3.connect(tmp_path / "children.db") as db:
                used, = db.execute("SELECT child_fires FROM xxl_job_log WHERE id = ?", (root_run,)).fetchone()
                roots = {r for (r,) in db.execute(
                    "SELECT DISTINCT root_run_id FROM xxl_job_log WHERE root_run_id IS NOT NULL")}
            assert (used, roots) == (100, {root_run})
            messages = [r["handle_msg"] or "" for r in runs]
            assert any("used up their budget of 100 child fires" in m for m in messages)
    finally:
        await kill(node)
