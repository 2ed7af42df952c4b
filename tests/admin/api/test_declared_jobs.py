"""Jobs declared in executor code (``api/jobring/declareJobs``): create, update, rename,
removal, the console-edit rule, validation with the management API's rules, the token."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from jobring.admin.api.management.declared import executor_principal
from jobring.admin.services.audit import Actor, ActorKind
from jobring.admin.store import Conflict, Store
from jobring.admin.store.records import JobInfo
from tests.admin.api_harness import ACCESS_TOKEN, ApiEnv, api_env

PATH = "/api/jobring/declareJobs"
NIGHTLY: dict[str, Any] = {
    "schedule_type": "CRON",
    "schedule_conf": "0 0 2 * * ?",
    "schedule_timezone": "Europe/Berlin",
    "executor_fail_retry_count": 2,
}


async def declare(
    env: ApiEnv, *decls: dict[str, Any], appname: str = "app-a", token: str = ACCESS_TOKEN
) -> dict[str, Any]:
    async with env.raw_client() as http:
        r = await http.post(
            PATH,
            json={"appname": appname, "declarations": list(decls)},
            headers={"XXL-JOB-ACCESS-TOKEN": token},
        )
    assert r.status_code == 200, r.text
    body: dict[str, Any] = r.json()
    return body


async def jobs_by_handler(env: ApiEnv) -> dict[str, JobInfo]:
    return {j.executor_handler or "": j for j in await env.store.jobs.in_group(env.group_a)}


async def test_create_then_unchanged_declarations_change_nothing(sqlite_store: Store) -> None:
    async with api_env(sqlite_store) as env:
        answer = await declare(
            env, {"handler": "nightly", "fields": NIGHTLY}, {"handler": "manual", "fields": {}, "start": True}
        )
        assert answer["code"] == 200, answer
        jobs = await jobs_by_handler(env)
        nightly = jobs["nightly"]
        assert (
            nightly.job_desc,
            nightly.author,
            nightly.schedule_conf,
            nightly.schedule_timezone,
            nightly.executor_fail_retry_count,
            nightly.trigger_status,
        ) == ("nightly", "executor", "0 0 2 * * ?", "Europe/Berlin", 2, 1)
        assert nightly.trigger_next_time > 0 and nightly.declared_by_executor == 1
        # A job without a schedule cannot run: created stopped.
        assert (jobs["manual"].schedule_type, jobs["manual"].trigger_status) == ("NONE", 0)
        async with env.client("viewer") as http:
            shown = (await http.get(f"/jobs/{nightly.id}")).json()
        assert shown["declared_by_executor"] is True
        again = await declare(
            env, {"handler": "nightly", "fields": NIGHTLY}, {"handler": "manual", "fields": {}}
        )
        assert again["content"] == {"created": [], "updated": [], "stopped": [], "skipped": []}
        assert (await jobs_by_handler(env))["nightly"] == nightly
        audit = await env.store.audit.list(limit=20)
        kinds = {(e.action, e.actor_kind, e.actor) for e in audit.items}
        assert ("job.create", "executor", "executor:app-a") in kinds
        assert ("job.start", "executor", "executor:app-a") in kinds


async def test_console_edits_win_until_the_code_changes_that_field(sqlite_store: Store) -> None:
    async with api_env(sqlite_store) as env:
        await declare(env, {"handler": "nightly", "fields": NIGHTLY})
        job = (await jobs_by_handler(env))["nightly"]
        async with env.client("op_in") as http:
            r = await http.patch(
                f"/jobs/{job.id}",
                json={"executor_fail_retry_count": 5, "schedule_type": "CRON",
                      "schedule_conf": "0 30 3 * * ?"},
            )
            assert r.status_code == 200, r.text
            assert (await http.post(f"/jobs/{job.id}/stop")).status_code == 200
        # The executor restarts with the same code: the console's values stay.
        await declare(env, {"handler": "nightly", "fields": NIGHTLY})
        job = (await jobs_by_handler(env))["nightly"]
        assert (job.executor_fail_retry_count, job.schedule_conf, job.trigger_status) == (
            5,
            "0 30 3 * * ?",
            0,
        )
        # The code changes the retries (and only them): the code's value wins for that field.
        answer = await declare(
            env,
            {
                "handler": "nightly",
                "fields": {**NIGHTLY, "executor_fail_retry_count": 3, "executor_timeout": 60},
            },
        )
        assert answer["content"]["updated"] == [job.id]
        job = (await jobs_by_handler(env))["nightly"]
        assert (
            job.executor_fail_retry_count,
            job.executor_timeout,
            job.schedule_conf,
            job.trigger_status,
        ) == (3, 60, "0 30 3 * * ?", 0)
        # Changing the cron in code applies it (type and expression together).
        await declare(env, {"handler": "nightly", "fields": {**NIGHTLY, "schedule_conf": "0 0 4 * * ?"}})
        assert (await jobs_by_handler(env))["nightly"].schedule_conf == "0 0 4 * * ?"
        # start=False in code stops; start=True again starts.
        await declare(env, {"handler": "nightly", "fields": NIGHTLY, "start": False})
        await declare(env, {"handler": "nightly", "fields": NIGHTLY, "start": True})
        assert (await jobs_by_handler(env))["nightly"].trigger_status == 1


async def test_removed_handlers_are_stopped_and_a_rename_creates_a_new_job(sqlite_store: Store) -> None:
    async with api_env(sqlite_store) as env:
        await declare(
            env,
            {"handler": "nightly", "fields": NIGHTLY},
            {"handler": "hourly", "fields": {"schedule_type": "FIX_RATE", "schedule_conf": "3600"}},
        )
        before = await jobs_by_handler(env)
        answer = await declare(
            env,
            {"handler": "nightly", "fields": NIGHTLY},
            {"handler": "every_hour", "fields": {"schedule_type": "FIX_RATE", "schedule_conf": "3600"}},
        )
        after = await jobs_by_handler(env)
        assert answer["content"]["stopped"] == [before["hourly"].id]
        assert answer["content"]["created"] == [after["every_hour"].id]
        assert (after["hourly"].trigger_status, after["hourly"].declared_by_executor) == (0, 0)
        assert after["every_hour"].trigger_status == 1
        assert after["nightly"] == before["nightly"]
        audit = await env.store.audit.list(limit=30)
        assert "job.declared_stop" in {e.action for e in audit.items}
        # Declared again later: adopted back (code wins) and started.
        await declare(
            env, {"handler": "hourly", "fields": {"schedule_type": "FIX_RATE", "schedule_conf": "60"}}
        )
        back = (await jobs_by_handler(env))["hourly"]
        assert (back.id, back.schedule_conf, back.trigger_status, back.declared_by_executor) == (
            before["hourly"].id,
            "60",
            1,
            1,
        )


async def test_a_console_job_with_the_handler_is_not_adopted_until_an_admin_hands_it_over(
    sqlite_store: Store,
) -> None:
    async with api_env(sqlite_store) as env:
        existing = await env.add_job(env.group_a, executor_handler="nightly", job_desc="made by hand",
                                     executor_param="keep", alarm_email="ops@example.com")
        before = await env.store.jobs.get(existing)
        hijack = {**NIGHTLY, "executor_param": "evil", "alarm_email": "attacker@example.com",
                  "executor_fail_retry_count": 9}
        answer = await declare(env, {"handler": "nightly", "fields": hijack})
        assert answer["code"] == 200, answer
        assert answer["content"]["created"] == answer["content"]["updated"] == []
        assert [s["job_id"] for s in answer["content"]["skipped"]] == [existing]
        assert await env.store.jobs.get(existing) == before
        assert len(await env.store.jobs.in_group(env.group_a)) == 1
        # Only an admin may hand the job to the code.
        async with env.client("op_in") as http:
            refused = await http.patch(f"/jobs/{existing}", json={"managed_by": "code"})
            assert refused.status_code == 403 and refused.json()["field"] == "managed_by"
        async with env.client("admin") as http:
            handed = await http.patch(f"/jobs/{existing}", json={"managed_by": "code"})
            assert handed.status_code == 200 and handed.json()["managed_by"] == "code"
        answer = await declare(env, {"handler": "nightly", "fields": NIGHTLY})
        assert answer["content"]["updated"] == [existing]
        job = (await jobs_by_handler(env))["nightly"]
        assert (job.id, job.job_desc, job.schedule_timezone, job.declared_by_executor) == (
            existing, "made by hand", "Europe/Berlin", 1)
        # Taken back: the code no longer changes it, nor retires it.
        async with env.client("admin") as http:
            back = await http.patch(f"/jobs/{existing}", json={"managed_by": "console"})
            assert back.json()["declared_by_executor"] is False
        await declare(env, {"handler": "nightly", "fields": {**NIGHTLY, "executor_param": "evil"}})
        await declare(env)
        kept = await env.store.jobs.get(existing)
        assert kept is not None and (kept.executor_param, kept.trigger_status, kept.declared_retired_at) == (
            "keep", 1, None)


async def test_a_declaration_cannot_write_a_job_taken_back_meanwhile(sqlite_store: Store) -> None:
    from jobring.admin.api.management.declared import DeclarationService, parse_declarations

    async with api_env(sqlite_store) as env:
        await declare(env, {"handler": "nightly", "fields": NIGHTLY})
        job = (await jobs_by_handler(env))["nightly"]
        service = DeclarationService(env.services)
        _, decls = parse_declarations({"appname": "app-a", "declarations": [
            {"handler": "nightly", "fields": {**NIGHTLY, "executor_param": "late"}}]})
        jobs = await env.store.jobs.in_group(env.group_a)
        plan = await service._plan(env.group_a, jobs, decls, executor_principal(env.group_a, "app-a"))
        # Between the plan and the write an admin takes the job back.
        await env.store.jobs.update(replace(job, managed_by="console"))
        with pytest.raises(Conflict):
            await service._write(plan, Actor("executor:app-a", ActorKind.EXECUTOR),
                                 executor_principal(env.group_a, "app-a"), env.group_a)
        stored = await env.store.jobs.get(job.id)
        assert stored is not None and stored.executor_param is None


async def test_bad_declarations_name_handler_and_field_and_change_nothing(sqlite_store: Store) -> None:
    async with api_env(sqlite_store) as env:
        cases = [
            ({"schedule_type": "CRON", "schedule_conf": "0 0 25 * * ?"}, "schedule_conf"),
            (
                {"schedule_type": "CRON", "schedule_conf": "0 0 2 * * ?", "schedule_timezone": "Mars/Base"},
                "schedule_timezone",
            ),
            ({"executor_fail_retry_count": 101}, "executor_fail_retry_count"),
            ({"executor_route_strategy": "NEAREST"}, "executor_route_strategy"),
            ({"job_group": 2}, "job_group"),
            ({"glue_type": "GLUE_SHELL"}, "glue_type"),
            ({"no_such_field": 1}, "no_such_field"),
            ({"child_job_ids": [424242]}, "child_job_ids"),
        ]
        for fields, field in cases:
            answer = await declare(
                env, {"handler": "good", "fields": NIGHTLY}, {"handler": "bad", "fields": fields}
            )
            assert answer["code"] == 500, answer
            assert answer["content"] == {"handler": "bad", "field": field}, answer
            assert "'bad'" in answer["msg"]
        assert await env.store.jobs.in_group(env.group_a) == []
        unknown = await declare(env, {"handler": "x", "fields": {}}, appname="nobody")
        assert unknown["code"] == 500 and unknown["content"]["field"] == "appname"


async def test_declarations_need_the_executor_token(sqlite_store: Store) -> None:
    async with api_env(sqlite_store) as env:
        answer = await declare(env, {"handler": "nightly", "fields": NIGHTLY}, token="wrong")
        assert answer["code"] == 500 and "token" in answer["msg"]
        async with env.raw_client() as http:
            r = await http.post(PATH, json={"appname": "app-a", "declarations": []})
        assert r.json()["code"] == 500
        assert await env.store.jobs.in_group(env.group_a) == []


async def test_other_groups_jobs_are_untouched(sqlite_store: Store) -> None:
    async with api_env(sqlite_store) as env:
        other = await env.add_job(
            env.group_b,
            executor_handler="nightly",
            declared_by_executor=1,
            declared_spec="{}",
            managed_by="code",
            trigger_status=1,
            trigger_next_time=1,
        )
        await declare(env, {"handler": "nightly", "fields": NIGHTLY})
        await declare(env)  # app-a declares nothing any more
        job = await env.store.jobs.get(other)
        assert job is not None and (job.trigger_status, job.declared_by_executor) == (1, 1)


async def test_declared_desc_and_author_replace_the_defaults(sqlite_store: Store) -> None:
    async with api_env(sqlite_store) as env:
        fields = {**NIGHTLY, "job_desc": "Nightly export", "author": "team-billing"}
        answer = await declare(env, {"handler": "nightly", "fields": fields})
        assert answer["code"] == 200, answer
        job = (await jobs_by_handler(env))["nightly"]
        assert (job.job_desc, job.author) == ("Nightly export", "team-billing")


async def test_a_copy_of_a_declared_job_is_not_declared(sqlite_store: Store) -> None:
    async with api_env(sqlite_store) as env:
        await declare(env, {"handler": "nightly", "fields": NIGHTLY})
        original = (await jobs_by_handler(env))["nightly"]
        async with env.client("op_in") as http:
            copy = (await http.post(f"/jobs/{original.id}/copy")).json()
        assert copy["declared_by_executor"] is False
        again = await declare(env, {"handler": "nightly", "fields": {**NIGHTLY, "executor_timeout": 9}})
        assert again["content"]["updated"] == [original.id]
        stored = await env.store.jobs.get(copy["id"])
        assert stored is not None and stored.executor_timeout == 0


async def test_of_two_jobs_created_at_once_for_a_handler_the_older_is_kept(sqlite_store: Store) -> None:
    from jobring.admin.api.management.declared import DeclarationService

    async with api_env(sqlite_store) as env:
        # Another admin node created the handler's job a moment before this one did.
        first = await env.add_job(env.group_a, executor_handler="nightly", declared_by_executor=1,
                                  declared_spec="{}", managed_by="code")
        second = await env.add_job(env.group_a, executor_handler="nightly", declared_by_executor=1,
                                   declared_spec="{}", managed_by="code")
        service = DeclarationService(env.services)
        made = await env.store.jobs.get(second)
        assert made is not None and await service._keep_oldest(made) is None
        assert [j.id for j in await env.store.jobs.in_group(env.group_a)] == [first]
        kept = await env.store.jobs.get(first)
        assert kept is not None and await service._keep_oldest(kept) == kept
