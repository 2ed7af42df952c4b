"""Issue #19 item 8 ("small ones") attacked end to end on a real admin process (and the demo
executor registered with it): each test performs the attack and passes only because it fails.

- ids of another team's jobs, runs, logs, delayed runs, GLUE versions and groups answer exactly
  as missing ones (no 403, no group number), on every endpoint and the XXL-JOB 3.x aliases;
- every ``/api/v1`` answer carries ``Cache-Control: no-store``, errors included;
- names, titles, addresses and other single-line fields refuse line breaks (``admin\\n``) and
  other control characters, through the REST API, the 3.x aliases and declared jobs;
- absurd dashboard dates answer 422 naming the field, not 500;
- a stored job description and alarm address with CR/LF (as an adopted XXL-JOB database may
  hold) neither inject an e-mail header nor stop the job's e-mail alarm.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import httpx
import pytest

from jobring.admin.store import Store
from tests.alarm_receivers import SmtpReceiver
from tests.e2e.admin_nodes import free_port, kill, start_admin
from tests.e2e.edge_kit import TOKEN, Stack, run_hello, running_stack
from tests.e2e.security_kit import eventually, logged_in

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(240)]

OPERATOR_PASSWORD = "alice-password-2026"
MISSING = {"job": 2_000_000_001, "glue_job": 2_000_000_002, "run": 9_000_000_000_001,
           "group": 2_000_000_003, "fire": 2_000_000_004, "version": 2_000_000_005}


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    glue = {"JOBRING_GLUE_ENABLED": "true"}
    with running_stack(tmp_path_factory.mktemp("small"), admin_env=glue) as running:
        yield running


@pytest.fixture(scope="module")
def alice(stack: Stack) -> Iterator[tuple[httpx.Client, int]]:
    """An operator of group "team-a" (with GLUE permission), by API token; and her group."""
    team_a = stack.api.post("/groups", json={"app_name": "team-a", "title": "Team A"}).json()["id"]
    made = stack.api.post("/users", json={"username": "alice", "password": OPERATOR_PASSWORD,
                                          "role": "operator", "group_ids": [team_a], "glue_permission": True,
                                          "must_change_password": False})
    assert made.status_code == 201, made.text
    base = f"http://127.0.0.1:{stack.admin_port}/api/v1"
    with httpx.Client(base_url=base, timeout=30) as session:
        login = session.post("/auth/login", json={"username": "alice", "password": OPERATOR_PASSWORD})
        assert login.status_code == 200, login.text
        token = session.post("/tokens", json={"name": "alice"},
                             headers={"X-CSRF-Token": login.json()["csrf_token"]}).json()["token"]
    with httpx.Client(base_url=base, timeout=30, headers={"Authorization": f"Bearer {token}"}) as client:
        yield client, team_a


def _hidden_objects(stack: Stack) -> dict[str, int]:
    """Another team's job (with a run and a delayed run), GLUE job (with a version) and group."""
    glue_job = stack.api.post("/jobs", json={"job_group": stack.group_id, "job_desc": "glue",
                                             "glue_type": "GLUE_SHELL", "glue_source": "echo hi",
                                             "schedule_type": "NONE"}).json()["id"]
    saved = stack.api.put(f"/jobs/{glue_job}/glue", json={"glue_source": "echo 2", "glue_remark": "v2"})
    assert saved.is_success, saved.text
    version = stack.api.get(f"/jobs/{glue_job}/glue/versions").json()[0]["id"]
    fire = stack.api.post(f"/jobs/{stack.job_id}/trigger-at", json={"delay_ms": 3_600_000}).json()["id"]
    run = run_hello(stack)["id"]
    return {"job": stack.job_id, "glue_job": glue_job, "run": run, "group": stack.group_id, "fire": fire,
            "version": version}


