"""Calendars and job timing rules through the REST API: CRUD and import, who may read and
write which calendar, validation naming the field, previews listing the excluded instants,
pause notes."""

from __future__ import annotations

from typing import Any

import pytest

from jobring.admin.store import Store
from tests.admin.api_harness import T0, api_env

DAY = 86_400_000
HOUR = 3_600_000
# T0 is 2026-01-01T00:00:00Z; the jobs fire daily at 03:00 UTC.
NEW_YEAR_2 = "2026-01-02"


def job_body(group: int, **over: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "job_group": group,
        "job_desc": "daily",
        "executor_handler": "demo",
        "schedule_type": "CRON",
        "schedule_conf": "0 0 3 * * ?",
        "schedule_timezone": "UTC",
    }
    body.update(over)
    return body


async def test_calendar_crud_and_who_may_do_what(sqlite_store: Store) -> None:
    async with (
        api_env(sqlite_store) as env,
        env.client("admin") as admin,
        env.client("op_in") as op,
        env.client("op_out") as other,
        env.client("viewer") as viewer,
    ):
        r = await admin.post(
            "/calendars",
            json={"name": "cn-2026", "zone": "Asia/Shanghai", "dates": ["2026-10-01", NEW_YEAR_2]},
        )
        assert r.status_code == 201, r.text
        glob = r.json()
        assert glob["job_group"] is None and glob["spec"]["dates"] == ["2026-10-01", NEW_YEAR_2]
        assert glob["updated_by"] == "admin" and glob["used_by"] == []
        r = await op.post("/calendars", json={"name": "global-by-op", "dates": [NEW_YEAR_2]})
        assert r.status_code == 403 and r.json()["field"] == "job_group"
        r = await op.post(
            "/calendars",
            json={
                "name": "ops-a",
                "job_group": env.group_a,
                "day_windows": [{"start": "22:00", "end": "06:00"}],
            },
        )
        assert r.status_code == 201, r.text
        mine = r.json()
        assert (
            await viewer.post("/calendars", json={"name": "v", "job_group": env.group_a})
        ).status_code == 403
        r = await other.post(
            "/calendars", json={"name": "x", "job_group": env.group_a, "dates": [NEW_YEAR_2]}
        )
        assert r.status_code == 404 and r.json()["field"] == "job_group"
        # Group B's operator sees the global calendar only; A's sees both.
        assert [c["name"] for c in (await other.get("/calendars")).json()] == ["cn-2026"]
        assert [c["name"] for c in (await op.get("/calendars")).json()] == ["cn-2026", "ops-a"]
        assert (await other.get(f"/calendars/{mine['id']}")).status_code == 404
        assert (await other.put(f"/calendars/{glob['id']}", json={"dates": []})).status_code == 403
        r = await op.put(
            f"/calendars/{mine['id']}", json={"day_windows": [{"start": "12:00", "end": "13:30"}]}
        )
        assert r.status_code == 200 and r.json()["spec"]["day_windows"] == [
            {"start": "12:00", "end": "13:30"}
        ]
        assert r.json()["name"] == "ops-a"
        r = await op.post("/calendars", json={"name": "ops-a", "job_group": env.group_a})
        assert r.status_code == 422 and r.json()["field"] == "name"
        assert (await op.delete(f"/calendars/{mine['id']}")).status_code == 204
        assert (await op.get(f"/calendars/{mine['id']}")).status_code == 404


INVALID_CALENDARS = [
    ({"dates": ["2026-02-30"]}, "dates[0]"),
    ({"dates": ["tomorrow"]}, "dates[0]"),
    ({"date_ranges": [{"start": "2026-03-02", "end": "2026-03-01"}]}, "date_ranges[0].end"),
    ({"day_windows": [{"start": "10:00", "end": "10:00"}]}, "day_windows[0].end"),
    ({"day_windows": [{"start": "25:00", "end": "10:00"}]}, "day_windows[0].start"),
    ({"workdays": ["MON", "FUNDAY"]}, "workdays.1"),
    ({"workdays": ["MON"], "invert": True}, "workdays"),
    ({"cron": "0 0 12 * * MON"}, "cron"),
    ({"zone": "Mars/Base"}, "zone"),
    ({"periods": [{"start": "2026-03-01T10:00Z", "end": "2026-03-01T09:00Z"}]}, "periods[0].end"),
    ({"name": "-bad"}, "name"),
    ({"colour": "red"}, "colour"),
]


