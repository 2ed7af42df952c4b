"""Jobs through the REST API: validation (every write names its field, nothing half
written), start/stop/trigger, copy, delete, schedule preview, per-job time zone."""

from __future__ import annotations

from typing import Any

import pytest

from jobring.admin.store import Store
from tests.admin.api_harness import T0, api_env


def job_body(group: int, **over: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "job_group": group,
        "job_desc": "nightly",
        "executor_handler": "demo",
        "schedule_type": "CRON",
        "schedule_conf": "0 0 3 * * ?",
    }
    body.update(over)
    return body


INVALID = [
    ({"schedule_conf": "0 0 25 * * ?"}, "schedule_conf"),
    ({"schedule_conf": "not a cron"}, "schedule_conf"),
    ({"schedule_type": "CRON", "schedule_conf": None}, "schedule_conf"),
    ({"schedule_type": "FIX_RATE", "schedule_conf": "0"}, "schedule_conf"),
    ({"schedule_type": "FIX_RATE", "schedule_conf": "31536001"}, "schedule_conf"),
    ({"schedule_type": "FIX_RATE", "schedule_conf": "ten"}, "schedule_conf"),
    ({"schedule_type": "WEEKLY"}, "schedule_type"),
    ({"executor_handler": ""}, "executor_handler"),
    ({"executor_handler": None}, "executor_handler"),
    ({"executor_route_strategy": "NEAREST"}, "executor_route_strategy"),
    ({"executor_block_strategy": "PANIC"}, "executor_block_strategy"),
    ({"misfire_strategy": "RETRY_FOREVER"}, "misfire_strategy"),
    ({"glue_type": "GLUE_COBOL"}, "glue_type"),
    ({"schedule_timezone": "Mars/Olympus_Mons"}, "schedule_timezone"),
    ({"schedule_timezone": "../../etc/passwd"}, "schedule_timezone"),
    ({"job_group": 999}, "job_group"),
    ({"child_job_ids": [424242]}, "child_job_ids"),
    ({"job_desc": ""}, "job_desc"),
    ({"job_desc": "x" * 256}, "job_desc"),
    ({"job_desc": "nul\x00byte"}, "job_desc"),
    ({"executor_timeout": -1}, "executor_timeout"),
    ({"executor_fail_retry_count": 101}, "executor_fail_retry_count"),
    ({"alarm_email": "not-an-address"}, "alarm_email"),
    ({"unknown_field": 1}, "unknown_field"),
]


@pytest.mark.parametrize(("change", "field"), INVALID, ids=[f for _, f in INVALID])
async def test_invalid_job_is_refused_with_its_field_and_not_written(
    sqlite_store: Store, change: dict[str, Any], field: str
) -> None:
    async with api_env(sqlite_store) as env, env.client("admin") as http:
        r = await http.post("/jobs", json=job_body(env.group_a, **change))
        assert r.status_code in (403, 404, 409, 422), r.text
        body = r.json()
        if field == "job_group":  # a well-formed id of a group that does not exist
            assert r.status_code == 404
        assert body["field"] is not None and body["field"].split(".")[0] == field, body
        assert body["error"]
        assert (await sqlite_store.jobs.list()).total == 0


async def test_update_validates_before_writing(sqlite_store: Store) -> None:
    async with api_env(sqlite_store) as env, env.client("admin") as http:
        job = (await http.post("/jobs", json=job_body(env.group_a))).json()
        before = await sqlite_store.jobs.get(job["id"])
        r = await http.patch(f"/jobs/{job['id']}", json={"job_desc": "renamed", "schedule_conf": "bad",
                                                         "schedule_type": "CRON"})
        assert r.status_code == 422 and r.json()["field"] == "schedule_conf"
        # A schedule_conf alone could be read as either type: the type must come with it.
        r = await http.patch(f"/jobs/{job['id']}", json={"schedule_conf": "0 0 4 * * ?"})
        assert r.status_code == 422 and r.json()["field"] == "schedule_type"
        assert await sqlite_store.jobs.get(job["id"]) == before
        r = await http.patch(f"/jobs/{job['id']}", json={"job_desc": None})
        assert r.status_code == 422 and r.json()["field"] == "job_desc"
        r = await http.patch(f"/jobs/{job['id']}", json={"job_desc": "renamed", "author": "me"})
        assert r.status_code == 200 and r.json()["job_desc"] == "renamed" and r.json()["author"] == "me"
        assert r.json()["schedule_conf"] == "0 0 3 * * ?"


