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
