"""GLUE, runs, executor groups, users and the dashboard through the REST API."""

from __future__ import annotations

from datetime import timedelta

from sqlalchemy import update

from jobring.admin.security.passwords import verify_password
from jobring.admin.security.roles import Role
from jobring.admin.services.settings import AdminSettings
from jobring.admin.store import Store
from jobring.admin.store.records import NewLog
from jobring.admin.store.tables import job_info
from tests.admin.api_harness import ACCESS_TOKEN, T0, api_env, at


async def test_glue_save_history_keeps_30_and_restore(sqlite_store: Store) -> None:
    async with api_env(sqlite_store) as env, env.client("op_in") as http:
        job = (
            await http.post(
                "/jobs",
                json={
                    "job_group": env.group_a,
                    "job_desc": "script",
                    "glue_type": "GLUE_SHELL",
                    "glue_source": "echo 0",
                },
            )
        ).json()
        for i in range(1, 33):
            r = await http.put(
                f"/jobs/{job['id']}/glue", json={"glue_source": f"echo {i}", "glue_remark": f"v{i}"}
            )
            assert r.status_code == 200, r.text
        current = (await http.get(f"/jobs/{job['id']}/glue")).json()
        assert current["glue_source"] == "echo 32" and current["glue_remark"] == "v32"
        versions = (await http.get(f"/jobs/{job['id']}/glue/versions")).json()
        assert (
            len(versions) == 30
            and versions[0]["glue_remark"] == "v32"
            and versions[-1]["glue_remark"] == "v3"
        )
        old = versions[-1]
        restored = await http.post(f"/jobs/{job['id']}/glue/versions/{old['id']}/restore")
        assert restored.status_code == 200 and restored.json()["glue_source"] == "echo 3"
        other = (
            await http.post(
                "/jobs", json={"job_group": env.group_a, "job_desc": "s2", "glue_type": "GLUE_SHELL"}
            )
        ).json()
        wrong_job = await http.post(f"/jobs/{other['id']}/glue/versions/{old['id']}/restore")
        assert wrong_job.status_code == 404


async def test_glue_disabled_or_without_permission_is_403(sqlite_store: Store) -> None:
    async with api_env(sqlite_store, glue_enabled=False) as env, env.client("admin") as http:
        job_id = await env.add_job(env.group_a, glue_type="GLUE_SHELL", glue_source="echo")
        r = await http.get(f"/jobs/{job_id}/glue")
        assert r.status_code == 403 and "GLUE is disabled" in r.json()["error"]
        r = await http.post(
            "/jobs", json={"job_group": env.group_a, "job_desc": "s", "glue_type": "GLUE_PYTHON"}
        )
        assert r.status_code == 403 and (await sqlite_store.jobs.list()).total == 1


async def test_glue_needs_the_users_glue_permission(sqlite_store: Store) -> None:
    async with api_env(sqlite_store) as env:
        job_id = await env.add_job(env.group_a, glue_type="GLUE_SHELL", glue_source="echo")
        # An operator of the group without GLUE permission.
        user = await env.add_user("no-glue", Role.OPERATOR, [env.group_a])
        env.tokens["no-glue"] = await env.add_token(user)
        async with env.client("no-glue") as http:
            r = await http.put(f"/jobs/{job_id}/glue", json={"glue_source": "rm -rf /", "glue_remark": "x"})
            assert r.status_code == 403 and "GLUE permission" in r.json()["error"]
            switch = await http.patch(f"/jobs/{job_id}", json={"job_desc": "ok"})
            assert switch.status_code == 200  # editing other fields of a GLUE job is fine
            bean = await env.add_job(env.group_a)
            to_glue = await http.patch(f"/jobs/{bean}", json={"glue_type": "GLUE_SHELL"})
            assert to_glue.status_code == 403


