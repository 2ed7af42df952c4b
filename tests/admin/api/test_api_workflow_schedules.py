"""/api/v1/workflows/{id}/schedule: set, start and stop a workflow's schedule; refusals name the
field; viewers read it, other groups' operators do not see it; the change is audited."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

from jobring.admin.services.workflows import WorkflowDriver
from jobring.admin.store import Store
from tests.admin.api_harness import api_env


async def test_a_schedule_is_set_started_and_stopped_by_the_groups_operator(sqlite_store: Store) -> None:
    async with api_env(sqlite_store) as env, env.client("op_in") as http:
        job = await env.add_job(env.group_a)
        created = await http.post("/workflows", json={"name": "w", "job_group": env.group_a,
                                                      "nodes": [{"key": "a", "job_id": job}], "edges": []})
        wid = created.json()["id"]
        path = f"/workflows/{wid}/schedule"
        first = (await http.get(path)).json()
        assert (first["schedule_type"], first["enabled"], first["next_fire_at"]) == ("NONE", False, None)
        for body, field in (
            ({"schedule_type": "CRON", "schedule_conf": "61 * * * * ?"}, "schedule_conf"),
            ({"schedule_type": "FIX_RATE", "schedule_conf": "soon"}, "schedule_conf"),
            ({"schedule_type": "CRON", "schedule_conf": "0 0 2 * * ?", "schedule_timezone": "Mars/Base"},
             "schedule_timezone"),
            ({"schedule_type": "NONE", "enabled": True}, "enabled"),
            ({"schedule_type": "CRON", "schedule_conf": "0 0 2 * * ?", "overlap": "sometimes"}, "overlap"),
        ):
            answer = await http.put(path, json=body)
            assert answer.status_code == 422, (body, answer.text)
            assert field in answer.text, (body, answer.text)
        body = {"schedule_type": "CRON", "schedule_conf": "0 0 2 * * ?", "schedule_timezone": "Asia/Shanghai",
                "overlap": "queue_one", "params": {"day": "x"}, "enabled": True}
        saved = (await http.put(path, json=body)).json()
        assert saved["enabled"] and saved["next_fire_at"] == saved["next_times"][0]
        assert len(saved["next_times"]) == 5 and saved["updated_by"] == "op_in"
        # A Unix 5-field cron is stored in its Quartz form, as for jobs.
        unix = (await http.put(path, json={**body, "schedule_conf": "0 2 * * *"})).json()
        assert unix["schedule_conf"] == "0 0 2 * * ?"
        stopped = (await http.put(path, json={**body, "enabled": False})).json()
        assert not stopped["enabled"] and stopped["next_fire_at"] is None and stopped["next_times"]
        async with env.client("viewer") as viewer:
            assert (await viewer.get(path)).json()["schedule_conf"] == "0 0 2 * * ?"
            assert (await viewer.put(path, json=body)).status_code == 403
        async with env.client("op_out") as other:
            assert (await other.get(path)).status_code == 404
            assert (await other.put(path, json=body)).status_code == 404
        async with env.client("admin") as admin:
            events = (await admin.get("/audit", params={"limit": 50})).json()["items"]
        assert [e["action"] for e in events].count("workflow.schedule") == 3


async def test_a_one_shot_schedule_fires_at_its_time_in_its_zone(sqlite_store: Store) -> None:
    async with api_env(sqlite_store) as env, env.client("op_in") as http:
        job = await env.add_job(env.group_a)
        created = await http.post("/workflows", json={"name": "w", "job_group": env.group_a,
                                                      "nodes": [{"key": "a", "job_id": job}], "edges": []})
        path = f"/workflows/{created.json()['id']}/schedule"
        now = datetime.fromtimestamp(env.clock.now_ms() / 1000, tz=UTC)
        later = (now + timedelta(days=2)).astimezone(ZoneInfo("Asia/Shanghai"))
        body = {"schedule_type": "ONCE", "schedule_conf": later.strftime("%Y-%m-%d %H:%M"),
                "schedule_timezone": "Asia/Shanghai", "misfire_strategy": "FIRE_ONCE_NOW", "enabled": True}
        saved = (await http.put(path, json=body)).json()
        expected = int(later.replace(second=0).timestamp()) * 1000
        assert saved["schedule_conf"] == later.strftime("%Y-%m-%dT%H:%M:00")
        assert saved["next_fire_at"] == expected and saved["next_times"] == [expected]
        assert not saved["spent"]
        for conf, field in (("next tuesday", "schedule_conf"),
                            ((now - timedelta(days=1)).strftime("%Y-%m-%dT%H:%M"), "schedule_conf")):
            answer = await http.put(path, json={**body, "schedule_conf": conf, "schedule_timezone": "UTC"})
            assert answer.status_code == 422 and answer.json()["field"] == field, answer.text
        # A past time is fine while stopped (nothing is planned).
        past = (now - timedelta(days=1)).strftime("%Y-%m-%dT%H:%M")
        kept = await http.put(path, json={**body, "schedule_conf": past, "enabled": False})
        assert kept.status_code == 200 and kept.json()["next_times"] == []


async def test_a_manual_trigger_keeps_the_overlap_rule_unless_forced(sqlite_store: Store) -> None:
    # One run at a time by default (skip), and under queue_one: a trigger while a run is going
    # answers 409 naming it and starts nothing; with force it starts; under allow it starts.
    async with api_env(sqlite_store) as env, env.client("op_in") as http:
        assert env.services.trigger is not None
        env.services.workflows = WorkflowDriver(env.store, env.services.trigger, env.services.executors,
                                                env.clock, node_id="api-test")
        job = await env.add_job(env.group_a)
        created = await http.post("/workflows", json={"name": "w", "job_group": env.group_a,
                                                      "nodes": [{"key": "a", "job_id": job}], "edges": []})
        wid = created.json()["id"]
        trigger = f"/workflows/{wid}/trigger"

        async def runs() -> list[int]:
            listed = await http.get("/workflow-runs", params={"workflow_id": wid})
            return [r["id"] for r in listed.json()["items"]]

        first = await http.post(trigger, json={})
        assert first.status_code == 200, first.text
        going = first.json()["workflow_run_id"]
        for overlap in ("skip", "queue_one"):
            if overlap != "skip":  # skip is the rule of a workflow without a schedule
                set_rule = await http.put(f"/workflows/{wid}/schedule", json={"schedule_type": "NONE",
                                                                               "overlap": overlap})
                assert set_rule.status_code == 200, set_rule.text
            refused = await http.post(trigger, json={"params": {"x": 1}})
            assert refused.status_code == 409 and refused.json()["field"] == "force", refused.text
            assert str(going) in refused.json()["error"] and overlap in refused.json()["error"], refused.text
            assert await runs() == [going]
        for loose in ("yes", 1):  # only a JSON boolean forces
            refused = await http.post(trigger, json={"force": loose})
            assert refused.status_code == 422 and refused.json()["field"] == "force", refused.text
        forced = await http.post(trigger, json={"force": True})
        assert forced.status_code == 200, forced.text
        assert sorted(await runs()) == sorted([going, forced.json()["workflow_run_id"]])
        await http.put(f"/workflows/{wid}/schedule", json={"schedule_type": "NONE", "overlap": "allow"})
        allowed = await http.post(trigger, json={})
        assert allowed.status_code == 200, allowed.text
        assert len(await runs()) == 3
        # Each trigger is audited: the refused ones as failures saying why, a forced one as such.
        async with env.client("admin") as admin:
            events = (await admin.get("/audit", params={"limit": 50})).json()["items"]
        triggers = sorted((e["outcome"], e["details"].get("force"), "runs one at a time" in str(e["details"]))
                          for e in events if e["action"] == "workflow.trigger")
        assert triggers == [("failure", None, True), ("failure", None, True), ("success", False, False),
                            ("success", False, False), ("success", True, False)], triggers