async def test_child_jobs_must_exist_and_form_no_cycle(sqlite_store: Store) -> None:
    async with api_env(sqlite_store) as env, env.client("admin") as http:
        a = (await http.post("/jobs", json=job_body(env.group_a, job_desc="a"))).json()["id"]
        b = (await http.post("/jobs", json=job_body(env.group_a, job_desc="b", child_job_ids=[a]))).json()[
            "id"
        ]
        c = (await http.post("/jobs", json=job_body(env.group_a, job_desc="c", child_job_ids=[b]))).json()[
            "id"
        ]
        cycle = await http.patch(f"/jobs/{a}", json={"child_job_ids": [c]})
        assert cycle.status_code == 409 and "cycle" in cycle.json()["error"]
        itself = await http.patch(f"/jobs/{a}", json={"child_job_ids": [a]})
        assert itself.status_code == 409
        assert (await sqlite_store.jobs.get(a)).child_jobid is None  # type: ignore[union-attr]
        # Deleting a child removes it from its parents' lists.
        assert (await http.delete(f"/jobs/{b}")).status_code == 204
        assert (await http.get(f"/jobs/{c}")).json()["child_job_ids"] == []


async def test_start_computes_the_next_fire_in_the_jobs_zone_and_stop_clears_it(sqlite_store: Store) -> None:
    async with api_env(sqlite_store) as env, env.client("op_in") as http:
        job = (
            await http.post(
                "/jobs",
                json=job_body(env.group_a, schedule_conf="0 0 9 * * ?", schedule_timezone="Asia/Tokyo"),
            )
        ).json()
        assert job["trigger_status"] == 0 and job["trigger_next_time"] == 0
        started = (await http.post(f"/jobs/{job['id']}/start")).json()
        # T0 is 2026-01-01T00:00Z = 09:00 in Tokyo: the next 09:00 Tokyo is a day later.
        assert started["trigger_status"] == 1
        assert started["trigger_next_time"] == T0 + 24 * 3600 * 1000
        stopped = (await http.post(f"/jobs/{job['id']}/stop")).json()
        assert stopped["trigger_status"] == 0 and stopped["trigger_next_time"] == 0


async def test_changing_a_running_jobs_schedule_recomputes_its_next_fire(sqlite_store: Store) -> None:
    async with api_env(sqlite_store) as env, env.client("admin") as http:
        job = (await http.post("/jobs", json=job_body(env.group_a))).json()
        await http.post(f"/jobs/{job['id']}/start")
        r = await http.patch(f"/jobs/{job['id']}", json={"schedule_type": "FIX_RATE", "schedule_conf": "30"})
        assert r.json()["trigger_next_time"] == T0 + 30_000 and r.json()["trigger_status"] == 1


async def test_none_schedule_cannot_start(sqlite_store: Store) -> None:
    async with api_env(sqlite_store) as env, env.client("admin") as http:
        job = (await http.post("/jobs", json=job_body(env.group_a, schedule_type="NONE"))).json()
        r = await http.post(f"/jobs/{job['id']}/start")
        assert r.status_code == 409 and r.json()["field"] == "schedule_type"


async def test_trigger_with_params_and_an_allowed_address(sqlite_store: Store) -> None:
    async with api_env(sqlite_store) as env, env.client("op_in") as http:
        job = (await http.post("/jobs", json=job_body(env.group_a, executor_route_strategy="FIRST"))).json()
        second = env.double.address(1)
        r = await http.post(
            f"/jobs/{job['id']}/trigger", json={"executor_param": "p=1", "addresses": [second]}
        )
        assert r.status_code == 200, r.text
        assert r.json()["trigger_code"] == 200 and len(r.json()["run_ids"]) == 1
        assert r.json()["log_ids"] == r.json()["run_ids"]  # XXL-JOB's name, kept for old clients
        (run,) = env.double.runs()
        assert run.address == second and run.body["executorParams"] == "p=1"
        log = await sqlite_store.logs.get(r.json()["run_ids"][0])
        assert log is not None and log.trigger_type == "MANUAL"


async def test_trigger_refuses_an_address_outside_the_group(sqlite_store: Store) -> None:
    async with api_env(sqlite_store) as env, env.client("admin") as http:
        job = (await http.post("/jobs", json=job_body(env.group_a))).json()
        # Not one of the group's (the group as stored: 409), not a URL an executor has (422).
        for bad, status in ((["http://evil.example:9999/"], 409), (["file:///etc/passwd"], 422),
                            (["not a url"], 422)):
            r = await http.post(f"/jobs/{job['id']}/trigger", json={"addresses": bad})
            assert r.status_code == status and r.json()["field"] == "addresses.0", r.text
        assert env.double.runs() == []
        assert (await sqlite_store.logs.list()).total == 0