async def test_runs_list_detail_log_kill_and_clear(sqlite_store: Store) -> None:
    async with api_env(sqlite_store) as env, env.client("op_in") as http:
        job = await env.add_job(env.group_a)
        done = await env.add_run(job, env.group_a, handle_code=200)
        running = await env.add_run(job, env.group_a)
        failed = await env.add_run(job, env.group_a, handle_code=500)
        page = (await http.get("/runs", params={"job_id": job})).json()
        assert page["total"] == 3 and {r["id"] for r in page["items"]} == {done, running, failed}
        assert [r["id"] for r in (await http.get("/runs", params={"status": "running"})).json()["items"]] == [
            running
        ]
        assert [r["id"] for r in (await http.get("/runs", params={"status": "fail"})).json()["items"]] == [
            failed
        ]
        window = {"trigger_from": T0 + 1000, "trigger_to": T0 + 5000}
        assert (await http.get("/runs", params=window)).json()["total"] == 0
        assert (await http.get("/runs", params={"status": "sideways"})).status_code == 422
        detail = (await http.get(f"/runs/{running}")).json()
        assert detail["handle_code"] == 0 and detail["executor_address"] == env.double.address(0)
        log = (await http.get(f"/runs/{running}/log", params={"from_line": 2})).json()
        assert log["from_line_num"] == 2 and log["log_content"].startswith(f"line 2 of run {running}")
        call = env.double.calls[-1]
        assert call.path == "log" and call.body["logId"] == running and call.body["fromLineNum"] == 2
        assert call.headers["XXL-JOB-ACCESS-TOKEN"] == ACCESS_TOKEN

        killed = await http.post(f"/runs/{running}/kill")
        assert killed.status_code == 200 and killed.json()["killed"]
        assert env.double.calls[-1].path == "kill" and env.double.calls[-1].body == {"jobId": job}
        entry = await sqlite_store.logs.get(running)
        assert entry is not None and entry.handle_code == 500 and "killed by user" in (entry.handle_msg or "")
        again = await http.post(f"/runs/{running}/kill")
        assert again.status_code == 409

        env.clock.advance(int(timedelta(days=40).total_seconds() * 1000))
        newer = await env.add_run(job, env.group_a, handle_code=200)
        bad = await http.post("/runs/clear", json={"rule": "older_than_forever", "job_group": env.group_a})
        assert bad.status_code == 422 and bad.json()["field"] == "rule"
        everything = await http.post("/runs/clear", json={"rule": "older_than_1_month"})
        assert everything.status_code == 403  # an operator must name the group
        cleared = await http.post(
            "/runs/clear", json={"rule": "older_than_1_month", "job_group": env.group_a}
        )
        assert cleared.json() == {"deleted": 3}
        assert [r.id for r in (await sqlite_store.logs.list()).items] == [newer]


async def test_groups_crud_addresses_online_and_referenced_delete(sqlite_store: Store) -> None:
    async with api_env(sqlite_store) as env, env.client("admin") as http:
        bad = await http.post(
            "/groups",
            json={
                "app_name": "m",
                "title": "M",
                "address_type": 1,
                "addresses": ["http://ok:1/", "ftp://no/"],
            },
        )
        assert bad.status_code == 422 and bad.json()["field"] == "addresses.1"
        empty = await http.post("/groups", json={"app_name": "m", "title": "M", "address_type": 1})
        assert empty.status_code == 422 and empty.json()["field"] == "addresses"
        dup = await http.post("/groups", json={"app_name": "app-a", "title": "dup"})
        assert dup.status_code == 409 and dup.json()["field"] == "app_name"
        long_title = await http.post("/groups", json={"app_name": "x1", "title": "t" * 65})
        assert long_title.status_code == 422 and long_title.json()["field"] == "title"
        made = await http.post(
            "/groups",
            json={
                "app_name": "manual-app",
                "title": "M",
                "address_type": 1,
                "addresses": ["http://10.0.0.1:9999/", "https://h.example/x/"],
            },
        )
        assert made.status_code == 201, made.text
        assert made.json()["addresses"] == ["http://10.0.0.1:9999/", "https://h.example/x/"]
        # Online addresses come from heartbeats younger than 90 s.
        now = at(T0)
        await sqlite_store.registry.beat(
            "EXECUTOR", "app-b", "http://fresh:9999/", now - timedelta(seconds=10)
        )
        await sqlite_store.registry.beat(
            "EXECUTOR", "app-b", "http://stale:9999/", now - timedelta(seconds=200)
        )
        b = (await http.get(f"/groups/{env.group_b}")).json()
        assert [o["address"] for o in b["online"]] == ["http://fresh:9999/"]
        assert b["online"][0]["last_heartbeat"].startswith("2025-12-31T23:59:50")
        listed = (await http.get("/groups", params={"app_name": "manual"})).json()
        assert listed["total"] == 1
        await env.add_job(env.group_a)
        refused = await http.delete(f"/groups/{env.group_a}")
        assert refused.status_code == 409 and await sqlite_store.groups.get(env.group_a) is not None
        assert (await http.delete(f"/groups/{made.json()['id']}")).status_code == 204
        changed = await http.put(f"/groups/{env.group_b}", json={"app_name": "app-b", "title": "Bee"})
        assert changed.status_code == 200 and changed.json()["title"] == "Bee"


