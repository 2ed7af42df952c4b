"""The XXL-JOB 3.x style job-management aliases (api/addJob ...): a user API token with the
same role, group, GLUE and child checks as /api/v1 (never the executor token); ReturnT answers."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from starlette.applications import Starlette
from starlette.routing import Mount

from jobring.admin.api.management import xxl3_api_app, xxl3_api_routes
from jobring.admin.security.roles import Role
from jobring.admin.store import Store
from tests.admin.api_harness import ACCESS_TOKEN, T0, ApiEnv, api_env


def _headers(env: ApiEnv, role: str = "admin") -> dict[str, str]:
    return {"XXL-JOB-ACCESS-TOKEN": env.tokens[role]}


async def _call(
    env: ApiEnv, name: str, body: Any, headers: dict[str, str] | None = None, status: int = 200,
    role: str = "admin",
) -> dict[str, Any]:
    async with env.raw_client() as http:
        given = _headers(env, role) if headers is None else headers
        r = await http.post(f"/api/{name}", json=body, headers=given)
    assert r.status_code == status, r.text
    result: dict[str, Any] = r.json()
    return result


async def test_add_update_start_trigger_stop_remove(sqlite_store: Store) -> None:
    async with api_env(sqlite_store) as env:
        added = await _call(
            env,
            "addJob",
            {
                "jobGroup": env.group_a,
                "jobDesc": "from api",
                "author": "ci",
                "scheduleType": "CRON",
                "scheduleConf": "0 0 * * * ?",
                "glueType": "BEAN",
                "executorHandler": "demo",
                "executorRouteStrategy": "FIRST",
                "executorBlockStrategy": "SERIAL_EXECUTION",
                "misfireStrategy": "DO_NOTHING",
                "unknownField": 1,
            },
        )
        assert added["code"] == 200, added
        job_id = int(added["content"])
        assert added["data"] == added["content"]
        updated = await _call(
            env, "updateJob", {"id": job_id, "jobDesc": "renamed", "scheduleConf": "0 30 * * * ?"}
        )
        assert updated["code"] == 200
        assert (await _call(env, "startJob", {"id": job_id}))["code"] == 200
        job = await sqlite_store.jobs.get(job_id)
        assert job is not None and job.job_desc == "renamed" and job.trigger_status == 1
        assert job.trigger_next_time == T0 + 30 * 60_000
        triggered = await _call(env, "triggerJob", {"id": job_id, "executorParam": "p"})
        assert triggered["code"] == 200 and len(triggered["content"]["logIds"]) == 1
        assert env.double.runs()[0].body["executorParams"] == "p"
        log = await sqlite_store.logs.get(triggered["content"]["logIds"][0])
        assert log is not None and log.trigger_type == "API"
        assert (await _call(env, "stopJob", {"id": job_id}))["code"] == 200
        assert (await _call(env, "removeJob", {"id": job_id}))["code"] == 200
        assert await sqlite_store.jobs.get(job_id) is None


@pytest.mark.parametrize(
    "headers",
    [{}, {"XXL-JOB-ACCESS-TOKEN": "wrong"}, {"XXL-JOB-ACCESS-TOKEN": ""},
     # The executor token (global here) is only an executor credential.
     {"XXL-JOB-ACCESS-TOKEN": ACCESS_TOKEN}, {"Authorization": f"Bearer {ACCESS_TOKEN}"},
     {"Authorization": "Basic abc"}],
)
async def test_wrong_missing_or_executor_token_is_refused(
    sqlite_store: Store, headers: dict[str, str]
) -> None:
    async with api_env(sqlite_store) as env:
        group_token = "group-token-of-app-a-0123456789"
        await sqlite_store.groups.set_access_token(env.group_a, group_token)
        for given in (headers, {"XXL-JOB-ACCESS-TOKEN": group_token}):
            for name in ("addJob", "triggerJob", "updateJob"):
                body = {"jobGroup": env.group_a, "jobDesc": "x", "executorHandler": "h", "id": 1}
                answer = await _call(env, name, body, headers=given, status=401)
                assert answer["code"] == 401 and "user API token" in answer["msg"]
        assert (await sqlite_store.jobs.list()).total == 0


async def test_user_token_obeys_role_group_and_glue(sqlite_store: Store) -> None:
    async with api_env(sqlite_store, glue_enabled=True) as env:
        job_b = await env.add_job(env.group_b)
        body = {"jobGroup": env.group_b, "jobDesc": "x", "executorHandler": "h"}
        # The viewer role may write nothing; for the operator of A, B's group and job are missing.
        assert (await _call(env, "addJob", body, role="viewer", status=403))["code"] == 403
        missing_group = {"code": 500, "msg": f"job_group: executor group {env.group_b} does not exist",
                         "content": None, "data": None}
        assert await _call(env, "addJob", body, role="op_in") == missing_group
        missing_job = {"code": 500, "msg": f"job {job_b} not found", "content": None, "data": None}
        for name in ("updateJob", "triggerJob", "startJob", "stopJob", "removeJob"):
            answer = await _call(env, name, {"id": job_b, "jobDesc": "mine"}, role="viewer", status=403)
            assert answer["code"] == 403, name
            assert await _call(env, name, {"id": job_b, "jobDesc": "mine"}, role="op_in") == missing_job, name
        # Bearer works as well; the operator of B may manage B's jobs.
        bearer = {"Authorization": f"Bearer {env.tokens['op_out']}"}
        assert (await _call(env, "addJob", body, headers=bearer))["code"] == 200
        # GLUE needs the user's GLUE permission (op_in has it, a plain operator not).
        plain = await env.add_user("plain", Role.OPERATOR, [env.group_a])
        env.tokens["plain"] = await env.add_token(plain)
        glue = {"jobGroup": env.group_a, "jobDesc": "g", "glueType": "GLUE_SHELL", "glueSource": "id"}
        assert (await _call(env, "addJob", glue, role="plain", status=403))["code"] == 403
        assert (await _call(env, "addJob", glue, role="op_in"))["code"] == 200
        job_a = await env.add_job(env.group_a, glue_type="GLUE_SHELL", glue_source="true")
        changed = await _call(env, "updateJob", {"id": job_a, "glueSource": "id"}, role="plain", status=403)
        assert changed["code"] == 403
        job = await sqlite_store.jobs.get(job_b)
        assert job is not None and job.job_desc == "a job"


async def test_child_jobs_outside_the_callers_groups_look_missing(sqlite_store: Store) -> None:
    async with api_env(sqlite_store) as env:
        job_b = await env.add_job(env.group_b)
        body = {"jobGroup": env.group_a, "jobDesc": "x", "executorHandler": "h"}
        hidden = await _call(env, "addJob", body | {"childJobId": str(job_b)}, role="op_in")
        missing = await _call(env, "addJob", body | {"childJobId": "4242"}, role="op_in")
        assert hidden["code"] == missing["code"] == 500
        assert hidden["msg"] == missing["msg"].replace("4242", str(job_b))
        assert (await sqlite_store.jobs.list(group_ids=[env.group_a])).total == 0


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"jobDesc": "x", "executorHandler": "h"}, "job_group"),
        (
            {
                "jobGroup": 1,
                "jobDesc": "x",
                "executorHandler": "h",
                "scheduleType": "CRON",
                "scheduleConf": "nope",
            },
            "schedule_conf",
        ),
        ({"jobGroup": "1", "jobDesc": "x"}, "jobGroup"),
        ({"jobGroup": 1, "jobDesc": "x", "glueType": "GLUE_SHELL"}, "GLUE"),
    ],
)
async def test_invalid_add_is_refused_with_a_message(
    sqlite_store: Store, body: dict[str, Any], field: str
) -> None:
    async with api_env(sqlite_store, glue_enabled=False) as env:
        refused = 403 if field == "GLUE" else 500  # GLUE disabled: not permitted
        answer = await _call(env, "addJob", body, status=403 if refused == 403 else 200)
        assert answer["code"] == refused and field in answer["msg"]
        assert (await sqlite_store.jobs.list()).total == 0


async def test_unknown_job_non_post_and_bad_body(sqlite_store: Store) -> None:
    async with api_env(sqlite_store) as env:
        assert "not found" in (await _call(env, "startJob", {"id": 4242}))["msg"]
        assert (await _call(env, "stopJob", {}))["msg"].startswith("id")
        assert (await _call(env, "removeJob", [1]))["code"] == 500
        async with env.raw_client() as http:
            r = await http.get("/api/addJob", headers=_headers(env))
            assert r.json()["msg"] == "invalid request, HttpMethod not support."
        outside = await _call(
            env, "triggerJob", {"id": await env.add_job(env.group_a), "addressList": "http://elsewhere:1/"}
        )
        assert outside["code"] == 500 and "not registered" in outside["msg"]


async def test_standalone_app_and_mount_under_the_base_path(sqlite_store: Store) -> None:
    async with api_env(sqlite_store) as env:
        app = Starlette(routes=[Mount("/xxl-job-admin", routes=xxl3_api_routes(env.services))])
        for asgi, path in ((app, "/xxl-job-admin/api/addJob"), (xxl3_api_app(env.services), "/api/addJob")):
            async with httpx.AsyncClient(
                transport=httpx.ASGITransport(app=asgi), base_url="http://t"
            ) as http:
                r = await http.post(
                    path,
                    headers=_headers(env),
                    json={"jobGroup": env.group_a, "jobDesc": "m", "executorHandler": "h"},
                )
                assert r.json()["code"] == 200, r.text
        async with httpx.AsyncClient(
            transport=httpx.ASGITransport(app=xxl3_api_app(env.services)), base_url="http://t"
        ) as http:
            r = await http.post("/api/addJob", headers=_headers(env), content=b"[" * (2 * 1024 * 1024))
            assert r.status_code == 413


async def test_unstorable_text_is_refused(sqlite_store: Store) -> None:
    async with api_env(sqlite_store) as env:
        job = await env.add_job(env.group_a)
        async with env.raw_client() as http:
            for name, body in (
                ("addJob", b'{"jobGroup": 1, "jobDesc": "a\\ud800", "executorHandler": "h"}'),
                ("triggerJob", b'{"id": %d, "executorParam": "\\ud800"}' % job),
            ):
                r = await http.post(f"/api/{name}", content=body, headers=_headers(env))
                assert r.status_code == 200 and r.json()["code"] == 500, r.text
        assert env.double.runs() == [] and (await sqlite_store.jobs.list()).total == 1