@pytest.mark.parametrize(("change", "field"), INVALID_CALENDARS, ids=[f for _, f in INVALID_CALENDARS])
async def test_an_invalid_calendar_is_refused_naming_its_field(
    sqlite_store: Store, change: dict[str, Any], field: str
) -> None:
    async with api_env(sqlite_store) as env, env.client("admin") as http:
        r = await http.post("/calendars", json={"name": "c", "job_group": env.group_a, **change})
        assert r.status_code == 422, r.text
        assert r.json()["field"] == field, r.json()
        assert await sqlite_store.calendars.list() == []


async def test_import_from_ics_and_from_dates(sqlite_store: Store) -> None:
    ics = (
        "BEGIN:VCALENDAR\r\nVERSION:2.0\r\nPRODID:-//test//EN\r\n"
        "BEGIN:VEVENT\r\nUID:a\r\nDTSTART;VALUE=DATE:20260102\r\nSUMMARY:Day off\r\nEND:VEVENT\r\n"
        "BEGIN:VEVENT\r\nUID:b\r\nDTSTART;VALUE=DATE:20260105\r\nRRULE:FREQ=YEARLY\r\nEND:VEVENT\r\n"
        "END:VCALENDAR\r\n"
    )
    async with api_env(sqlite_store) as env, env.client("op_in") as http:
        r = await http.post(
            "/calendars/import",
            json={"name": "ics", "job_group": env.group_a, "ics": ics, "until": "2027-12-31"},
        )
        assert r.status_code == 201, r.text
        assert r.json()["spec"]["dates"] == ["2026-01-02", "2026-01-05", "2027-01-05"]
        r = await http.post(
            "/calendars/import",
            json={"name": "ics", "job_group": env.group_a, "dates": ["2026-05-01"], "replace": True},
        )
        assert r.status_code == 201 and r.json()["spec"]["dates"] == ["2026-05-01"]
        r = await http.post(
            "/calendars/import", json={"name": "bad", "job_group": env.group_a, "ics": "nope"}
        )
        assert r.status_code == 422 and r.json()["field"] == "ics"
        r = await http.post("/calendars/import", json={"name": "none", "job_group": env.group_a})
        assert r.status_code == 422 and r.json()["field"] == "ics"


INVALID_TIMING = [
    ({"calendars": ["nope"]}, "timing.calendars[0]"),
    ({"calendars": ["b-only"]}, "timing.calendars[0]"),  # group B's calendar, not A's
    ({"calendar_action": "drop"}, "timing.calendar_action"),
    ({"jitter_seconds": -1}, "timing.jitter_seconds"),
    ({"max_runs": 0}, "timing.max_runs"),
    ({"start_at": "2026-02-01T00:00:00Z", "end_at": "2026-01-01T00:00:00Z"}, "timing.end_at"),
    ({"start_at": "2026-02-01T00:00:00"}, "timing.start_at"),
    ({"overlap": "sometimes"}, "timing.overlap"),
    ({"catch_up": {"window_seconds": 5}}, "timing.catch_up.window_seconds"),
    ({"catch_up": {"window_seconds": 60, "mode": "all"}}, "timing.catch_up.mode"),
    ({"dst": {"gap": "later"}}, "timing.dst.gap"),
    ({"dst": {"repeat": "third"}}, "timing.dst.repeat"),
    ({"jitter": 3}, "timing.jitter"),
]


@pytest.mark.parametrize(("timing", "field"), INVALID_TIMING, ids=[f for _, f in INVALID_TIMING])
async def test_invalid_timing_is_refused_naming_its_field(
    sqlite_store: Store, timing: dict[str, Any], field: str
) -> None:
    async with api_env(sqlite_store) as env, env.client("admin") as http:
        assert (
            await http.post(
                "/calendars", json={"name": "b-only", "job_group": env.group_b, "dates": [NEW_YEAR_2]}
            )
        ).status_code == 201
        r = await http.post("/jobs", json=job_body(env.group_a, timing=timing))
        assert r.status_code == 422, r.text
        assert r.json()["field"] == field, r.json()
        assert (await sqlite_store.jobs.list()).total == 0


