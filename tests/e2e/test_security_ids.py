"""Issue #9 item 3 end to end: a real admin (SQLite) and a real executor process. A run
deleted by "clear runs" must not hand its id, nor its executor log, to the next run; a
deleted group must not hand its permissions to the next group."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.e2e.admin_nodes import TOKEN, kill, start_admin
from tests.e2e.security_kit import demo_executor, eventually, logged_in

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(240)]


async def _finished_run(http: httpx.AsyncClient, log_id: int) -> dict[str, Any]:
    async def check() -> dict[str, Any] | None:
        run: dict[str, Any] = (await http.get(f"/runs/{log_id}")).json()
        return run if run.get("handle_code") == 200 else None

    return await eventually(check, f"run {log_id} to succeed")


async def _trigger(http: httpx.AsyncClient, job: int, param: str) -> dict[str, Any]:
    answer = await http.post(f"/jobs/{job}/trigger", json={"executor_param": param})
    assert answer.status_code == 200, answer.text
    (log_id,) = answer.json()["log_ids"]
    return await _finished_run(http, log_id)


async def test_a_cleared_run_never_lends_its_id_or_log_to_a_new_run(tmp_path: Path) -> None:
    node = await start_admin(f"sqlite+aiosqlite:///{tmp_path / 'ids.db'}", "ids", tmp_path)
    try:
        async with logged_in(node) as http, demo_executor(node, tmp_path / "exec-logs") as address:
            group = (await http.post("/groups", json={"app_name": "jobring-demo", "title": "demo",
                                                       "address_type": 1, "addresses": [address]})).json()
            job = (await http.post("/jobs", json={"job_group": group["id"], "job_desc": "hello",
                                                  "executor_handler": "hello"})).json()
            first = await _trigger(http, job["id"], "secret-of-run-one")
            first_log = (await http.get(f"/runs/{first['id']}/log")).json()["log_content"]
            assert "secret-of-run-one" in first_log

            cleared = await http.post("/runs/clear", json={"rule": "all"})
            assert cleared.status_code == 200, cleared.text
            second = await _trigger(http, job["id"], "second")
            # The attack: the new run got the deleted run's id and showed its log lines.
            assert second["id"] != first["id"]
            second_log = (await http.get(f"/runs/{second['id']}/log")).json()["log_content"]
            assert "second" in second_log and "secret-of-run-one" not in second_log

            # The executor keys its files by id AND trigger time: asking for the first run's id
            # with another trigger time (what a reused id would carry) finds nothing.
            async with httpx.AsyncClient(headers={"XXL-JOB-ACCESS-TOKEN": TOKEN}) as raw:
                later_ms = first_trigger_ms(second) + 5_000
                answer = (await raw.post(address + "log", json={
                    "logDateTim": later_ms, "logId": first["id"], "fromLineNum": 1})).json()
            assert answer["code"] == 200 and "secret" not in answer["content"]["logContent"]
    finally:
        await kill(node)


def first_trigger_ms(run: dict[str, Any]) -> int:
    from datetime import datetime

    return int(datetime.fromisoformat(run["trigger_time"].replace("Z", "+00:00")).timestamp() * 1000)


async def test_a_deleted_group_never_lends_its_permissions_to_a_new_group(tmp_path: Path) -> None:
    node = await start_admin(f"sqlite+aiosqlite:///{tmp_path / 'groups.db'}", "groups", tmp_path)
    try:
        async with logged_in(node) as http:
            old = (await http.post("/groups", json={"app_name": "old-app", "title": "old"})).json()
            viewer = await http.post("/users", json={"username": "val", "password": "val-password-2026",
                                                     "role": "viewer", "group_ids": [old["id"]],
                                                     "must_change_password": False})
            assert viewer.status_code == 201, viewer.text
            assert (await http.delete(f"/groups/{old['id']}")).status_code == 204
            assert (await http.get(f"/users/{viewer.json()['id']}")).json()["group_ids"] == []
            new = (await http.post("/groups", json={"app_name": "new-app", "title": "new"})).json()
            assert new["id"] != old["id"]
        async with logged_in(node, "val", "val-password-2026") as val:
            # The attack: the new group inherited the deleted one's id and so its viewers. It
            # answers as a missing group does.
            hidden = await val.get(f"/groups/{new['id']}")
            assert (hidden.status_code, hidden.json()) == (
                404, {"error": f"executor group {new['id']} not found", "field": None})
            assert [g["id"] for g in (await val.get("/groups")).json()["items"]] == []
    finally:
        await kill(node)