async def test_copy_makes_a_stopped_duplicate(sqlite_store: Store) -> None:
    async with api_env(sqlite_store) as env, env.client("admin") as http:
        job = (await http.post("/jobs", json=job_body(env.group_a, executor_param="x"))).json()
        await http.post(f"/jobs/{job['id']}/start")
        copy = await http.post(f"/jobs/{job['id']}/copy")
        assert copy.status_code == 201
        body = copy.json()
        assert body["id"] != job["id"] and body["trigger_status"] == 0 and body["executor_param"] == "x"
        assert body["job_desc"] == "nightly (copy)"


async def test_list_filters_and_pages(sqlite_store: Store) -> None:
    async with api_env(sqlite_store) as env, env.client("admin") as http:
        for i in range(5):
            await http.post("/jobs", json=job_body(env.group_a, job_desc=f"alpha {i}", author="ann"))
        await http.post("/jobs", json=job_body(env.group_a, job_desc="beta", executor_handler="other"))
        page = (
            await http.get("/jobs", params={"desc": "alpha", "limit": 2, "offset": 2, "sort": "id_asc"})
        ).json()
        assert page["total"] == 5 and [j["job_desc"] for j in page["items"]] == ["alpha 2", "alpha 3"]
        assert (await http.get("/jobs", params={"handler": "other"})).json()["total"] == 1
        assert (await http.get("/jobs", params={"author": "ann", "trigger_status": 1})).json()["total"] == 0
        assert (await http.get("/jobs", params={"limit": 0})).status_code == 422


async def test_schedule_preview(sqlite_store: Store) -> None:
    async with api_env(sqlite_store) as env, env.client("viewer") as http:
        r = await http.post(
            "/schedules/preview",
            json={
                "schedule_type": "CRON",
                "schedule_conf": "0 30 * * * ?",
                "timezone": "Asia/Kolkata",
                "count": 3,
            },
        )
        assert r.status_code == 200, r.text
        body = r.json()
        # :30 in Kolkata (UTC+5:30) is :00 UTC; strictly after now (T0 itself is a fire).
        assert body["times"] == [T0 + 3600_000 * h for h in (1, 2, 3)]
        assert body["times_iso"][0] == "2026-01-01T01:00:00Z"
        bad = await http.post("/schedules/preview", json={"schedule_type": "CRON", "schedule_conf": "* * *"})
        assert bad.status_code == 422 and bad.json()["field"] == "schedule_conf"
        zone = await http.post(
            "/schedules/preview",
            json={"schedule_type": "FIX_RATE", "schedule_conf": "5", "timezone": "Nowhere/City"},
        )
        assert zone.status_code == 422 and zone.json()["field"] == "timezone"


async def test_unknown_ids_are_404(sqlite_store: Store) -> None:
    async with api_env(sqlite_store) as env, env.client("admin") as http:
        for method, path in (
            ("GET", "/jobs/77"),
            ("PATCH", "/jobs/77"),
            ("DELETE", "/jobs/77"),
            ("POST", "/jobs/77/start"),
            ("GET", "/runs/77"),
            ("GET", "/groups/77"),
        ):
            r = await http.request(method, path, json={} if method == "PATCH" else None)
            assert r.status_code == 404 and "77" in r.json()["error"], (method, path)


async def test_delete_removes_the_jobs_runs_and_glue_history(sqlite_store: Store) -> None:
    async with api_env(sqlite_store) as env, env.client("admin") as http:
        job = await env.add_job(env.group_a, glue_type="GLUE_SHELL", glue_source="echo")
        keep = await env.add_job(env.group_a)
        await env.add_run(job, env.group_a, handle_code=200)
        kept_run = await env.add_run(keep, env.group_a, handle_code=200)
        await sqlite_store.glue.save(job, "GLUE_SHELL", "echo 2", "v2", env.services.now_naive_utc())
        assert (await http.delete(f"/jobs/{job}")).status_code == 204
        assert await sqlite_store.glue.history(job) == []
        assert [r.id for r in (await sqlite_store.logs.list()).items] == [kept_run]


async def test_a_refused_body_lists_every_problem_with_codes(sqlite_store: Store) -> None:
    async with api_env(sqlite_store) as env, env.client("admin") as http:
        r = await http.post("/jobs", json=job_body(env.group_a, job_desc="", executor_timeout=-1,
                                                   child_job_ids=["x"]))
        assert r.status_code == 422
        body = r.json()
        head = (body["field"], body["code"], body["params"]["min_length"])
        assert head == ("job_desc", "invalid.too_short", 1)
        assert body["error"].startswith("job_desc: ")  # the English text stays (the CLI prints it)
        listed = {(p["field"], p["code"]) for p in body["errors"]}
        assert listed == {("job_desc", "invalid.too_short"),
                          ("executor_timeout", "invalid.greater_than_equal"),
                          ("child_job_ids.0", "invalid.int_parsing")}
        assert next(p for p in body["errors"] if p["field"] == "executor_timeout")["params"] == {"ge": 0}
