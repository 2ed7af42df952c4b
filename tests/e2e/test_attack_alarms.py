"""Issue 19 items 3 and 5 against a real admin process (SQLite) with real HTTP listeners on
loopback playing the internal services an attacker wants the admin to call. Each test performs
the attack and passes only because it fails.

- An operator's webhook/chat targets at any spelling of an internal address are refused on
  save (422 naming the field); targets stored before the policy are refused at send time, the
  listener sees no connection at all, and the run's alarm status is the same as for a target
  nobody answers. The admin-wide webhook URL passes the same policy (its allow list is the way
  to reach an internal gateway: then the same listener does get the alarm).
- Secrets never reach the audit log: every audited action that carries one (logins, password
  changes and resets, API and executor tokens, users, jobs with signed robots, GLUE, executor
  declarations) is performed, then every audit row is read back (API and the database file).
  Viewers see robot URLs without their credential; nobody sees signing secrets.
"""

from __future__ import annotations

import socket
import sqlite3
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from jobring.admin.store import Store
from jobring.admin.store.records import JobInfo
from tests.alarm_receivers import RECEIVERS_ALLOW, AlarmHttpReceiver
from tests.e2e.admin_nodes import AdminNode, kill, start_admin
from tests.e2e.security_kit import ADMIN_PASSWORD, eventually, logged_in

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]

KINDS = ("webhook", "slack", "dingtalk", "wecom", "feishu")
FAST_ALARMS = {"JOBRING_ALARM_RETRIES": "1", "JOBRING_ALARM_TIMEOUT": "2"}
OLGA = ("olga", "olga-Password-2026!")  # an operator of the group
VERA = ("vera", "vera-Password-2026!")  # a viewer of the group


def internal_urls(port: int) -> list[str]:
    """The issue's examples and the class around them, the listener's port where one is named."""
    return [
        f"http://127.0.0.1:{port}/webhook", f"http://localhost:{port}/webhook", f"http://LOCALHOST.:{port}/",
        f"http://127.1:{port}/", f"http://2130706433:{port}/", f"http://0x7f.0.0.1:{port}/",
        f"http://017700000001:{port}/", f"http://[::ffff:127.0.0.1]:{port}/", f"http://[::1]:{port}/",
        f"http://0.0.0.0:{port}/", f"http://{socket.gethostname()}:{port}/", f"http://api.localhost:{port}/",
        "http://localhost:6379/", "http://0.0.0.0:5432/", "http://169.254.169.254/latest/meta-data/",
        "http://[::ffff:169.254.169.254]/", "http://[::ffff:a9fe:a9fe]/", "http://2852039166/",
        "http://metadata.google.internal/computeMetadata/v1/", "http://100.100.100.200/latest/meta-data/",
        "http://100.64.0.1/", "http://10.0.0.1:9200/", "http://172.16.0.1/", "http://192.168.0.1/",
        "http://[fd00::1]/", "http://[fe80::1]/", "http://redis:6379/", "http://vault.internal/",
    ]


def _job(group: int, targets: list[dict[str, Any]], desc: str = "alarmed") -> dict[str, Any]:
    return {"job_group": group, "job_desc": desc, "executor_handler": "hello", "alarm_targets": targets}


async def _alarm_status(http: httpx.AsyncClient, log_id: int) -> int | None:
    status = int((await http.get(f"/runs/{log_id}")).json()["alarm_status"])
    return status if status not in (0, -1) else None  # 0 not yet claimed, -1 being sent


async def _failed_run(http: httpx.AsyncClient, job_id: int) -> int:
    """Trigger ``job_id`` (its group has no executor: the run fails at once) and return the run."""
    fired = await http.post(f"/jobs/{job_id}/trigger")
    assert fired.status_code == 200 and fired.json()["trigger_code"] == 500, fired.text
    return int(fired.json()["log_ids"][0])


