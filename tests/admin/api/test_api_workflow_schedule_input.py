"""Regression tests of the workflow-schedule security review: the zone and the expression are
one line of plain text whatever the type, params the store cannot keep answer 422 naming
``params`` (schedule, trigger, graph), and a change of params alone is audited (as a digest)."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from jobring.admin.store import Store
from tests.admin.api_harness import ApiEnv, api_env


async def _workflow(env: ApiEnv, http: httpx.AsyncClient, **node: Any) -> int:
    job = await env.add_job(env.group_a)
    r = await http.post("/workflows", json={"name": "w", "job_group": env.group_a,
                                            "nodes": [{"key": "a", "job_id": job, **node}], "edges": []})
    assert r.status_code in (200, 201), r.text
    return int(r.json()["id"])


async def test_zone_and_expression_are_one_line_whatever_the_type(sqlite_store: Store) -> None:
    async with api_env(sqlite_store) as env, env.client("op_in") as http:
        wid = await _workflow(env, http)
        for body, field in (
            ({"schedule_type": "NONE", "schedule_timezone": "Evil\r\nX-Injected: 1\x00\x1b[31m"},
             "schedule_timezone"),
            ({"schedule_type": "NONE", "schedule_timezone": "Not/AZone"}, "schedule_timezone"),
            ({"schedule_type": "NONE", "schedule_conf": "a\nb"}, "schedule_conf"),
            ({"schedule_type": "NONE", "schedule_conf": "\x00"}, "schedule_conf"),
        ):
            r = await http.put(f"/workflows/{wid}/schedule", json=body)
            assert r.status_code == 422 and r.json()["field"] == field, (body, r.text)
        got = await http.get(f"/workflows/{wid}/schedule")
        assert got.json()["schedule_timezone"] is None


async def test_params_the_store_cannot_keep_name_params(sqlite_store: Store) -> None:
    async with api_env(sqlite_store) as env, env.client("op_in") as http:
        wid = await _workflow(env, http)
        for params in ({"n": 2**70}, {"n": -(2**63) - 1}, {"deep": [[[{"n": 2**64}]]]}):
            r = await http.put(f"/workflows/{wid}/schedule", json={"schedule_type": "NONE", "params": params})
            assert r.status_code == 422 and r.json()["field"] == "params", r.text
        r = await http.put(f"/workflows/{wid}/schedule", json={"schedule_type": "NONE",
                                                                "params": {"n": 2**63 - 1}})
        assert r.status_code == 200 and r.json()["params"] == {"n": 2**63 - 1}, r.text
        job = await env.add_job(env.group_a)
        node = {"key": "a", "job_id": job, "params": {"n": 2**70}}
        r = await http.post("/workflows", json={"name": "w2", "job_group": env.group_a, "edges": [],
                                                "nodes": [node]})
        assert r.status_code == 422 and r.json()["field"] == "nodes", r.text


async def test_trigger_params_beyond_64_bits_name_params(sqlite_store: Store) -> None:
    async with api_env(sqlite_store) as env, env.client("op_in") as http:
        wid = await _workflow(env, http)
        # Checked before the workflow driver is needed (this harness has none).
        r = await http.post(f"/workflows/{wid}/trigger", json={"params": {"n": 2**70}})
        assert r.status_code == 422 and r.json()["field"] == "params", r.text


async def test_a_change_of_params_alone_is_audited_as_a_digest(sqlite_store: Store) -> None:
    async with api_env(sqlite_store) as env, env.client("op_in") as http, env.client("admin") as admin:
        wid = await _workflow(env, http)
        body: dict[str, Any] = {"schedule_type": "CRON", "schedule_conf": "0 0 2 * * ?", "enabled": True,
                                "params": {"target": "prod-db"}}
        assert (await http.put(f"/workflows/{wid}/schedule", json=body)).status_code == 200
        body["params"] = {"target": "attacker-db"}
        assert (await http.put(f"/workflows/{wid}/schedule", json=body)).status_code == 200
        items = (await admin.get("/audit", params={"action": "workflow.schedule"})).json()["items"]
        assert "attacker-db" not in str(items) and "prod-db" not in str(items)
        changed = [e for e in items if "params" in str(e.get("details"))]
        assert changed, items
        change = changed[0]["details"]["changes"]["params"]
        assert change["before"]["sha256"] != change["after"]["sha256"]
        assert change["after"]["size"] == len('{"target":"attacker-db"}')


async def test_the_answer_to_a_schedule_edit_shows_the_sweeps_note_stored_meanwhile(
        sqlite_store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    async with api_env(sqlite_store) as env, env.client("op_in") as http:
        wid = await _workflow(env, http)
        body: dict[str, Any] = {"schedule_type": "CRON", "schedule_conf": "0 0 2 * * ?", "enabled": True}
        assert (await http.put(f"/workflows/{wid}/schedule", json=body)).status_code == 200
        schedules = sqlite_store.workflow_schedules
        real_put = schedules.put

        async def sweep_first(*args: Any, **kwargs: Any) -> bool:
            await schedules.note(wid, "started run 7")  # the sweep's fire, between read and write
            return await real_put(*args, **kwargs)

        monkeypatch.setattr(schedules, "put", sweep_first)
        body["schedule_conf"] = "0 0 3 * * ?"
        r = await http.put(f"/workflows/{wid}/schedule", json=body)
        assert r.status_code == 200 and r.json()["last_result"] == "started run 7", r.text
        assert r.json()["schedule_conf"] == "0 0 3 * * ?"


async def test_a_cron_that_never_fires_again_is_not_started(sqlite_store: Store) -> None:
    # As a job's: started, it would be stored as running with nothing planned, and never run.
    async with api_env(sqlite_store) as env, env.client("op_in") as http:
        wid = await _workflow(env, http)
        for conf in ("0 0 0 30 2 ?", "0 0 2 * * ? 1999"):
            body = {"schedule_type": "CRON", "schedule_conf": conf, "enabled": True}
            r = await http.put(f"/workflows/{wid}/schedule", json=body)
            assert r.status_code == 422 and r.json()["field"] == "schedule_conf", r.text
            assert "never fires again" in r.json()["error"], r.text
        got = (await http.get(f"/workflows/{wid}/schedule")).json()
        assert got["schedule_type"] == "NONE" and got["enabled"] is False
        stopped = {"schedule_type": "CRON", "schedule_conf": "0 0 0 30 2 ?", "enabled": False}
        assert (await http.put(f"/workflows/{wid}/schedule", json=stopped)).status_code == 200