# (method, path, body): the ids are formatted in; "team_a" is the caller's own group.
PROBES: list[tuple[str, str, dict[str, Any] | None]] = [
    ("GET", "/jobs/{job}", None),
    ("PATCH", "/jobs/{job}", {"job_desc": "taken"}),
    ("DELETE", "/jobs/{job}", None),
    ("POST", "/jobs/{job}/copy", None),
    ("POST", "/jobs/{job}/start", None),
    ("POST", "/jobs/{job}/stop", None),
    ("POST", "/jobs/{job}/trigger", {"executor_param": "x"}),
    ("POST", "/jobs/{job}/trigger-at", {"delay_ms": 60_000}),
    ("GET", "/jobs/{job}/delayed", None),
    ("DELETE", "/jobs/{job}/delayed/{fire}", None),
    ("GET", "/jobs/{glue_job}/glue", None),
    ("PUT", "/jobs/{glue_job}/glue", {"glue_source": "echo taken", "glue_remark": "r"}),
    ("GET", "/jobs/{glue_job}/glue/versions", None),
    ("POST", "/jobs/{glue_job}/glue/versions/{version}/restore", None),
    ("GET", "/runs/{run}", None),
    ("GET", "/runs/{run}/log", None),
    ("POST", "/runs/{run}/kill", None),
    ("GET", "/groups/{group}", None),
    ("PUT", "/groups/{group}", {"app_name": "jobring-demo", "title": "taken"}),
    ("DELETE", "/groups/{group}", None),
    ("GET", "/jobs?job_group={group}", None),
    ("GET", "/runs?job_group={group}", None),
    ("GET", "/runs?job_id={job}", None),
    ("POST", "/runs/clear", {"rule": "all", "job_group": "{group}"}),
    ("POST", "/runs/clear", {"rule": "all", "job_group": "{team_a}", "job_id": "{job}"}),
    ("POST", "/runs/clear", {"rule": "all", "job_id": "{job}"}),
    ("POST", "/jobs", {"job_group": "{group}", "job_desc": "x", "executor_handler": "hello"}),
    ("POST", "/jobs", {"job_group": "{team_a}", "job_desc": "x", "executor_handler": "hello",
                       "child_job_ids": ["{job}"]}),
]
XXL3_PROBES = [("updateJob", {"id": "{job}", "jobDesc": "taken"}), ("removeJob", {"id": "{job}"}),
               ("startJob", {"id": "{job}"}), ("stopJob", {"id": "{job}"}), ("triggerJob", {"id": "{job}"}),
               ("addJob", {"jobGroup": "{group}", "jobDesc": "x", "executorHandler": "hello"})]


def _fill(value: Any, ids: dict[str, int]) -> Any:
    if isinstance(value, str):
        match = re.fullmatch(r"\{(\w+)\}", value)
        return ids[match.group(1)] if match else value.format(**ids)
    if isinstance(value, dict):
        return {k: _fill(v, ids) for k, v in value.items()}
    if isinstance(value, list):
        return [_fill(v, ids) for v in value]
    return value


def _as_if_hidden(response: httpx.Response, hidden: dict[str, int]) -> tuple[int, str]:
    """The answer to a request with the missing ids, those ids written as the hidden ones."""
    text = response.text
    for name, value in MISSING.items():
        text = text.replace(str(value), str(hidden[name]))
    return response.status_code, text


def test_hidden_ids_answer_exactly_as_missing_ones(stack: Stack, alice: tuple[httpx.Client, int]) -> None:
    client, team_a = alice
    hidden = {**_hidden_objects(stack), "team_a": team_a}
    missing = {**MISSING, "team_a": team_a}
    before = stack.api.get(f"/jobs/{stack.job_id}").json()
    user_token = client.headers["Authorization"].removeprefix("Bearer ")
    for method, path, body in PROBES:
        answers = [client.request(method, path.format(**ids), json=_fill(body, ids))
                   for ids in (hidden, missing)]
        where = f"{method} {path} {body}"
        assert (answers[0].status_code, answers[0].text) == _as_if_hidden(answers[1], hidden), where
        assert "no permission" not in answers[0].text, where  # (a 403 for the role, alike for both)
    admin_api = f"http://127.0.0.1:{stack.admin_port}/xxl-job-admin/api/"
    for name, body in XXL3_PROBES:
        answers = [httpx.post(admin_api + name, json=_fill(body, ids),
                              headers={"XXL-JOB-ACCESS-TOKEN": user_token}) for ids in (hidden, missing)]
        assert (answers[0].status_code, answers[0].text) == _as_if_hidden(answers[1], hidden), name
        assert answers[0].json()["code"] == 500, answers[0].text
    # Nothing of the other team changed.
    assert stack.api.get(f"/jobs/{stack.job_id}").json() == before
    assert [f["id"] for f in stack.api.get(f"/jobs/{stack.job_id}/delayed").json()] == [hidden["fire"]]
    assert stack.api.get(f"/runs/{hidden['run']}").status_code == 200


