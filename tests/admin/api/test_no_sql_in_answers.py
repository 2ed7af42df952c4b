"""No answer carries SQL or its parameters: a database error inside the management API, the
executor API, the XXL-JOB 3.x aliases and the declared-jobs endpoint is answered with a
generic message and an error id that finds the traceback in the admin's log."""

from __future__ import annotations

import logging
import re

import httpx
import pytest
from sqlalchemy import text
from starlette.applications import Starlette

from jobring.admin.api.executor_api import executor_api_routes
from jobring.admin.monitors.monitors import RegistryService
from jobring.admin.services.callbacks import CallbackService
from jobring.admin.store import Store
from tests.admin.api_harness import ACCESS_TOKEN, ApiEnv, api_env

# What a database error's text is made of: the statement, the tables, the bound values.
LEAKS = re.compile(r"SELECT|INSERT|UPDATE|FROM|xxl_job|\[SQL|parameters|sqlite3|no such table", re.I)
SECRET_PARAM = "secret-param-4711"


async def _break_the_jobs_table(env: ApiEnv) -> None:
    async with env.store.engine.begin() as conn:
        await conn.execute(text("ALTER TABLE xxl_job_info RENAME TO moved_away"))


def _client(app: Starlette, base: str = "") -> httpx.AsyncClient:
    # raise_app_exceptions: an error raised on to the server would make it close the client's
    # keep-alive connection; the apps answer it themselves.
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=True)
    return httpx.AsyncClient(transport=transport, base_url="http://admin.test" + base)


def _assert_generic(answer: httpx.Response, caplog: pytest.LogCaptureFixture) -> str:
    assert not LEAKS.search(answer.text), answer.text
    assert SECRET_PARAM not in answer.text
    found = re.search(r"[0-9a-f]{12}", answer.text)
    assert found, answer.text
    # The id finds the whole error, SQL included, in the admin's log.
    logged = [r for r in caplog.records if found.group(0) in r.getMessage()]
    assert logged and logged[0].exc_info is not None, answer.text
    return found.group(0)


async def test_management_api_answers_a_database_error_without_sql(
    sqlite_store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.ERROR)
    async with api_env(sqlite_store) as env, _client(env.asgi, "/api/v1") as http:
        http.headers["Authorization"] = f"Bearer {env.tokens['admin']}"
        await _break_the_jobs_table(env)
        for answer in (await http.get("/jobs", params={"desc": SECRET_PARAM}),
                       await http.post("/jobs", json={"job_group": env.group_a, "job_desc": SECRET_PARAM,
                                                      "executor_handler": "h"})):
            assert answer.status_code == 500, answer.text
            body = answer.json()
            assert (body["error"], body["field"]) == ("internal error", None)
            assert _assert_generic(answer, caplog) == body["error_id"]


async def test_xxl3_and_declared_jobs_answer_a_database_error_without_sql(
    sqlite_store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.ERROR)
    async with api_env(sqlite_store) as env, _client(env.asgi) as http:
        await _break_the_jobs_table(env)
        added = await http.post("/api/addJob", headers={"XXL-JOB-ACCESS-TOKEN": env.tokens["admin"]},
                                json={"jobGroup": env.group_a, "jobDesc": SECRET_PARAM, "author": "x",
                                      "scheduleType": "NONE", "glueType": "BEAN", "executorHandler": "h"})
        assert added.json()["code"] == 500
        _assert_generic(added, caplog)
        declared = await http.post(
            "/api/jobring/declareJobs", headers={"XXL-JOB-ACCESS-TOKEN": ACCESS_TOKEN},
            json={"appname": "app-a", "declarations": [
                {"handler": "nightly", "fields": {"executor_param": SECRET_PARAM}}]})
        assert declared.status_code == 500 and declared.json()["code"] == 500
        assert declared.json()["msg"].startswith("admin error: database error (OperationalError")
        _assert_generic(declared, caplog)


async def test_executor_api_answers_a_database_error_without_sql(
    sqlite_store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.ERROR)
    async with api_env(sqlite_store) as env:
        callbacks = CallbackService(sqlite_store, env.services.trigger, env.clock)  # type: ignore[arg-type]
        app = Starlette(routes=executor_api_routes(RegistryService(sqlite_store, env.clock), callbacks,
                                                   ACCESS_TOKEN))
        async with env.store.engine.begin() as conn:
            await conn.execute(text("ALTER TABLE xxl_job_registry RENAME TO moved_away"))
        async with _client(app) as http:
            answer = await http.post("/api/registry", headers={"XXL-JOB-ACCESS-TOKEN": ACCESS_TOKEN}, json={
                "registryGroup": "EXECUTOR", "registryKey": "app-a", "registryValue": "http://127.0.0.1:9/"})
        await callbacks.close()
        assert answer.status_code == 500 and answer.json()["code"] == 500
        _assert_generic(answer, caplog)
