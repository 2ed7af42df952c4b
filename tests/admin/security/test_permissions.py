"""Every endpoint × every kind of caller: the expected status for admin, an operator of the
group, an operator of another group, a viewer of the group and an anonymous caller.

A job, run or group the caller may not see answers 404 as a missing one does (the operator of
another group): the answer never tells a hidden id from a missing one."""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import pytest
from fastapi import FastAPI

from jobring.admin.api.management import audit, auth, calendars, dashboard, glue, groups, jobs, runs, users
from jobring.admin.store import Store
from tests.admin.api_harness import ROLES, ApiEnv, api_env

Setup = Callable[[ApiEnv, str], Awaitable[dict[str, Any]]]


async def _nothing(env: ApiEnv, role: str) -> dict[str, Any]:
    return {}


@dataclass(frozen=True)
class Row:
    method: str
    path: str  # formatted with the env's ids and the setup's values
    expected: tuple[int, int, int, int, int]  # admin, op_in, op_out, viewer, anonymous
    body: Callable[[ApiEnv, dict[str, Any]], Any] | None = None
    setup: Setup = _nothing

    @property
    def id(self) -> str:
        return f"{self.method} {self.path}"


async def _job(env: ApiEnv, role: str) -> dict[str, Any]:
    return {"job": await env.add_job(env.group_a)}


async def _glue_job(env: ApiEnv, role: str) -> dict[str, Any]:
    job = await env.add_job(env.group_a, glue_type="GLUE_SHELL", glue_source="echo hi")
    version = await env.store.glue.save(job, "GLUE_SHELL", "echo v1", "v1", env.services.now_naive_utc())
    return {"job": job, "version": version}


async def _run(env: ApiEnv, role: str) -> dict[str, Any]:
    job = await env.add_job(env.group_a)
    return {"run": await env.add_run(job, env.group_a)}


async def _empty_group(env: ApiEnv, role: str) -> dict[str, Any]:
    from jobring.admin.store.records import JobGroup

    group = await env.store.groups.create(
        JobGroup(app_name=f"tmp-{role}", title="tmp"), env.services.now_naive_utc()
    )
    user = await env.store.users.get(env.user_ids["op_in"])
    assert user is not None
    from dataclasses import replace

    await env.store.users.update(replace(user, permission=f"{env.group_a},{group}"))
    return {"group": group}


async def _delayed(env: ApiEnv, role: str) -> dict[str, Any]:
    job = await env.add_job(env.group_a)
    fire = await env.store.delayed.add(job, env.group_a, env.clock.now_ms() + 60_000, None, None, "t",
                                       env.clock.now_ms())
    return {"job": job, "fire": fire}


async def _victim(env: ApiEnv, role: str) -> dict[str, Any]:
    from jobring.admin.security.roles import Role

    return {"user": await env.add_user(f"victim-{role}", Role.VIEWER, [])}


async def _op_in_token(env: ApiEnv, role: str) -> dict[str, Any]:
    tokens = await env.store.tokens.list_for_user(env.user_ids["op_in"])
    await env.add_token(env.user_ids["op_in"])
    newest = max(t.id for t in await env.store.tokens.list_for_user(env.user_ids["op_in"]))
    assert newest not in {t.id for t in tokens}
    return {"token": newest}


async def _reset_group_a(env: ApiEnv, role: str) -> dict[str, Any]:
    from jobring.admin.store.records import JobGroup

    group = JobGroup(id=env.group_a, app_name="app-a", title="A", address_type=1,
                     address_list=",".join(env.double.addresses))
    await env.store.groups.update(group, env.services.now_naive_utc())
    return {}


async def _group_with_token(env: ApiEnv, role: str) -> dict[str, Any]:
    await env.store.groups.set_access_token(env.group_a, f"token-of-group-a-for-{role}")
    return {}


def _new_job(env: ApiEnv, v: dict[str, Any]) -> dict[str, Any]:
    return {"job_group": env.group_a, "job_desc": "new", "executor_handler": "demo"}


