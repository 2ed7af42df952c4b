"""Calendars across groups (security review 2, 6, 7, 8, 12): an .ics that would overflow is
refused naming ``ics``; previews, moves and answers never reach or reveal another group's
calendar or jobs; a calendar update is audited with its changed parts."""

from __future__ import annotations

from typing import Any

from jobring.admin.store import Store
from tests.admin.api_harness import T0, api_env


def job_body(group: int, **over: Any) -> dict[str, Any]:
    body = {"job_group": group, "job_desc": "daily", "executor_handler": "demo", "schedule_type": "CRON",
            "schedule_conf": "0 0 3 * * ?", "schedule_timezone": "UTC"}
    body.update(over)
    return body


def ics(*lines: str) -> str:
    event = "".join(f"{line}\r\n" for line in lines)
    head = "BEGIN:VCALENDAR\r\nVERSION:2.0\r\nPRODID:x\r\nBEGIN:VEVENT\r\nUID:u\r\n"
    return f"{head}{event}END:VEVENT\r\nEND:VCALENDAR\r\n"


async def test_an_ics_import_overflowing_a_date_is_refused_naming_ics(sqlite_store: Store) -> None:
    async with api_env(sqlite_store) as env, env.client("op_in") as op:
        body = ics("DTSTART;VALUE=DATE:20260101", "DTEND;VALUE=DATE:99991231", "RRULE:FREQ=DAILY;COUNT=3")
        r = await op.post("/calendars/import", json={"name": "far", "job_group": env.group_a, "ics": body,
                                                     "until": "9999-12-31"})
        assert r.status_code == 422 and r.json()["field"] == "ics", r.text


async def test_a_preview_cannot_read_another_groups_calendar(sqlite_store: Store) -> None:
    async with (api_env(sqlite_store) as env, env.client("op_in") as op, env.client("op_out") as op_b,
                env.client("admin") as admin):
        r = await op_b.post("/calendars", json={"name": "b-secret", "job_group": env.group_b,
                                                "dates": ["2026-01-02"]})
        assert r.status_code == 201, r.text
        mine = await env.add_job(env.group_a)
        ask = {"schedule_type": "CRON", "schedule_conf": "0 0 3 * * ?", "timing": {"calendars": ["b-secret"]},
               "count": 5, "after": T0}
        r = await op.post("/schedules/preview", json={**ask, "job_id": mine, "job_group": env.group_b})
        assert r.status_code == 404 and "b-secret" not in r.text and "2026-01-02" not in r.text
        assert r.json()["field"] == "job_group", r.text
        # Even a caller who may read both groups: job_group must be the job's own.
        r = await admin.post("/schedules/preview", json={**ask, "job_id": mine, "job_group": env.group_b})
        assert r.status_code == 422 and r.json()["field"] == "job_group", r.text


async def test_moving_a_job_through_xxl3_cannot_keep_its_groups_calendar(sqlite_store: Store) -> None:
    async with api_env(sqlite_store) as env, env.client("admin") as admin, env.client("op_in") as op:
        r = await op.post("/calendars", json={"name": "a-only", "job_group": env.group_a,
                                              "dates": ["2026-01-02"]})
        assert r.status_code == 201, r.text
        job_id = await env.add_job(env.group_a)
        r = await op.patch(f"/jobs/{job_id}", json={"timing": {"calendars": ["a-only"]}})
        assert r.status_code == 200, r.text
        async with env.raw_client() as http:
            r = await http.post("/api/updateJob", json={"id": job_id, "jobGroup": env.group_b},
                                headers={"XXL-JOB-ACCESS-TOKEN": env.tokens["admin"]})
        assert "a-only" in r.text, r.text
        job = await env.store.jobs.get(job_id)
        assert job is not None and job.job_group == env.group_a
        r = await admin.patch(f"/jobs/{job_id}", json={"job_group": env.group_b})
        assert r.status_code == 422, r.text


async def test_calendar_answers_reveal_no_other_groups_jobs_or_calendars(sqlite_store: Store) -> None:
    async with (api_env(sqlite_store) as env, env.client("admin") as admin, env.client("op_in") as op,
                env.client("op_out") as op_b):
        r = await admin.post("/calendars", json={"name": "glob", "dates": ["2026-10-01"]})
        glob = r.json()
        r = await op_b.post("/jobs", json=job_body(env.group_b, timing={"calendars": ["glob"]}))
        b_job = r.json()["id"]
        r = await op.post("/jobs", json=job_body(env.group_a, timing={"calendars": ["glob"]}))
        a_job = r.json()["id"]
        seen = {c["name"]: c for c in (await op.get("/calendars")).json()}["glob"]
        assert seen["used_by"] == [a_job] and seen["used_by_hidden"] == 1
        assert (await admin.get(f"/calendars/{glob['id']}")).json()["used_by"] == sorted([a_job, b_job])
        r = await admin.delete(f"/calendars/{glob['id']}")
        assert r.status_code == 409 and str(b_job) in r.text
        r = await op_b.post("/calendars", json={"name": "b-secret", "job_group": env.group_b,
                                                "dates": ["2026-01-02"]})
        b_cal = r.json()["id"]
        hidden = await op.post("/calendars", json={"name": "b-secret", "job_group": env.group_a})
        r = await op.post("/calendars", json={"name": "a-cal", "job_group": env.group_a})
        visible = await op.post("/calendars", json={"name": "a-cal", "job_group": env.group_a})
        assert (hidden.status_code, visible.status_code) == (422, 422)
        answers = (hidden.json()["error"].replace("b-secret", "N"),
                   visible.json()["error"].replace("a-cal", "N"))
        assert answers[0] == answers[1]
        r = await op.post("/calendars/import", json={"name": "b-secret", "job_group": env.group_a,
                                                     "dates": ["2026-01-03"], "replace": True})
        assert r.status_code == 422 and str(b_cal) not in r.text
        assert r.json()["error"] == hidden.json()["error"]


async def test_a_calendar_update_is_audited_with_its_changed_parts(sqlite_store: Store) -> None:
    async with api_env(sqlite_store) as env, env.client("admin") as admin:
        r = await admin.post("/calendars", json={"name": "g", "dates": ["2026-01-02"]})
        r = await admin.put(f"/calendars/{r.json()['id']}", json={"dates": ["2026-01-09"]})
        assert r.status_code == 200, r.text
        items = (await admin.get("/audit", params={"limit": 20})).json()["items"]
        update = next(e for e in items if e["action"] == "calendar.update")
        assert update["details"]["changes"] == {"dates": {"before": ["2026-01-02"], "after": ["2026-01-09"]}}