async def _group_with_people(node: AdminNode) -> int:
    """A group no executor serves, operator olga and viewer vera on it."""
    async with logged_in(node) as admin:
        group = await admin.post("/groups", json={"app_name": "nobody-home", "title": "no executors"})
        assert group.status_code == 201, group.text
        for (name, password), role in ((OLGA, "operator"), (VERA, "viewer")):
            made = await admin.post("/users", json={"username": name, "password": password, "role": role,
                                                    "group_ids": [group.json()["id"]],
                                                    "glue_permission": role == "operator",
                                                    "must_change_password": False})
            assert made.status_code == 201, made.text
        return int(group.json()["id"])


async def test_alarm_targets_never_reach_internal_services(tmp_path: Path) -> None:
    internal = AlarmHttpReceiver("127.0.0.1")  # a service on the admin's host (Redis, a sidecar, ...)
    await internal.start()
    database = f"sqlite+aiosqlite:///{tmp_path / 'ssrf.db'}"
    node = await start_admin(database, "ssrf", tmp_path, env=FAST_ALARMS)
    try:
        group = await _group_with_people(node)
        async with logged_in(node, *OLGA) as olga:
            # 1. On save: refused, naming the field, for every kind; nothing is stored.
            for kind in KINDS:
                for url in internal_urls(internal.port):
                    targets: list[dict[str, Any]] = [{"kind": "email", "to": ["o@example.com"]},
                                                     {"kind": kind, "url": url}]
                    refused = await olga.post("/jobs", json=_job(group, targets))
                    assert refused.status_code == 422, (kind, url, refused.text)
                    assert refused.json()["field"] == "alarm_targets.1.url", refused.text
            assert (await olga.get("/jobs", params={"job_group": group})).json()["total"] == 0
            # A target nobody answers (a failure any operator can cause) is accepted.
            nobody = [{"kind": "webhook", "url": "http://192.0.2.1:81/hook"}]
            unanswered = await olga.post("/jobs", json=_job(group, nobody, "nobody"))
            assert unanswered.status_code == 201, unanswered.text

        # 2. At send time: targets stored before the policy existed point at the listener.
        token = "internal-robot-token-7"
        legacy = [{"kind": kind, "url": f"{internal.base}/{kind}?access_token={token}"} for kind in KINDS]
        legacy += [{"kind": "webhook", "url": f"http://localhost:{internal.port}/webhook"},
                   {"kind": "slack", "url": f"http://2130706433:{internal.port}/slack"}]
        store = await Store.open(database)
        try:
            legacy_job = await store.jobs.create(JobInfo(
                job_group=group, job_desc="legacy", executor_handler="h",
                alarm_targets=orjson.dumps(legacy).decode()))
        finally:
            await store.close()
        async with logged_in(node, *OLGA) as olga:
            runs = [await _failed_run(olga, legacy_job), await _failed_run(olga, unanswered.json()["id"])]

            async def settled() -> list[int] | None:
                statuses = [await _alarm_status(olga, run) for run in runs]
                return None if None in statuses else [int(s) for s in statuses if s is not None]

            # The operator cannot tell the internal service from a target nobody answers.
            assert await eventually(settled, "both alarms finished", 90) == [3, 3]
        assert internal.connections == 0 and internal.received == []
        log = node.log_text()
        assert "refused by the alarm address policy" in log and token not in log
    finally:
        await kill(node)
        await internal.stop()