async def test_operator_sees_only_permitted_groups(sqlite_store: Store) -> None:
    async with api_env(sqlite_store) as env, env.client("op_out") as http:
        await env.add_job(env.group_a)
        await env.add_job(env.group_b)
        groups = (await http.get("/groups")).json()
        assert [g["id"] for g in groups["items"]] == [env.group_b]
        jobs = (await http.get("/jobs")).json()
        assert jobs["total"] == 1 and jobs["items"][0]["job_group"] == env.group_b
        moved = await http.post(
            "/jobs", json={"job_group": env.group_a, "job_desc": "x", "executor_handler": "h"}
        )
        # A group the operator may not see answers as a missing one.
        missing = {"error": f"job_group: executor group {env.group_a} does not exist", "field": "job_group"}
        assert (moved.status_code, moved.json()) == (404, missing)
        job_b = jobs["items"][0]["id"]
        into_a = await http.patch(f"/jobs/{job_b}", json={"job_group": env.group_a})
        assert (into_a.status_code, into_a.json()) == (404, missing)


async def test_users_admin_crud(sqlite_store: Store) -> None:
    async with api_env(sqlite_store) as env, env.client("admin") as http:
        base = {"username": "bob", "password": "bobs password", "role": "viewer", "group_ids": [env.group_a]}
        assert (await http.post("/users", json=base | {"group_ids": [999]})).json()["field"] == "group_ids.0"
        assert (await http.post("/users", json=base | {"password": "short"})).json()["field"] == "password"
        assert (await http.post("/users", json=base | {"role": "root"})).status_code == 422
        assert (await http.post("/users", json=base | {"username": "bad name"})).json()["field"] == "username"
        made = await http.post("/users", json=base)
        assert made.status_code == 201
        bob = made.json()
        assert bob["role"] == "viewer" and bob["group_ids"] == [env.group_a] and bob["must_change_password"]
        assert (await http.post("/users", json=base)).status_code == 409
        stored = await sqlite_store.users.get(bob["id"])
        assert (
            stored is not None and stored.role == 2 and verify_password(stored.password_hash, "bobs password")
        )
        r = await http.patch(
            f"/users/{bob['id']}",
            json={"role": "operator", "glue_permission": True, "group_ids": [env.group_a, env.group_b]},
        )
        assert r.json()["role"] == "operator" and r.json()["group_ids"] == [env.group_a, env.group_b]
        assert (await sqlite_store.users.get(bob["id"])).role == 0  # type: ignore[union-attr]
        listed = (await http.get("/users", params={"role": "operator"})).json()
        assert {u["username"] for u in listed["items"]} == {"bob", "op_in", "op_out"}
        me = env.user_ids["admin"]
        assert (await http.patch(f"/users/{me}", json={"role": "viewer"})).status_code == 422
        assert (await http.delete(f"/users/{me}")).status_code == 409
        assert (await http.delete(f"/users/{bob['id']}")).status_code == 204
        assert (await http.get(f"/users/{bob['id']}")).status_code == 404


