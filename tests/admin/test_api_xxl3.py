"""The XXL-JOB 3.x style job-management aliases (api/addJob ...), token-checked, ReturnT answers."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from starlette.applications import Starlette
from starlette.routing import Mount

from jobring.admin.api.management import xxl3_api_app, xxl3_api_routes
from jobring.admin.store import Store
from tests.admin.api_harness import ACCESS_TOKEN, T0, ApiEnv, api_env

HEADERS = {"XXL-JOB-ACCESS-TOKEN": ACCESS_TOKEN}


async def _call(
    env: ApiEnv, name: str, body: Any, headers: dict[str, str] | None = None, prefix: str = ""
) -> dict[str, Any]:
    async with env.raw_client() as http:
        r = await http.post(
            f"{prefix}/api/{name}", json=body, headers=HEADERS if headers is None else headers
        )
    assert r.status_code == 200
    result: dict[str, Any] = r.json()
    return result


async def test_add_update_start_trigger_stop_remove(sqlite_store: Store) -> None:
    async with api_env(sqlite_store, users=False) as env:
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


@pytest.mark.parametrize("headers", [{}, {"XXL-JOB-ACCESS-TOKEN": "wrong"}, {"XXL-JOB-ACCESS-TOKEN": ""}])
async def test_wrong_or_missing_token(sqlite_store: Store, headers: dict[str, str]) -> None:
    async with api_env(sqlite_store, users=False) as env:
        answer = await _call(
            env, "addJob", {"jobGroup": env.group_a, "jobDesc": "x", "executorHandler": "h"}, headers=headers
        )
        assert answer["code"] == 500 and answer["msg"] == "The access token is wrong."
        assert (await sqlite_store.jobs.list()).total == 0


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
    async with api_env(sqlite_store, users=False, glue_enabled=False) as env:
        answer = await _call(env, "addJob", body)
        assert answer["code"] == 500 and field in answer["msg"]
        assert (await sqlite_store.jobs.list()).total == 0


async def test_unknown_job_non_post_and_bad_body(sqlite_store: Store) -> None:
    async with api_env(sqlite_store, users=False) as env:
        assert "not found" in (await _call(env, "startJob", {"id": 4242}))["msg"]
        assert (await _call(env, "stopJob", {}))["msg"].startswith("id")
        assert (await _call(env, "removeJob", [1]))["code"] == 500
        async with env.raw_client() as http:
            r = await http.get("/api/addJob", headers=HEADERS)
            assert r.json()["msg"] == "invalid request, HttpMethod not support."
        outside = await _call(
            env, "triggerJob", {"id": await env.add_job(env.group_a), "addressList": "http://elsewhere:1/"}
        )
        assert outside["code"] == 500 and "not registered" in outside["msg"]


async def test_standalone_app_and_mount_under_the_base_path(sqlite_store: Store) -> None:
    async with api_env(sqlite_store, users=False) as env:
        app = Starlette(routes=[Mount("/xxl-job-admin", routes=xxl3_api_routes(env.services))])
        for asgi, path in ((app, "/xxl-job-admin/api/addJob"), (xxl3_api_app(env.services), "/api/addJob")):
            async with httpx.AsyncClient(
                transport=httpx.ASGITransport(app=asgi), base_url="http://t"
            ) as http:
                r = await http.post(
                    path,
                    headers=HEADERS,
                    json={"jobGroup": env.group_a, "jobDesc": "m", "executorHandler": "h"},
                )
                assert r.json()["code"] == 200, r.text
        async with httpx.AsyncClient(
            transport=httpx.ASGITransport(app=xxl3_api_app(env.services)), base_url="http://t"
        ) as http:
            r = await http.post("/api/addJob", headers=HEADERS, content=b"[" * (2 * 1024 * 1024))
            assert r.status_code == 413


async def test_unstorable_text_is_refused(sqlite_store: Store) -> None:
    async with api_env(sqlite_store, users=False) as env:
        job = await env.add_job(env.group_a)
        async with env.raw_client() as http:
            for name, body in (
                ("addJob", b'{"jobGroup": 1, "jobDesc": "a\\ud800", "executorHandler": "h"}'),
                ("triggerJob", b'{"id": %d, "executorParam": "\\ud800"}' % job),
            ):
                r = await http.post(f"/api/{name}", content=body, headers=HEADERS)
                assert r.status_code == 200 and r.json()["code"] == 500, r.text
        assert env.double.runs() == [] and (await sqlite_store.jobs.list()).total == 1