async def test_the_admin_wide_webhook_passes_the_policy_and_the_allow_list_admits_a_gateway(
    tmp_path: Path,
) -> None:
    gateway = AlarmHttpReceiver("127.0.0.1")
    await gateway.start()
    database = f"sqlite+aiosqlite:///{tmp_path / 'gateway.db'}"
    env = {**FAST_ALARMS, "JOBRING_ALARM_WEBHOOK_URL": f"{gateway.base}/webhook"}
    try:
        try:
            started = await start_admin(database, "refused", tmp_path, env=env)
        except AssertionError as exc:  # start_admin's report of the process's exit, with its log
            stopped = str(exc)
        else:
            await kill(started)
            raise AssertionError("an admin-wide webhook at an internal address was accepted")
        assert "exited 2" in stopped and "alarm_webhook_url" in stopped and "alarm_target_allow" in stopped
        # Allowed, the same listener is reached: the refusals of the other test are the policy's.
        allowed = {**env, "JOBRING_ALARM_TARGET_ALLOW": RECEIVERS_ALLOW}
        node = await start_admin(database, "allowed", tmp_path, env=allowed)
        try:
            group = await _group_with_people(node)
            async with logged_in(node, *OLGA) as olga:
                job = await olga.post("/jobs", json=_job(group, []))
                run = await _failed_run(olga, job.json()["id"])
                assert await eventually(lambda: _alarm_status(olga, run), "the alarm", 90) == 2
            assert [r.kind for r in gateway.received] == ["webhook"]
        finally:
            await kill(node)
    finally:
        await gateway.stop()


# -- item 5 ------------------------------------------------------------------------------------

SLACK = "https://hooks.slack.com/services/T0AAA/B0BBB/SlackPathCredential"
DING = "https://oapi.dingtalk.com/robot/send?access_token=DingTalkAccessToken"
WECOM = "https://qyapi.weixin.qq.com/cgi-bin/webhook/send?key=WeComRobotKey"
FEISHU = "https://open.feishu.cn/open-apis/bot/v2/hook/FeishuHookPathCredential"
TARGETS = [{"kind": "slack", "url": SLACK},
           {"kind": "dingtalk", "url": DING, "secret": "SECdingSigningSecret"},
           {"kind": "wecom", "url": WECOM},
           {"kind": "feishu", "url": FEISHU, "secret": "feishuSigningSecret"}]
URL_CREDENTIALS = ("SlackPathCredential", "DingTalkAccessToken", "WeComRobotKey", "FeishuHookPathCredential")
# Every audited action whose request, answer or record carries a secret.
SECRET_BEARING = {"auth.login", "auth.login_failed", "auth.password_change", "token.create", "token.revoke",
                  "user.create", "user.update", "user.password_reset", "user.delete", "group.token_rotate",
                  "settings.secret_read", "job.create", "job.update", "job.delete", "glue.save"}


def _audit_rows_in_the_database(path: Path) -> list[str]:
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as db:
        return ["|".join(map(str, row)) for row in db.execute("SELECT * FROM jobring_audit")]


async def _job_lifecycle(node: AdminNode, group: int, password: str, secrets: set[str]) -> None:
    """Operator olga creates a job with signed robots, rotates their secrets, copies it, deletes
    the copy, makes a GLUE job with a credential in its script and saves it again."""
    async with logged_in(node, OLGA[0], password) as olga:
        job = (await olga.post("/jobs", json=_job(group, TARGETS))).json()
        rotated = [dict(t) for t in TARGETS]
        rotated[1]["secret"], rotated[2]["url"] = "SECrotatedDingSecret", WECOM + "Rotated"
        secrets.update({"SECrotatedDingSecret", "WeComRobotKeyRotated"})
        assert (await olga.patch(f"/jobs/{job['id']}", json={"alarm_targets": rotated})).status_code == 200
        copy = (await olga.post(f"/jobs/{job['id']}/copy")).json()
        assert (await olga.delete(f"/jobs/{copy['id']}")).status_code == 204
        script = {"job_group": group, "job_desc": "script", "glue_type": "GLUE_SHELL",
                  "glue_source": "curl -H 'X-Api-Key: glueScriptCredential1' https://api.example.com"}
        glue = await olga.post("/jobs", json=script)
        assert glue.status_code == 201, glue.text
        saved = await olga.put(f"/jobs/{glue.json()['id']}/glue", json={
            "glue_source": "echo glueScriptCredential2", "glue_remark": "rotate"})
        assert saved.status_code == 200, saved.text
        secrets.update({"glueScriptCredential1", "glueScriptCredential2"})
        # What each reader sees: the editor the URLs, the viewer neither; signing secrets nobody.
        assert (await olga.get(f"/jobs/{job['id']}")).json()["alarm_targets"][0]["url"] == SLACK
    async with logged_in(node, *VERA) as vera:
        answers = [await vera.get(f"/jobs/{job['id']}"), await vera.get("/jobs", params={"job_group": group})]
        for answer in answers:
            assert answer.status_code == 200
            assert not [s for s in secrets if s in answer.text], answer.text


