"""Jobs declared in code, executor side: what ``@executor.job(..., cron=...)`` declares, and
how the declarations are sent (once, after the registration; XXL-JOB admins without the
extension are remembered and not asked again; a refusal is logged once)."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from jobring import Executor
from jobring.executor.declare import Declarer, declaration_body

from .fake_admin import FakeAdmin

A, B, C = "http://admin-a/xxl-job-admin/", "http://admin-b/", "http://admin-c/xxl-job-admin/"


def executor(**kw: object) -> Executor:
    return Executor(app_name="billing", admin_addresses=["http://127.0.0.1:1/"], access_token="tok",
                    environ={}, **kw)  # type: ignore[arg-type]


def test_only_given_fields_are_declared() -> None:
    ex = executor()

    @ex.job("nightly", cron="0 0 2 * * ?", timezone="Europe/Berlin", retries=2, route="round",
            alarm_email=["a@example.com", "b@example.com"], child_jobs=[4, 5], desc="Nightly export")
    def nightly() -> None: ...

    @ex.job("hourly", fix_rate=3600, start=False, fields={"executor_param": "x"})
    def hourly() -> None: ...

    @ex.job("plain")
    def plain() -> None: ...

    assert ex.declarations == [
        {"handler": "hourly", "start": False,
         "fields": {"schedule_type": "FIX_RATE", "schedule_conf": "3600", "executor_param": "x"}},
        {"handler": "nightly", "start": True, "fields": {
            "schedule_type": "CRON", "schedule_conf": "0 0 2 * * ?", "schedule_timezone": "Europe/Berlin",
            "executor_fail_retry_count": 2, "executor_route_strategy": "ROUND",
            "alarm_email": "a@example.com,b@example.com", "child_job_ids": [4, 5],
            "job_desc": "Nightly export"}},
    ]
    assert set(ex.handlers) == {"nightly", "hourly", "plain"}


def test_contradictory_declarations_fail_at_decoration() -> None:
    ex = executor()
    with pytest.raises(ValueError, match="cron or fix_rate"):
        ex.job("x", cron="0 * * * * ?", fix_rate=5)
    with pytest.raises(ValueError, match="fix_rate"):
        ex.job("y", fix_rate=0)


def _declarer(handler: httpx.MockTransport, urls: list[str]) -> tuple[Declarer, httpx.AsyncClient]:
    client = httpx.AsyncClient(transport=handler)
    body = declaration_body("billing", [{"handler": "n", "fields": {}, "start": True}])
    return Declarer(client, urls, "tok", body), client


async def test_xxl_job_admins_are_skipped_and_remembered() -> None:
    seen: list[str] = []

    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(str(request.url))
        if request.url.host == "admin-a":
            return httpx.Response(404)
        if request.url.host == "admin-c":
            return httpx.Response(302, headers={"Location": "/xxl-job-admin/toLogin"})
        msg = "invalid request, uri-mapping(jobring/declareJobs) not found."
        return httpx.Response(200, json={"code": 500, "msg": msg})

    declarer, client = _declarer(httpx.MockTransport(answer), [A, B, C])
    async with client:
        assert await declarer.send_once() is True
        assert declarer.outcome == "unsupported" and declarer.unsupported == {A, B, C}
        assert await declarer.send_once() is True
    assert seen == [u + "api/jobring/declareJobs" for u in (A, B, C)]


async def test_an_unreachable_admin_is_passed_over_and_the_next_applies() -> None:
    bodies: list[dict[str, object]] = []

    def answer(request: httpx.Request) -> httpx.Response:
        if request.url.host == "admin-a":
            raise httpx.ConnectError("refused", request=request)
        assert request.headers["XXL-JOB-ACCESS-TOKEN"] == "tok"
        bodies.append(orjson.loads(request.content))
        return httpx.Response(200, json={"code": 200, "content": {"created": [7]}})

    declarer, client = _declarer(httpx.MockTransport(answer), [A, B])
    async with client:
        assert await declarer.send_once() is True
    assert declarer.outcome == "applied" and declarer.unsupported == set()
    assert bodies[0]["appname"] == "billing" and len(str(bodies[0]["declaration_hash"])) == 64


async def test_a_missing_group_is_asked_again() -> None:
    missing = {"code": 500, "msg": "declarations: no executor group with appname 'billing'",
               "content": {"handler": None, "field": "appname"}}
    answers = [httpx.Response(200, json=missing), httpx.Response(200, json={"code": 200, "content": {}})]

    def answer(request: httpx.Request) -> httpx.Response:
        return answers.pop(0)

    declarer, client = _declarer(httpx.MockTransport(answer), [A])
    async with client:
        assert await declarer.send_once() is False and declarer.outcome == "waiting"
        assert await declarer.send_once() is True and declarer.outcome == "applied"


async def test_a_server_error_is_retried() -> None:
    answers = [httpx.Response(503), httpx.Response(200, json={"code": 200, "content": {}})]

    def answer(request: httpx.Request) -> httpx.Response:
        return answers.pop(0)

    declarer, client = _declarer(httpx.MockTransport(answer), [A])
    async with client:
        assert await declarer.send_once() is False and declarer.unsupported == set()
        assert await declarer.send_once() is True and declarer.outcome == "applied"


async def test_a_refusal_is_logged_once_as_an_error(caplog: pytest.LogCaptureFixture) -> None:
    calls = 0

    def answer(request: httpx.Request) -> httpx.Response:
        nonlocal calls
        calls += 1
        return httpx.Response(200, json={"code": 500, "content": {"handler": "n", "field": "schedule_conf"},
                                         "msg": "declaration of handler 'n': schedule_conf: bad"})

    declarer, client = _declarer(httpx.MockTransport(answer), [A, B])
    registered = asyncio.Event()
    registered.set()
    with caplog.at_level(logging.ERROR):
        async with client:
            await asyncio.wait_for(declarer.run(registered), 5)
    assert calls == 1 and declarer.outcome == "refused"
    errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert errors == ["the admin refused the jobs declared in code: declaration of handler 'n': "
                      "schedule_conf: bad"]


async def test_the_executor_declares_after_registering(tmp_path: Path) -> None:
    admin = FakeAdmin()
    await admin.start()
    ex = Executor(app_name="billing", admin_addresses=[admin.base_url], access_token="tok", host="127.0.0.1",
                  port=0, log_path=str(tmp_path), environ={}, beat_interval_s=30)

    @ex.job("nightly", cron="0 0 2 * * ?")
    def nightly() -> None: ...

    await ex.startup()
    try:
        await admin.wait_for(lambda a: any(p.endswith("api/jobring/declareJobs") for p in a.paths()))
        paths = [p.rsplit("/api/", 1)[1] for p in admin.paths()]
        assert paths[:2] == ["registry", "jobring/declareJobs"]
        sent = next(r.json() for r in admin.requests if r.path.endswith("declareJobs"))
        assert sent["declarations"] == ex.declarations and sent["appname"] == "billing"
        assert ex.declarer is not None
    finally:
        await ex.shutdown()
        await admin.stop()


async def test_nothing_is_sent_without_declarations_unless_always(tmp_path: Path) -> None:
    plain = Executor(app_name="billing", admin_addresses=["http://127.0.0.1:1/"], access_token="tok",
                     host="127.0.0.1", port=0, log_path=str(tmp_path), environ={})
    await plain.startup()
    try:
        assert plain.declarer is None
    finally:
        await plain.shutdown()
    always = Executor(app_name="billing", admin_addresses=["http://127.0.0.1:1/"], access_token="tok",
                      host="127.0.0.1", port=0, log_path=str(tmp_path), environ={}, declare_jobs="always")
    await always.startup()
    try:
        assert always.declarer is not None
    finally:
        await always.shutdown()


def test_a_declared_workflow_is_sent_with_a_job_for_each_handler_it_runs() -> None:
    ex = executor()

    @ex.job("extract", cron="0 0 2 * * ?")
    def extract() -> None: ...

    @ex.job("load")
    def load() -> None: ...

    ex.workflow("part", nodes=[{"key": "p", "job": "load"}])
    ex.workflow("nightly", description="every night",
                nodes=[{"key": "e", "job": "extract"},
                       {"key": "s", "kind": "subworkflow", "workflow": "part"}],
                edges=[{"from": "e", "to": "s"}])
    # "load" declares no job fields: it gets a plain job, as the workflow runs it.
    assert [d["handler"] for d in ex.declarations] == ["extract", "load"]
    assert ex.declarations[1] == {"handler": "load", "fields": {}, "start": True}
    body = orjson.loads(declaration_body("billing", ex.declarations, [
        {"name": "part", "description": "", "nodes": [{"key": "p", "job": "load"}], "edges": []}]))
    assert [w["name"] for w in body["workflows"]] == ["part"] and body["declaration_hash"]


@pytest.mark.parametrize("nodes", [[], "abc", [{"key": "a", "job_id": 3}], [{"key": "s", "workflow_id": 1}]])
def test_a_workflow_declaration_is_refused_at_once(nodes: object) -> None:
    with pytest.raises(ValueError, match="workflow 'w'"):
        executor().workflow("w", nodes=nodes)  # type: ignore[arg-type]


def test_a_workflow_declares_its_schedule_by_the_apis_names() -> None:
    ex = executor()
    ex.workflow("cron", nodes=[{"key": "a", "job": "step"}], cron="0 0 2 * * ?", timezone="Asia/Shanghai",
                misfire="fire_once_now", overlap="queue_one", params={"day": "today"})
    ex.workflow("rate", nodes=[{"key": "a", "job": "step"}], fix_rate=600, start=False)
    ex.workflow("once", nodes=[{"key": "a", "job": "step"}], once="2027-01-01T02:00:00")
    ex.workflow("manual", nodes=[{"key": "a", "job": "step"}])
    sent = {w["name"]: w.get("schedule") for w in orjson.loads(
        declaration_body("billing", ex.declarations, list(ex._workflows.values())))["workflows"]}
    assert sent == {
        "cron": {"schedule_type": "CRON", "schedule_conf": "0 0 2 * * ?", "enabled": True,
                 "schedule_timezone": "Asia/Shanghai", "misfire_strategy": "FIRE_ONCE_NOW",
                 "overlap": "queue_one", "params": {"day": "today"}},
        "rate": {"schedule_type": "FIX_RATE", "schedule_conf": "600", "enabled": False},
        "once": {"schedule_type": "ONCE", "schedule_conf": "2027-01-01T02:00:00", "enabled": True},
        "manual": None,
    }


@pytest.mark.parametrize(("kwargs", "match"), [
    ({"cron": "0 0 2 * * ?", "fix_rate": 60}, "one of cron, fix_rate or once"),
    ({"fix_rate": 0}, "fix_rate must be a positive"),
    ({"fix_rate": True}, "fix_rate must be a positive"),
    ({"timezone": "UTC"}, "need cron, fix_rate or once"),
])
def test_a_workflow_schedule_declaration_is_refused_at_once(kwargs: dict[str, Any], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        executor().workflow("w", nodes=[{"key": "a", "job": "step"}], **kwargs)


async def test_an_executor_with_only_a_workflow_declares(tmp_path: Path) -> None:
    admin = FakeAdmin()
    await admin.start()
    ex = Executor(app_name="billing", admin_addresses=[admin.base_url], access_token="tok", host="127.0.0.1",
                  port=0, log_path=str(tmp_path), environ={}, beat_interval_s=30)

    @ex.job("step")
    def step() -> None: ...

    ex.workflow("flow", nodes=[{"key": "a", "job": "step"}])
    await ex.startup()
    try:
        await admin.wait_for(lambda a: any(p.endswith("api/jobring/declareJobs") for p in a.paths()))
        sent = next(r.json() for r in admin.requests if r.path.endswith("declareJobs"))
        assert [w["name"] for w in sent["workflows"]] == ["flow"]
        assert sent["declarations"] == [{"handler": "step", "fields": {}, "start": True}]
    finally:
        await ex.shutdown()
        await admin.stop()