async def test_a_job_with_a_holiday_calendar_starts_and_previews_around_it(sqlite_store: Store) -> None:
    async with api_env(sqlite_store) as env, env.client("admin") as admin, env.client("op_in") as http:
        cal = (await admin.post("/calendars", json={"name": "holidays", "dates": [NEW_YEAR_2]})).json()
        r = await http.post(
            "/jobs", json=job_body(env.group_a, timing={"calendars": ["holidays"], "jitter_seconds": 0})
        )
        assert r.status_code == 201, r.text
        job = r.json()
        assert job["timing"]["calendars"] == ["holidays"] and job["timing"]["calendar_action"] == "skip"
        r = await http.post(
            "/schedules/preview",
            json={
                "schedule_type": "CRON",
                "schedule_conf": "0 0 3 * * ?",
                "timezone": "UTC",
                "job_id": job["id"],
                "count": 3,
            },
        )
        preview = r.json()
        assert preview["times"] == [T0 + 3 * HOUR, T0 + 2 * DAY + 3 * HOUR, T0 + 3 * DAY + 3 * HOUR], preview
        assert [(e["instant"], e["calendar"]) for e in preview["excluded"]] == [
            (T0 + DAY + 3 * HOUR, "holidays")
        ]
        assert preview["excluded"][0]["reason"] == "calendar 'holidays': dates[0] (2026-01-02)"
        # The same preview for an unsaved job, and with move: the holiday fires at its end.
        r = await http.post(
            "/schedules/preview",
            json={
                "schedule_type": "CRON",
                "schedule_conf": "0 0 3 * * ?",
                "timezone": "UTC",
                "count": 2,
                "job_group": env.group_a,
                "timing": {"calendars": ["holidays"], "calendar_action": "move"},
            },
        )
        fires = r.json()["fires"]
        assert [(f["logical"], f["fire_at"]) for f in fires] == [
            (T0 + 3 * HOUR, T0 + 3 * HOUR),
            (T0 + DAY + 3 * HOUR, T0 + 2 * DAY),
        ]
        assert fires[1]["moved_by"] == "calendar 'holidays': dates[0] (2026-01-02)"
        r = await http.post(f"/jobs/{job['id']}/start")
        assert r.status_code == 200 and r.json()["trigger_next_time"] == T0 + 3 * HOUR
        assert (await admin.get(f"/calendars/{cal['id']}")).json()["used_by"] == [job["id"]]
        r = await admin.delete(f"/calendars/{cal['id']}")
        assert r.status_code == 409 and "used by jobs" in r.json()["error"]
        # An edit of the calendar touches the job (the scheduling loop plans it again).
        env.clock.advance(5_000)
        before = await sqlite_store.jobs.get(job["id"])
        assert (await admin.put(f"/calendars/{cal['id']}", json={"dates": ["2026-01-01"]})).status_code == 200
        after = await sqlite_store.jobs.get(job["id"])
        assert before is not None and after is not None and after.update_time != before.update_time
        r = await http.patch(f"/jobs/{job['id']}", json={"timing": None})
        assert r.status_code == 200 and r.json()["timing"] is None
        assert (await admin.delete(f"/calendars/{cal['id']}")).status_code == 204


async def test_validity_window_and_run_limit_in_previews(sqlite_store: Store) -> None:
    async with api_env(sqlite_store) as env, env.client("op_in") as http:
        r = await http.post(
            "/schedules/preview",
            json={
                "schedule_type": "CRON",
                "schedule_conf": "0 0 3 * * ?",
                "timezone": "UTC",
                "count": 5,
                "job_group": env.group_a,
                "timing": {
                    "start_at": "2026-01-03T00:00:00Z",
                    "end_at": "2026-01-04T12:00:00+00:00",
                    "max_runs": 9,
                },
            },
        )
        body = r.json()
        assert body["times"] == [T0 + 2 * DAY + 3 * HOUR, T0 + 3 * DAY + 3 * HOUR] and body["end"] == "end_at"
        r = await http.post("/jobs", json=job_body(env.group_a, timing={"max_runs": 3, "jitter_seconds": 60}))
        assert r.json()["timing"] == {
            "start_at": None,
            "end_at": None,
            "max_runs": 3,
            "jitter_seconds": 60,
            "calendars": [],
            "calendar_action": "skip",
            "params_template": False,
            "overlap": "allow_all",
            "catch_up": None,
            "dst": {"gap": "skip", "repeat": "second"},
        }
        r = await http.post("/jobs", json=job_body(env.group_a, timing={
            "overlap": "buffer_one", "catch_up": {"window_seconds": 600, "mode": "once"},
            "dst": {"gap": "next_valid", "repeat": "both"}}))
        assert r.status_code == 201, r.text
        timing = r.json()["timing"]
        assert timing["overlap"] == "buffer_one" and timing["dst"] == {"gap": "next_valid", "repeat": "both"}
        assert timing["catch_up"] == {"window_seconds": 600, "mode": "once", "limit": 100}
        stored = await sqlite_store.jobs.get(r.json()["id"])
        assert stored is not None and '"overlap":"buffer_one"' in (stored.timing or "")
        r = await http.post("/jobs", json=job_body(env.group_a, timing={"overlap": "allow_all"}))
        assert r.status_code == 201 and r.json()["timing"] is None  # only defaults: no rules
        r = await http.post("/jobs", json=job_body(env.group_a, timing={"end_at": T0 - 1}))
        assert r.status_code == 201
        r = await http.post(f"/jobs/{r.json()['id']}/start")
        assert r.status_code == 400 and r.json()["field"] == "timing"