async def _calendar(env: ApiEnv, role: str) -> dict[str, Any]:
    """A calendar of group A and a global one (fresh names per role: each row runs once a role)."""
    spec = '{"name": "c", "zone": "UTC", "invert": false, "dates": ["2026-10-01"]}'
    now = env.clock.now_ms()
    return {"cal": await env.store.calendars.create(f"a-{role}", env.group_a, spec, now, "t"),
            "global_cal": await env.store.calendars.create(f"g-{role}", None, spec, now, "t")}


def _new_calendar(group: bool) -> Callable[[ApiEnv, dict[str, Any]], Any]:
    def body(env: ApiEnv, v: dict[str, Any]) -> dict[str, Any]:
        return {"name": f"new-{id(v)}", "job_group": env.group_a if group else None, "dates": ["2026-10-01"]}
    return body


READ = (200, 200, 404, 200, 401)
READ_ALL = (200, 200, 200, 200, 401)
WRITE = (200, 200, 404, 403, 401)
CREATE = (201, 201, 404, 403, 401)
GLUE = (200, 200, 404, 403, 401)
ADMIN = (200, 403, 403, 403, 401)
# Where a group's jobs go: for admins only, once the caller may see the group at all.
ROUTING = (200, 403, 404, 403, 401)

ROWS = [
    Row("GET", "/jobs", READ_ALL),
    Row("GET", "/jobs?job_group={group_a}", READ),
    Row("GET", "/jobs/{job}", READ, setup=_job),
    Row("POST", "/jobs", CREATE, body=_new_job),
    Row("PATCH", "/jobs/{job}", WRITE, body=lambda e, v: {"job_desc": "changed"}, setup=_job),
    Row("DELETE", "/jobs/{job}", (204, 204, 404, 403, 401), setup=_job),
    Row("POST", "/jobs/{job}/copy", CREATE, setup=_job),
    Row("POST", "/jobs/{job}/start", WRITE, setup=_job),
    Row("POST", "/jobs/{job}/stop", WRITE, setup=_job),
    Row("POST", "/jobs/{job}/trigger", WRITE, body=lambda e, v: {"executor_param": "x"}, setup=_job),
    Row("POST", "/jobs/{job}/trigger-at", CREATE, body=lambda e, v: {"delay_ms": 60_000}, setup=_job),
    Row("GET", "/jobs/{job}/delayed", READ, setup=_job),
    Row("GET", "/delayed-runs", READ_ALL),
    Row("GET", "/delayed-runs?job_group={group_a}", READ),
    Row("DELETE", "/jobs/{job}/delayed/{fire}", (204, 204, 404, 403, 401), setup=_delayed),
    Row(
        "POST",
        "/schedules/preview",
        READ_ALL,
        body=lambda e, v: {"schedule_type": "CRON", "schedule_conf": "0 0 12 * * ?"},
    ),
    Row("GET", "/calendars", READ_ALL),
    Row("GET", "/calendars?job_group={group_a}", READ),
    Row("GET", "/calendars/{cal}", READ, setup=_calendar),
    Row("GET", "/calendars/{global_cal}", READ_ALL, setup=_calendar),
    Row("POST", "/calendars", CREATE, body=_new_calendar(group=True)),
    Row("POST", "/calendars", (201, 403, 403, 403, 401), body=_new_calendar(group=False)),
    Row("PUT", "/calendars/{cal}", WRITE, body=lambda e, v: {"dates": ["2026-10-02"]}, setup=_calendar),
    Row("PUT", "/calendars/{global_cal}", ADMIN, body=lambda e, v: {"dates": ["2026-10-02"]},
        setup=_calendar),
    Row("DELETE", "/calendars/{cal}", (204, 204, 404, 403, 401), setup=_calendar),
    Row("POST", "/calendars/import", CREATE,
        body=lambda e, v: {"name": f"imp-{id(v)}", "job_group": e.group_a, "dates": ["2026-10-01"]}),
    Row("GET", "/jobs/{job}/glue", GLUE, setup=_glue_job),
    Row(
        "PUT",
        "/jobs/{job}/glue",
        GLUE,
        body=lambda e, v: {"glue_source": "echo 2", "glue_remark": "r"},
        setup=_glue_job,
    ),
    Row("GET", "/jobs/{job}/glue/versions", GLUE, setup=_glue_job),
    Row("POST", "/jobs/{job}/glue/versions/{version}/restore", GLUE, setup=_glue_job),
    Row("GET", "/runs", READ_ALL),
    Row("GET", "/runs?job_group={group_a}", READ),
    Row("GET", "/runs/{run}", READ, setup=_run),
    Row("GET", "/runs/{run}/log", READ, setup=_run),
    Row("GET", "/runs/{run}/attempts", READ, setup=_run),
    Row("POST", "/runs/{run}/kill", WRITE, setup=_run),
    Row("POST", "/runs/clear", WRITE, body=lambda e, v: {"rule": "all", "job_group": e.group_a}),
    Row("GET", "/groups", READ_ALL),
    Row(
        "POST",
        "/groups",
        (201, 403, 403, 403, 401),
        body=lambda e, v: {"app_name": f"new-{len(v)}-{id(v)}", "title": "new"},
    ),
    Row("GET", "/groups/{group_a}", READ),
    Row(
        "PUT",
        "/groups/{group_a}",
        WRITE,
        body=lambda e, v: {
            "app_name": "app-a",
            "title": "A2",
            "address_type": 1,
            "addresses": e.double.addresses,
        },
    ),
    # Where a group's jobs go (appname, address type, manual addresses) is for admins only.
    Row(
        "PUT",
        "/groups/{group_a}",
        ROUTING,
        body=lambda e, v: {"app_name": "app-a", "title": "A3", "address_type": 1,
                           "addresses": [*e.double.addresses, "http://10.9.9.9:9999/"]},
        setup=_reset_group_a,
    ),
    Row(
        "PUT",
        "/groups/{group_a}",
        ROUTING,
        body=lambda e, v: {"app_name": "app-a", "title": "A3", "address_type": 0},
        setup=_reset_group_a,
    ),
    Row("GET", "/groups/{group_a}/access-token", ADMIN, setup=_group_with_token),
    Row("POST", "/groups/{group_a}/access-token/rotate", ADMIN),
    Row("DELETE", "/groups/{group}", (204, 204, 404, 403, 401), setup=_empty_group),
    Row("POST", "/groups/{group_a}/addresses/disable", ADMIN,
        body=lambda e, v: {"address": e.double.addresses[0]}),
    Row("POST", "/groups/{group_a}/addresses/enable", ADMIN,
        body=lambda e, v: {"address": e.double.addresses[0]}),
    Row("GET", "/users", ADMIN),
    Row(
        "POST",
        "/users",
        (201, 403, 403, 403, 401),
        body=lambda e, v: {"username": f"u{id(v)}", "password": "long enough pw", "role": "viewer"},
    ),
    Row("GET", "/users/{user}", ADMIN, setup=_victim),
    Row("PATCH", "/users/{user}", ADMIN, body=lambda e, v: {"glue_permission": True}, setup=_victim),
    Row("DELETE", "/users/{user}", (204, 403, 403, 403, 401), setup=_victim),
    Row("GET", "/tokens", READ_ALL),
    Row("POST", "/tokens", (201, 201, 201, 201, 401), body=lambda e, v: {"name": "ci"}),
    Row("DELETE", "/tokens/{token}", (204, 204, 404, 404, 401), setup=_op_in_token),
    Row("GET", "/dashboard", READ_ALL),
    Row("GET", "/dashboard?from_day=2025-12-01&to_day=2025-12-31", READ_ALL),
    Row("GET", "/settings/console", READ_ALL),
    Row("GET", "/settings/access-token", ADMIN),
    Row("GET", "/settings", ADMIN),
    Row("GET", "/auth/me", READ_ALL),
    Row("GET", "/audit", ADMIN),
    Row("GET", "/audit?action=job&since=2026-01-01T00:00:00Z", ADMIN),
]