async def test_no_audited_action_stores_a_secret(tmp_path: Path) -> None:
    db_file = tmp_path / "audit.db"
    node = await start_admin(f"sqlite+aiosqlite:///{db_file}", "audit", tmp_path,
                             env={"JOBRING_GLUE_ENABLED": "true"})
    secrets = {ADMIN_PASSWORD, OLGA[1], VERA[1], *URL_CREDENTIALS, "SECdingSigningSecret",
               "feishuSigningSecret"}
    try:
        async with httpx.AsyncClient(base_url=node.base_url + "/api/v1") as anonymous:
            wrong = "wrong-Password-guess-42"
            secrets.add(wrong)
            failed = await anonymous.post("/auth/login", json={"username": "admin", "password": wrong})
            assert failed.status_code == 401
        group = await _group_with_people(node)
        async with logged_in(node) as admin:
            group_token = (await admin.post(f"/groups/{group}/access-token/rotate")).json()["access_token"]
            assert (await admin.get(f"/groups/{group}/access-token")).json()["access_token"] == group_token
            api_token = (await admin.post("/tokens", json={"name": "ci"})).json()
            assert (await admin.delete(f"/tokens/{api_token['id']}")).status_code == 204
            first, reset = "uma-First-Password-1", "uma-Reset-Password-2"
            uma = (await admin.post("/users", json={"username": "uma", "password": first, "role": "viewer",
                                                     "group_ids": [group]})).json()
            promoted = await admin.patch(f"/users/{uma['id']}", json={"password": reset, "role": "operator"})
            assert promoted.status_code == 200, promoted.text
            assert (await admin.delete(f"/users/{uma['id']}")).status_code == 204
            secrets.update({group_token, api_token["token"], first, reset})
        olga_password = "olga-Changed-Password-3"
        secrets.add(olga_password)
        async with logged_in(node, *OLGA) as olga:
            changed = await olga.post("/users/me/password", json={"current_password": OLGA[1],
                                                                  "new_password": olga_password})
            assert changed.status_code == 200, changed.text
        await _job_lifecycle(node, group, olga_password, secrets)
        # The group's executor declares a job with a signed robot (audited as the executor).
        declared = [{"kind": "feishu", "url": FEISHU + "Declared", "secret": "declaredFeishuSecret"}]
        secrets.update({"FeishuHookPathCredentialDeclared", "declaredFeishuSecret"})
        async with httpx.AsyncClient(base_url=node.base_url + "/xxl-job-admin") as executor:
            answer = await executor.post(
                "/api/jobring/declareJobs", headers={"XXL-JOB-ACCESS-TOKEN": group_token},
                json={"appname": "nobody-home",
                      "declarations": [{"handler": "nightly", "fields": {"alarm_targets": declared}}]})
            assert answer.json()["code"] == 200, answer.text

        async with logged_in(node) as admin:
            page = (await admin.get("/audit", params={"limit": 500})).json()
        assert page["total"] == len(page["items"])
        performed = {item["action"] for item in page["items"]}
        assert performed >= SECRET_BEARING, SECRET_BEARING - performed
        recorded = [orjson.dumps(item).decode() for item in page["items"]]
        recorded += _audit_rows_in_the_database(db_file)
        leaks = {s for s in secrets for row in recorded if s in row}
        assert not leaks, leaks
        # What changed is still there: the rotated robot secret is listed, masked.
        (update,) = [i for i in page["items"] if i["action"] == "job.update" and i["actor"] == OLGA[0]]
        assert update["details"]["changes"]["alarm_targets"]["secret_changed"] is True
    finally:
        await kill(node)
