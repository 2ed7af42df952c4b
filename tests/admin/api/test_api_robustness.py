"""Hostile requests: huge bodies, deep JSON, broken JSON, unknown paths — all clean 4xx."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from jobring.admin.api.management.limits import json_depth_exceeds
from jobring.admin.store import Store
from tests.admin.api_harness import api_env


async def test_body_over_the_limit_is_413_before_parsing(sqlite_store: Store) -> None:
    async with api_env(sqlite_store) as env, env.client("admin") as http:
        huge = b'{"job_desc": "' + b"x" * (env.services.max_body_bytes + 10) + b'"}'
        r = await http.post("/jobs", content=huge, headers={"Content-Type": "application/json"})
        assert r.status_code == 413 and r.json()["error"].startswith("request body larger than")
        assert (await sqlite_store.jobs.list()).total == 0


async def test_streamed_body_over_the_limit_is_413(sqlite_store: Store) -> None:
    async with api_env(sqlite_store) as env, env.client("admin") as http:
        limit = env.services.max_body_bytes

        async def chunks() -> AsyncIterator[bytes]:
            for _ in range(limit // 65536 + 2):
                yield b" " * 65536

        r = await http.post("/jobs", content=chunks(), headers={"Content-Type": "application/json"})
        assert r.status_code == 413


async def test_deeply_nested_json_is_400(sqlite_store: Store) -> None:
    async with api_env(sqlite_store) as env, env.client("admin") as http:
        # Refused before FastAPI parses it (Python's json would hit its recursion limit).
        deep = "[" * 5000 + "]" * 5000
        r = await http.post("/jobs", content=deep, headers={"Content-Type": "application/json"})
        assert r.status_code == 400 and "nested" in r.json()["error"]


@pytest.mark.parametrize("body", ['{"job_group": 1,', "not json", '{"a": "\\u00"}'])
async def test_broken_json_is_400(sqlite_store: Store, body: str) -> None:
    async with api_env(sqlite_store) as env, env.client("admin") as http:
        r = await http.post("/jobs", content=body, headers={"Content-Type": "application/json"})
        assert r.status_code in (400, 422)
        assert set(r.json()) == {"error", "field"}


async def test_wrong_types_name_the_field(sqlite_store: Store) -> None:
    async with api_env(sqlite_store) as env, env.client("admin") as http:
        r = await http.post("/jobs", json={"job_group": "one", "job_desc": "x"})
        assert r.status_code == 422 and r.json()["field"] == "job_group"
        r = await http.post("/jobs", json=[1, 2])
        assert r.status_code == 422
        r = await http.get("/jobs", params={"job_group": 2**40})
        assert r.status_code == 422 and r.json()["field"] == "job_group"
        r = await http.get("/jobs/99999999999999")
        assert r.status_code == 422 and r.json()["field"] == "job_id"


async def test_unknown_path_and_method_use_the_error_shape(sqlite_store: Store) -> None:
    async with api_env(sqlite_store) as env, env.client("admin") as http:
        r = await http.get("/no/such/thing")
        assert r.status_code == 404 and set(r.json()) == {"error", "field"}
        r = await http.put("/jobs")
        assert r.status_code == 405 and set(r.json()) == {"error", "field"}


def test_json_depth_scanner_ignores_brackets_in_strings() -> None:
    assert not json_depth_exceeds(b'{"a": "[[[[[[[[[[[[[[[[[[[["}', 3)
    assert not json_depth_exceeds(b'{"a": "\\"[[[[[[[[[[["}', 3)
    assert json_depth_exceeds(b'{"a": [[[1]]]}', 3)
    assert not json_depth_exceeds(b'{"a": [[1]]}', 3)


@pytest.mark.parametrize(
    ("path", "body", "field"),
    [
        ("/jobs", '{"job_group": 1, "job_desc": "a\\ud800b", "executor_handler": "h"}', "job_desc"),
        ("/jobs", '{"job_group": 1, "job_desc": "nul \\u0000", "executor_handler": "h"}', "job_desc"),
        ("/auth/login", '{"username": "a\\ud800", "password": "x"}', "username"),
        ("/auth/login", '{"username": "admin", "password": "\\udfff"}', "password"),
        ("/groups", '{"app_name": "x\\u0000", "title": "t"}', "app_name"),
    ],
)
async def test_text_that_cannot_be_stored_is_422(
    sqlite_store: Store, path: str, body: str, field: str
) -> None:
    # Lone surrogates cannot be encoded as UTF-8 and PostgreSQL refuses NUL: both would fail
    # deep in the driver, so they are refused up front.
    async with api_env(sqlite_store) as env, env.client("admin") as http:
        r = await http.post(path, content=body, headers={"Content-Type": "application/json"})
        assert r.status_code == 422 and r.json()["field"] == field, r.text
        assert (await sqlite_store.jobs.list()).total == 0


async def test_a_flag_must_be_a_json_boolean(sqlite_store: Store) -> None:
    # pydantic's lax mode took "yes", "on", 1 or "0" for a flag: a typo or a number turned an
    # option on or off without a word. A flag is true or false, anything else names the field.
    async with api_env(sqlite_store) as env, env.client("admin") as http:
        job = await env.add_job(env.group_a, schedule_conf="0 0 2 * * ?", schedule_timezone="UTC")
        user = {"username": "bob", "password": "bobs password", "role": "viewer", "group_ids": [env.group_a]}
        job_fields = {"job_group": env.group_a, "job_desc": "nightly", "executor_handler": "demo",
                      "schedule_type": "CRON", "schedule_conf": "0 0 3 * * ?"}
        backfill = {"start": "2026-03-01T00:00:00Z", "end": "2026-03-01T23:59:59Z"}
        graph = {"name": "w", "job_group": env.group_a, "nodes": [{"key": "a", "job_id": job}], "edges": []}
        workflow = (await http.post("/workflows", json=graph)).json()["id"]
        cases = [
            ("post", "/jobs", job_fields, "alarm_recovery"),
            ("patch", f"/jobs/{job}", {}, "alarm_recovery"),
            ("post", "/users", user, "glue_permission"),
            ("post", "/users", user, "must_change_password"),
            ("post", "/calendars", {"name": "holidays", "dates": ["2026-01-01"]}, "invert"),
            ("post", f"/jobs/{job}/backfill", backfill, "dry_run"),
            ("put", f"/workflows/{workflow}/schedule", {"schedule_type": "FIX_RATE", "schedule_conf": "60"},
             "enabled"),
        ]
        for method, path, body, flag in cases:
            for loose in ("yes", 1, "true", 0):
                r = await http.request(method, path, json={**body, flag: loose})
                assert (r.status_code, r.json()["field"]) == (422, flag), (path, flag, loose, r.text)
        assert (await sqlite_store.jobs.list()).total == 1  # nothing stored by the refusals
        assert "bob" not in {u["username"] for u in (await http.get("/users")).json()["items"]}
        r = await http.post("/jobs", json={**job_fields, "alarm_recovery": True})
        assert r.status_code == 201 and r.json()["alarm_recovery"] is True, r.text