async def test_pause_note_says_who_why_and_when_until_the_job_starts(sqlite_store: Store) -> None:
    async with api_env(sqlite_store) as env, env.client("op_in") as http:
        job = (await http.post("/jobs", json=job_body(env.group_a))).json()
        await http.post(f"/jobs/{job['id']}/start")
        r = await http.post(f"/jobs/{job['id']}/stop", json={"reason": "upstream late, INC-42"})
        assert r.status_code == 200
        assert r.json()["pause_note"] == {"by": "op_in", "reason": "upstream late, INC-42", "at": T0}
        r = await http.post(f"/jobs/{job['id']}/stop", json={"reason": "x" * 501})
        assert r.status_code == 422 and r.json()["field"] == "reason"
        r = await http.post(f"/jobs/{job['id']}/start")
        assert r.json()["pause_note"] is None
        r = await http.post(f"/jobs/{job['id']}/stop")
        assert r.json()["pause_note"] == {"by": "op_in", "reason": "", "at": T0}


async def test_a_unix_cron_is_stored_as_quartz_and_a_quartz_mistake_gets_a_suggestion(
    sqlite_store: Store,
) -> None:
    async with api_env(sqlite_store) as env, env.client("op_in") as http:
        r = await http.post("/jobs", json=job_body(env.group_a, schedule_conf="*/5 * * * *"))
        assert r.status_code == 201 and r.json()["schedule_conf"] == "0 */5 * * * ?"
        r = await http.patch(
            f"/jobs/{r.json()['id']}", json={"schedule_type": "CRON", "schedule_conf": "30 2 * * 1-5"}
        )
        assert r.json()["schedule_conf"] == "0 30 2 ? * MON-FRI"
        r = await http.post("/jobs", json=job_body(env.group_a, schedule_conf="0 0 12 * * MON"))
        assert r.status_code == 422 and r.json()["field"] == "schedule_conf"
        assert "did you mean '0 0 12 ? * MON'?" in r.json()["error"]
        r = await http.post("/jobs", json=job_body(env.group_a, schedule_conf="0 9 1 * 1"))
        assert r.status_code == 422 and r.json()["field"] == "schedule_conf"
        r = await http.post(
            "/schedules/preview",
            json={
                "schedule_type": "CRON",
                "schedule_conf": "@daily",
                "timezone": "UTC",
                "after": T0,
                "count": 1,
            },
        )
        assert r.json()["times"] == [T0 + DAY]


DST_PREVIEWS = [
    # America/New_York 2026-03-08: 02:00 EST becomes 03:00 EDT (07:00Z).
    ("0 30 2 * * ?", {"gap": "skip"}, "2026-03-07T00:00:00Z",
     ["2026-03-07T07:30:00Z", "2026-03-09T06:30:00Z"]),
    ("0 30 2 * * ?", {"gap": "next_valid"}, "2026-03-07T00:00:00Z",
     ["2026-03-07T07:30:00Z", "2026-03-08T07:00:00Z"]),
    # 2026-11-01: 02:00 EDT becomes 01:00 EST; 01:30 shows at 05:30Z (EDT) and 06:30Z (EST).
    ("0 30 1 * * ?", {"repeat": "first"}, "2026-11-01T00:00:00Z",
     ["2026-11-01T05:30:00Z", "2026-11-02T06:30:00Z"]),
    ("0 30 1 * * ?", {"repeat": "second"}, "2026-11-01T00:00:00Z",
     ["2026-11-01T06:30:00Z", "2026-11-02T06:30:00Z"]),
    ("0 30 1 * * ?", {"repeat": "both"}, "2026-11-01T00:00:00Z",
     ["2026-11-01T05:30:00Z", "2026-11-01T06:30:00Z"]),
]


@pytest.mark.parametrize(("cron", "dst", "start", "expected"), DST_PREVIEWS)
async def test_previews_honour_the_daylight_saving_rules(
    sqlite_store: Store, cron: str, dst: dict[str, str], start: str, expected: list[str]
) -> None:
    async with api_env(sqlite_store) as env, env.client("admin") as http:
        r = await http.post("/schedules/preview", json={
            "schedule_type": "CRON", "schedule_conf": cron, "timezone": "America/New_York", "count": 2,
            "job_group": env.group_a, "timing": {"dst": dst, "start_at": start}})
        assert r.status_code == 200, r.text
        assert [f["fire_at_iso"] for f in r.json()["fires"]] == expected
