"""Alarm targets through the management API and executor declarations: internal URLs refused
on save naming the field (issue 19 item 3), secrets and robot URL credentials masked for those
who may not edit the job and in every audit record (item 5), masked values sent back kept."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from jobring.admin.services.settings import AdminSettings
from jobring.admin.store import Store
from jobring.admin.store.audit import AuditFilter
from tests.admin.api.test_declared_jobs import declare
from tests.admin.api_harness import ApiEnv, api_env

KINDS = ("webhook", "slack", "dingtalk", "wecom", "feishu")
INTERNAL = ["http://127.0.0.1/", "http://localhost:6379/", "http://0.0.0.0:5432/", "http://169.254.169.254/",
            "http://[::ffff:169.254.169.254]/", "http://2852039166/", "http://metadata.google.internal/",
            "http://100.100.100.200/", "http://10.0.0.8:9200/", "http://[fd00::1]/", "http://0x7f.1/",
            "http://redis:6379/", "http://vault.internal/"]
PUBLIC_IP = "93.184.215.14"

SLACK = "https://hooks.slack.com/services/T0AAA/B0BBB/SlackPathCredential"
DING = "https://oapi.dingtalk.com/robot/send?access_token=DingTalkAccessToken"
WECOM = "https://qyapi.weixin.qq.com/cgi-bin/webhook/send?key=WeComRobotKey"
FEISHU = "https://open.feishu.cn/open-apis/bot/v2/hook/FeishuHookPathCredential"
SECRETS = ("SlackPathCredential", "DingTalkAccessToken", "WeComRobotKey", "FeishuHookPathCredential",
           "SECdingtalkSigningSecret", "feishuSigningSecret")
TARGETS = [
    {"kind": "slack", "url": SLACK},
    {"kind": "dingtalk", "url": DING, "secret": "SECdingtalkSigningSecret"},
    {"kind": "wecom", "url": WECOM},
    {"kind": "feishu", "url": FEISHU, "secret": "feishuSigningSecret"},
    {"kind": "email", "to": ["ops@example.com"]},
]


class Dns:
    """A resolver of fixed answers; other names do not resolve (as offline)."""

    def __init__(self, answers: dict[str, list[str]]) -> None:
        self.answers = answers

    async def __call__(self, host: str, port: int) -> list[str]:
        if host not in self.answers:
            raise OSError(f"{host}: Name or service not known")
        return self.answers[host]


def _job(env: ApiEnv, targets: list[dict[str, Any]], **fields: Any) -> dict[str, Any]:
    return {"job_group": env.group_a, "job_desc": "alarmed", "executor_handler": "h",
            "alarm_targets": targets, **fields}


async def test_internal_targets_are_refused_on_save_naming_the_field(sqlite_store: Store) -> None:
    async with api_env(sqlite_store) as env, env.client("op_in") as http:
        env.services.alarm_resolve = Dns({})
        before = len(await env.store.jobs.in_group(env.group_a))
        for kind in KINDS:
            for url in INTERNAL:
                targets = [{"kind": "email", "to": ["a@example.com"]}, {"kind": kind, "url": url}]
                created = await http.post("/jobs", json=_job(env, targets))
                assert created.status_code == 422, (kind, url, created.text)
                assert created.json()["field"] == "alarm_targets.1.url", created.text
        job = (await http.post("/jobs", json=_job(env, []))).json()
        for url in INTERNAL:
            patched = await http.patch(f"/jobs/{job['id']}",
                                       json={"alarm_targets": [{"kind": "slack", "url": url}]})
            assert (patched.status_code, patched.json()["field"]) == (422, "alarm_targets.0.url"), url
        stored = await env.store.jobs.get(job["id"])
        assert stored is not None and stored.alarm_targets is None
        assert len(await env.store.jobs.in_group(env.group_a)) == before + 1  # only the empty one
        # An executor's declaration is checked the same way, and changes nothing.
        refused = await declare(env, {"handler": "nightly", "fields": {
            "alarm_targets": [{"kind": "webhook", "url": "http://169.254.169.254/latest/"}]}})
        assert refused["code"] == 500 and refused["content"]["field"] == "alarm_targets.0.url"
        handlers = [j.executor_handler for j in await env.store.jobs.in_group(env.group_a)]
        assert "nightly" not in handlers


async def test_host_names_are_resolved_on_save_and_refused_when_internal(sqlite_store: Store) -> None:
    async with api_env(sqlite_store) as env, env.client("op_in") as http:
        env.services.alarm_resolve = Dns({"intranet.example.com": ["10.1.2.3"],
                                          "mixed.example.com": [PUBLIC_IP, "::1"],
                                          "hooks.example.com": [PUBLIC_IP]})
        for host in ("intranet.example.com", "mixed.example.com"):
            refused = await http.post("/jobs", json=_job(env, [{"kind": "webhook", "url": f"https://{host}/x"}]))
            assert refused.status_code == 422 and refused.json()["field"] == "alarm_targets.0.url"
            assert "10.1.2.3" not in refused.text and "::1" not in refused.text  # no DNS oracle
        # A public answer, or none yet (checked again at every send), is accepted.
        for host in ("hooks.example.com", "not-yet.example.com"):
            created = await http.post("/jobs", json=_job(env, [{"kind": "webhook", "url": f"https://{host}/x"}]))
            assert created.status_code == 201, created.text


async def test_the_allow_list_admits_internal_gateways(sqlite_store: Store) -> None:
    settings = AdminSettings(alarm_target_allow="10.20.0.0/16, chat-gw")
    async with api_env(sqlite_store, settings=settings) as env, env.client("op_in") as http:
        env.services.alarm_resolve = Dns({"chat-gw": ["10.30.0.1"]})
        for url in ("http://10.20.1.1:8080/send", "http://chat-gw/send"):
            created = await http.post("/jobs", json=_job(env, [{"kind": "wecom", "url": url}]))
            assert created.status_code == 201, created.text
        for url in ("http://10.21.0.1/", "http://169.254.169.254/", "http://127.0.0.1/"):
            refused = await http.post("/jobs", json=_job(env, [{"kind": "wecom", "url": url}]))
            assert refused.status_code == 422, url


async def test_stored_targets_are_not_rechecked_by_unrelated_edits(sqlite_store: Store) -> None:
    async with api_env(sqlite_store) as env, env.client("op_in") as http:
        legacy = '[{"kind": "webhook", "url": "http://10.0.0.9/old"}]'  # stored before the policy
        job_id = await env.add_job(env.group_a, alarm_targets=legacy)
        edited = await http.patch(f"/jobs/{job_id}", json={"job_desc": "renamed"})
        assert edited.status_code == 200, edited.text
        added = [{"kind": "webhook", "url": "http://10.0.0.9/old"}, {"kind": "slack", "url": "http://10.0.0.10/"}]
        refused = await http.patch(f"/jobs/{job_id}", json={"alarm_targets": added})
        assert (refused.status_code, refused.json()["field"]) == (422, "alarm_targets.1.url")


async def test_readers_who_may_not_edit_see_robot_urls_masked(sqlite_store: Store) -> None:
    async with api_env(sqlite_store) as env:
        async with env.client("op_in") as http:
            job = (await http.post("/jobs", json=_job(env, TARGETS))).json()
        for role in ("admin", "op_in", "viewer"):
            async with env.client(role) as http:
                one = await http.get(f"/jobs/{job['id']}")
                listed = await http.get("/jobs", params={"job_group": env.group_a})
            for text in (one.text, listed.text):
                assert "SECdingtalkSigningSecret" not in text and "feishuSigningSecret" not in text
            urls = [t.get("url") for t in one.json()["alarm_targets"]]
            if role == "viewer":
                assert not any(s in one.text or s in listed.text for s in SECRETS), role
                assert urls == ["https://hooks.slack.com/******",
                                "https://oapi.dingtalk.com/******?access_token=******",
                                "https://qyapi.weixin.qq.com/******?key=******",
                                "https://open.feishu.cn/******", None]
            else:  # may edit the job: sees what it would edit (never the signing secrets)
                assert urls == [SLACK, DING, WECOM, FEISHU, None]
            secrets = [t.get("secret") for t in one.json()["alarm_targets"]]
            assert secrets == [None, "******", None, "******", None]


async def test_masked_values_sent_back_keep_the_stored_ones(sqlite_store: Store) -> None:
    async with api_env(sqlite_store) as env, env.client("admin") as http:
        job = (await http.post("/jobs", json=_job(env, TARGETS))).json()
        async with env.client("viewer") as viewer:
            masked_view = (await viewer.get(f"/jobs/{job['id']}")).json()["alarm_targets"]
        # An edit made from the masked view (reordered, a target added) keeps every real value.
        sent = [masked_view[3], masked_view[0], masked_view[1], masked_view[2], {"kind": "webhook",
                                                                                  "url": "https://e.example.com/"}]
        patched = await http.patch(f"/jobs/{job['id']}", json={"alarm_targets": sent})
        assert patched.status_code == 200, patched.text
        stored = await env.store.jobs.get(job["id"])
        assert stored is not None
        kept = orjson.loads(stored.alarm_targets or "[]")
        assert kept[:4] == [TARGETS[3], TARGETS[0], TARGETS[1], TARGETS[2]]
        # A mask that belongs to no stored target is refused, never stored.
        for bad in ([{"kind": "dingtalk", "url": "https://oapi.dingtalk.com/robot/send?access_token=x",
                      "secret": "******"}],
                    [{"kind": "slack", "url": "https://other.example.com/******"}]):
            refused = await http.patch(f"/jobs/{job['id']}", json={"alarm_targets": bad})
            assert refused.status_code == 422 and refused.json()["field"].startswith("alarm_targets.0."), bad
            created = await http.post("/jobs", json=_job(env, bad))
            assert created.status_code == 422, created.text


async def test_audit_records_of_jobs_hold_no_secret_and_still_list_what_changed(sqlite_store: Store) -> None:
    async with api_env(sqlite_store) as env, env.client("op_in") as http:
        job = (await http.post("/jobs", json=_job(env, TARGETS))).json()
        rotated = [dict(t) for t in TARGETS]
        rotated[1]["secret"] = "SECrotatedDingTalkSecret"
        rotated[2]["url"] = WECOM.replace("WeComRobotKey", "WeComRotatedKey")
        assert (await http.patch(f"/jobs/{job['id']}", json={"alarm_targets": rotated})).status_code == 200
        copy = (await http.post(f"/jobs/{job['id']}/copy")).json()
        assert (await http.delete(f"/jobs/{copy['id']}")).status_code == 204
        rows = (await env.store.audit.list(AuditFilter(action="job"), limit=100)).items
        assert {r.action for r in rows} >= {"job.create", "job.update", "job.delete"}
        text = "\n".join(r.details or "" for r in rows)
        for secret in (*SECRETS, "SECrotatedDingTalkSecret", "WeComRotatedKey"):
            assert secret not in text, secret
        (update,) = [orjson.loads(r.details or "{}") for r in rows if r.action == "job.update"]
        change = update["changes"]["alarm_targets"]
        assert change["secret_changed"] is True and change["before"] == change["after"]
        assert change["after"][1] == {"kind": "dingtalk", "url": "https://oapi.dingtalk.com/******?access_token=******",
                                      "secret": "******"}


@pytest.mark.parametrize("role", ["viewer", "op_out"])
async def test_the_job_is_not_editable_by_readers_who_see_it_masked(sqlite_store: Store, role: str) -> None:
    async with api_env(sqlite_store) as env:
        async with env.client("admin") as http:
            job = (await http.post("/jobs", json=_job(env, TARGETS))).json()
        async with env.client(role) as http:
            patched = await http.patch(f"/jobs/{job['id']}", json={"alarm_targets": []})
        # A viewer of the group is refused by role; another group's operator sees no such job.
        assert patched.status_code == (403 if role == "viewer" else 404)