async def test_dashboard_counts(sqlite_store: Store) -> None:
    async with api_env(sqlite_store) as env, env.client("viewer") as http, env.client("admin") as admin:
        job = await env.add_job(env.group_a)
        other = await env.add_job(env.group_b)
        await env.add_run(job, env.group_a, handle_code=200)
        await env.add_run(job, env.group_a, handle_code=500)
        await env.add_run(job, env.group_a)
        await env.add_run(other, env.group_b, handle_code=500)
        yesterday = at(T0) - timedelta(days=1)
        await sqlite_store.reports.upsert_day(yesterday, 0, 7, 1, at(T0))
        await sqlite_store.registry.beat("EXECUTOR", "app-a", "http://x:1/", at(T0))
        await sqlite_store.registry.beat("EXECUTOR", "app-b", "http://y:1/", at(T0))
        r = await http.get("/dashboard", params={"days": 3})
        assert r.status_code == 200
        body = r.json()
        assert body["job_count"] == 1  # the viewer sees group A only
        assert (
            body["runs_today"],
            body["runs_today_success"],
            body["runs_today_fail"],
            body["runs_today_running"],
        ) == (3, 1, 1, 1)
        assert body["executor_count"] == 1
        assert [d["day"] for d in body["chart"]] == ["2025-12-30", "2025-12-31", "2026-01-01"]
        # The report table counts every group: the viewer's chart is counted from its own runs.
        assert body["chart"][1] == {"day": "2025-12-31", "running": 0, "success": 0, "fail": 0}
        assert [f["job_group"] for f in body["recent_failures"]] == [env.group_a]
        r = await admin.get("/dashboard", params={"days": 3})
        body = r.json()
        assert (body["job_count"], body["runs_today"], body["executor_count"]) == (2, 4, 2)
        assert body["chart"][1] == {"day": "2025-12-31", "running": 0, "success": 7, "fail": 1}
        assert len(body["recent_failures"]) == 2


async def test_dashboard_date_range(sqlite_store: Store) -> None:
    async with api_env(sqlite_store) as env, env.client("viewer") as http:
        r = await http.get("/dashboard", params={"from_day": "2025-12-25", "to_day": "2025-12-27"})
        assert r.status_code == 200
        assert [d["day"] for d in r.json()["chart"]] == ["2025-12-25", "2025-12-26", "2025-12-27"]
        r = await http.get("/dashboard", params={"from_day": "2025-12-28", "to_day": "2025-12-27"})
        assert (r.status_code, r.json()["field"]) == (422, "from_day")
        r = await http.get("/dashboard", params={"from_day": "2025-01-01"})
        assert (r.status_code, r.json()["field"]) == (422, "from_day")


async def test_dashboard_admin_nodes(sqlite_store: Store) -> None:
    async with api_env(sqlite_store) as env, env.client("viewer") as http:
        now = env.clock.now_ms()
        await sqlite_store.nodes.announce("node-1", now + 10_000)
        await sqlite_store.nodes.announce("node-gone", now - 60_000)
        job_a = await env.add_job(env.group_a, trigger_status=1)
        job_b = await env.add_job(env.group_b, trigger_status=1)
        async with sqlite_store.db.write() as conn:  # as the scheduling loop's lease claim leaves them
            await conn.execute(
                update(job_info)
                .where(job_info.c.id.in_([job_a, job_b]))
                .values(lease_owner="node-1", lease_until=now + 5_000)
            )
        for planned, late in ((now - 2_000, 4), (now - 1_000, 10)):
            await sqlite_store.logs.insert(NewLog(
                job_group=env.group_a, job_id=job_a, trigger_time=at(planned), trigger_code=200,
                planned_time=planned, dispatch_time=planned + late, admin_node="node-1",
            ))
        r = await http.get("/dashboard")
        (node,) = r.json()["nodes"]
        assert node == {
            "node_id": "node-1", "alive": True, "held_jobs": 1, "fires_last_hour": 2,
            "lateness_avg_ms": 7.0, "lateness_max_ms": 10,
        }


async def test_settings_for_the_console(sqlite_store: Store) -> None:
    async with api_env(sqlite_store, glue_enabled=False) as env, env.client("viewer") as http:
        r = await http.get("/settings/console")
        assert r.status_code == 200
        assert r.json() == {"glue_enabled": False, "timezone": "UTC", "email_alarms": False}


async def test_the_console_knows_whether_email_alarms_can_be_sent(sqlite_store: Store) -> None:
    smtp = AdminSettings(smtp_host="mail.example.com")
    async with api_env(sqlite_store, settings=smtp) as env, env.client("viewer") as http:
        assert (await http.get("/settings/console")).json()["email_alarms"] is True


async def test_access_token_is_visible_to_admins(sqlite_store: Store) -> None:
    async with api_env(sqlite_store) as env, env.client("admin") as http:
        expected = {"enabled": True, "access_token": ACCESS_TOKEN}
        assert (await http.get("/settings/access-token")).json() == expected