def test_every_api_answer_says_no_store(stack: Stack, alice: tuple[httpx.Client, int]) -> None:
    client, team_a = alice
    base = f"http://127.0.0.1:{stack.admin_port}/api/v1"
    with httpx.Client(base_url=base, timeout=30) as session:
        login = session.post("/auth/login", json={"username": "alice", "password": OPERATOR_PASSWORD})
        csrf = {"X-CSRF-Token": login.json()["csrf_token"]}
        answers = {
            "login": login,
            "failed login": httpx.post(base + "/auth/login", json={"username": "alice", "password": "wrong"}),
            "me": session.get("/auth/me"),
            "tokens": session.get("/tokens"),
            "new token": session.post("/tokens", json={"name": "more"}, headers=csrf),
            "logout": session.post("/auth/logout", headers=csrf),
        }
    answers |= {
        "group token": stack.api.post(f"/groups/{team_a}/access-token/rotate"),
        "group token read": stack.api.get(f"/groups/{team_a}/access-token"),
        "global token": stack.api.get("/settings/access-token"),
        "jobs": client.get("/jobs"),
        "401": httpx.get(base + "/jobs"),
        "403": client.get("/users"),
        "404": client.get("/no-such-thing"),
        "405": client.put("/jobs"),
        "413": client.post("/jobs", content=b"x" * (2 << 20), headers={"Content-Type": "application/json"}),
        "422": client.get("/jobs?limit=0"),
        "prefix": httpx.get(base),
        "docs": httpx.get(base + "/docs"),
        "openapi": httpx.get(base + "/openapi.json"),
    }
    for what, answer in answers.items():
        assert answer.headers.get("cache-control") == "no-store", (what, answer.status_code, answer.headers)


ONE_LINE_BREAKERS = ["\n", "\r", "\r\n", "\u2028", "\x85", "\x0b", "\t"]


def test_single_line_fields_refuse_line_breaks(stack: Stack, alice: tuple[httpx.Client, int]) -> None:
    client, team_a = alice
    own = client.post("/jobs", json={"job_group": team_a, "job_desc": "own",
                                     "executor_handler": "hello"}).json()
    jobs_before = stack.api.get("/jobs").json()["total"]
    for brk in ONE_LINE_BREAKERS:
        job_fields = {"job_desc": f"nightly{brk}Bcc: evil@example.com", "author": f"me{brk}",
                      "executor_handler": f"hello{brk}", "schedule_conf": f"0 0 * * * ?{brk}",
                      "alarm_email": f"ops@example.com{brk}Bcc: evil@example.com"}
        for field, value in job_fields.items():
            body = {"job_group": team_a, "job_desc": "x", "executor_handler": "hello", field: value}
            if field == "schedule_conf":
                body["schedule_type"] = "CRON"
            for answer in (client.post("/jobs", json=body), client.patch(f"/jobs/{own['id']}", json=body)):
                assert (answer.status_code, answer.json()["field"]) == (422, field), (brk, answer.text)
        for path, body, field in (
            ("/users", {"username": f"admin{brk}", "password": "long enough password 1"}, "username"),
            ("/users", {"username": f"{brk}admin", "password": "long enough password 1"}, "username"),
            ("/groups", {"app_name": f"app{brk}", "title": "t"}, "app_name"),
            ("/groups", {"app_name": "app-x", "title": f"Title{brk}"}, "title"),
            ("/tokens", {"name": f"ci{brk}"}, "name"),
            ("/auth/login", {"username": f"admin{brk}", "password": "whatever-password"}, "username"),
        ):
            answer = stack.api.post(path, json=body)
            assert answer.status_code == 422 and answer.json()["field"] == field, (path, brk, answer.text)
        # The XXL-JOB 3.x alias and the executor's declared jobs go through the same checks.
        xxl3 = httpx.post(f"http://127.0.0.1:{stack.admin_port}/xxl-job-admin/api/addJob",
                          json={"jobGroup": team_a, "jobDesc": f"x{brk}y", "executorHandler": "hello"},
                          headers=client.headers)
        assert xxl3.json()["code"] == 500 and "job_desc" in xxl3.json()["msg"], xxl3.text
        for declaration in ({"handler": f"hello{brk}"},
                            {"handler": "declared", "fields": {"job_desc": f"a{brk}b"}}):
            declared = httpx.post(f"http://127.0.0.1:{stack.admin_port}/xxl-job-admin/api/jobring/declareJobs",
                                  json={"appname": "jobring-demo", "declarations": [declaration]},
                                  headers={"XXL-JOB-ACCESS-TOKEN": TOKEN})
            assert declared.json()["code"] == 500, (brk, declared.text)
    assert stack.api.get("/jobs").json()["total"] == jobs_before
    assert [u["username"] for u in stack.api.get("/users").json()["items"]] == ["admin", "alice"]