@pytest.mark.parametrize("row", ROWS, ids=[r.id for r in ROWS])
async def test_permission_matrix(sqlite_store: Store, row: Row) -> None:
    async with api_env(sqlite_store) as env:
        got: list[int] = []
        for role in (*ROLES, None):
            values = await row.setup(env, role or "anon")
            path = row.path.format(group_a=env.group_a, group_b=env.group_b, **values)
            body = row.body(env, values) if row.body else None
            async with env.client(role) as http:
                response = await http.request(row.method, path, json=body)
            got.append(response.status_code)
            if response.status_code >= 400:
                error = response.json()
                assert set(error) == {"error", "field"} and error["error"], response.text
        assert tuple(got) == row.expected, f"{row.id}: admin, op_in, op_out, viewer, anonymous"


def test_every_operation_is_in_the_matrix() -> None:
    # Login, logout and the own-password change act on the caller; test_security.py covers them.
    elsewhere = {("POST", "/auth/login"), ("POST", "/auth/logout"), ("POST", "/users/me/password")}
    app = FastAPI()
    for module in (auth, jobs, calendars, glue, runs, groups, users, dashboard, audit):
        app.include_router(module.router)
    paths = app.openapi()["paths"]
    operations = {(method.upper(), _shape(path)) for path, item in paths.items() for method in item}
    assert len(operations) > 30
    covered = {(row.method, _shape(row.path)) for row in ROWS}
    assert operations - elsewhere - covered == set()
    assert covered <= operations