@pytest.mark.parametrize(("query", "field"), [
    ("to_day=0001-01-01", "to_day"), ("to_day=9999-12-31", "to_day"), ("from_day=0001-01-01", "from_day"),
    ("from_day=9999-12-31&to_day=9999-12-31", "from_day"), ("to_day=1969-12-31", "to_day"),
    ("from_day=1970-01-01&to_day=1970-03-31", None), ("to_day=1970-01-02", None), ("to_day=9999-12-30", None),
])
def test_absurd_dashboard_dates_answer_422_naming_the_field(
    stack: Stack, query: str, field: str | None
) -> None:
    answer = stack.api.get(f"/dashboard?{query}")
    if field is None:
        assert answer.status_code == 200, answer.text
    else:
        assert (answer.status_code, answer.json()["field"]) == (422, field), answer.text


async def test_a_stored_cr_lf_neither_injects_a_mail_header_nor_stops_the_alarm(tmp_path: Path) -> None:
    smtp = SmtpReceiver()
    await smtp.start()
    url = f"sqlite+aiosqlite:///{tmp_path / 'mail.db'}"
    node = await start_admin(url, "mail", tmp_path, env={"JOBRING_SMTP_HOST": "127.0.0.1",
                                                         "JOBRING_SMTP_PORT": str(smtp.port)})
    store = await Store.open(url, upgrade=False)
    try:
        async with logged_in(node) as http:
            dead = f"http://127.0.0.1:{free_port()}/"  # nothing listens: the trigger fails
            group = (await http.post("/groups", json={"app_name": "mail-app", "title": "mail",
                                                      "address_type": 1, "addresses": [dead]})).json()
            job = (await http.post("/jobs", json={"job_group": group["id"], "job_desc": "nightly",
                                                  "executor_handler": "hello",
                                                  "alarm_email": "ops@example.com"})).json()
            # What an adopted XXL-JOB database may hold (the API refuses it now).
            stored = await store.jobs.get(job["id"])
            assert stored is not None
            await store.jobs.update(replace(
                stored, job_desc="nightly\r\nBcc: evil@example.com",
                alarm_email="ops@example.com,evil\r\nBcc: evil@example.com"))
            fired = await http.post(f"/jobs/{job['id']}/trigger", json={})
            assert fired.status_code == 200 and fired.json()["trigger_code"] == 500, fired.text

            async def mailed() -> bool | None:
                return True if smtp.messages else None

            await eventually(mailed, "the alarm e-mail", 60)
        (message,) = smtp.messages
        assert message["To"] == "ops@example.com"
        assert message.get_all("Bcc") is None
        assert "bcc" not in {name.lower() for name in message}
        unfolded = re.sub(r"\r?\n[ \t]", " ", message["Subject"])  # a long header is folded, not broken
        assert "(nightly Bcc: evil@example.com)" in unfolded
    finally:
        await store.close()
        await kill(node)
        await smtp.stop()