def _shape(path: str) -> str:
    return re.sub(r"\{\w+\}", "{}", path.split("?")[0])


XXL3_CALLERS = (*ROLES, None, "executor")
XXL3_ROWS: list[tuple[str, tuple[int, ...]]] = [
    # admin, op_in, op_out, viewer, anonymous, the executor token (the answer's code; the HTTP
    # status is the same for 401/403, else 200). op_out: the job or group is not found (500).
    ("addJob", (200, 200, 500, 403, 401, 401)),
    ("updateJob", (200, 200, 500, 403, 401, 401)),
    ("startJob", (200, 200, 500, 403, 401, 401)),
    ("stopJob", (200, 200, 500, 403, 401, 401)),
    ("triggerJob", (200, 200, 500, 403, 401, 401)),
    ("removeJob", (200, 200, 500, 403, 401, 401)),
]


@pytest.mark.parametrize(("name", "expected"), XXL3_ROWS, ids=[n for n, _ in XXL3_ROWS])
async def test_xxl3_permission_matrix(sqlite_store: Store, name: str, expected: tuple[int, ...]) -> None:
    async with api_env(sqlite_store) as env:
        await env.store.groups.set_access_token(env.group_a, "token-of-group-a-0123456789")
        got: list[int] = []
        for caller in XXL3_CALLERS:
            job = await env.add_job(env.group_a)
            body = {"id": job, "jobGroup": env.group_a, "jobDesc": "via 3.x", "executorHandler": "demo",
                    "scheduleType": "CRON", "scheduleConf": "0 0 * * * ?"}
            headers = {}
            if caller == "executor":
                headers = {"XXL-JOB-ACCESS-TOKEN": "token-of-group-a-0123456789"}
            elif caller is not None:
                headers = {"XXL-JOB-ACCESS-TOKEN": env.tokens[caller]}
            async with env.raw_client() as http:
                response = await http.post(f"/api/{name}", json=body, headers=headers)
            answer = response.json()
            assert set(answer) == {"code", "msg", "content", "data"}, response.text
            assert response.status_code == (answer["code"] if answer["code"] in (401, 403) else 200)
            got.append(answer["code"])
        assert tuple(got) == expected, f"{name}: admin, op_in, op_out, viewer, anonymous, executor"
