"""`jobring audit list` and the client's ``audit.list`` against the real management app in-process."""

from __future__ import annotations

import argparse
import json
from collections.abc import AsyncIterator
from datetime import UTC, datetime

import pytest

from jobring.admin.security.roles import Role
from jobring.admin.security.tokens import generate_api_token, hash_api_token
from jobring.admin.services.settings import AdminSettings, load_settings
from jobring.admin.store import Store
from jobring.cli.admin import validate_settings
from jobring.cli.audit import details_text, parse_when
from jobring.client import AdminApiError
from jobring.configbase import ConfigError
from tests.client.adminkit import AdminEnv, admin_env
from tests.client.clikit import Cli, cli_for


@pytest.fixture
async def env(sqlite_store: Store) -> AsyncIterator[AdminEnv]:
    async for built in admin_env(sqlite_store):
        yield built


@pytest.fixture
def cli(env: AdminEnv, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> Cli:
    return cli_for(env, capsys, monkeypatch)


async def _history(env: AdminEnv) -> tuple[int, int]:
    group = await env.group()
    job = await env.job(group, job_desc="export")
    async with env.client() as admin:
        await admin.jobs.update(job["id"], {"job_desc": "nightly export"})
    async with env.client(with_token=False) as anonymous:
        with pytest.raises(AdminApiError):
            await anonymous.login("admin", "not the password")
    return group, int(job["id"])


async def test_list_as_table_with_changes_in_one_line(env: AdminEnv, cli: Cli) -> None:
    group, job = await _history(env)
    result = await cli("audit", "list")
    assert result.code == 0, result.err
    header, *rows = result.out.splitlines()
    assert header.split() == ["ID", "AT", "(UTC)", "ACTOR", "VIA", "SOURCE", "ACTION", "TARGET", "OUTCOME",
                              "DETAILS"]
    assert [row.split()[6] for row in rows] == ["auth.login_failed", "job.update", "job.create",
                                                "group.create"]
    assert "anonymous" in rows[0] and "failure" in rows[0]
    assert f"job:{job}" in rows[1] and 'job_desc: export -> nightly export' in rows[1]
    assert rows[1].index("api_token") == header.index("VIA")


async def test_list_filters_and_json(env: AdminEnv, cli: Cli) -> None:
    group, job = await _history(env)
    as_json = await cli("audit", "list", "--action", "job", "--json")
    body = json.loads(as_json.out)
    assert [r["action"] for r in body["items"]] == ["job.update", "job.create"] and body["total"] == 2
    change = {"job_desc": {"before": "export", "after": "nightly export"}}
    assert body["items"][0]["details"] == {"changes": change}
    failures = await cli("audit", "list", "--user", "admin", "--outcome", "failure", "--json")
    assert failures.code == 0, failures.err
    by_user = json.loads(failures.out)
    assert [r["action"] for r in by_user["items"]] == ["auth.login_failed"]
    target = json.loads((await cli("audit", "list", "--target", f"group:{group}", "--json")).out)
    assert [r["action"] for r in target["items"]] == ["group.create"]
    by_group = json.loads((await cli("audit", "list", "--group", str(group), "--limit", "2", "--json")).out)
    assert by_group["total"] == 3 and len(by_group["items"]) == 2
    later = datetime.fromtimestamp(env.clock.now_ms() / 1000 + 60, tz=UTC).isoformat()
    assert json.loads((await cli("audit", "list", "--since", later, "--json")).out)["items"] == []
    assert len(json.loads((await cli("audit", "list", "--until", later, "--json")).out)["items"]) == 4
    shown = await cli("audit", "list", "--limit", "1")
    assert "(1 of 4 records shown" in shown.out


async def test_bad_input_and_non_admins_exit_2(
    env: AdminEnv, cli: Cli, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert (await cli("audit", "list", "--since", "last tuesday")).code == 2
    assert (await cli("audit", "list", "--target", ":3")).code == 2
    assert (await cli("audit", "list", "--limit", "501")).code == 2
    viewer = await env.store.users.create(username="viv", role=int(Role.VIEWER))
    token = generate_api_token()
    await env.store.tokens.create(viewer, "t", hash_api_token(token), datetime(2026, 1, 1))
    monkeypatch.setenv("JOBRING_TOKEN", token)
    refused = await cli("audit", "list")
    assert refused.code == 2 and "admin role" in refused.err


async def test_client_audit_list(env: AdminEnv) -> None:
    _, job = await _history(env)
    async with env.client() as admin:
        page = await admin.audit.list(target_type="job", target_id=job, since=datetime(2020, 1, 1))
    assert [r["action"] for r in page.items] == ["job.update", "job.create"] and page.total == 2


def test_parse_when() -> None:
    now = datetime(2026, 11, 23, 12, 0, tzinfo=UTC)
    assert parse_when("30m", now) == "2026-11-23T11:30:00Z"
    assert parse_when("7d", now) == "2026-11-16T12:00:00Z"
    assert parse_when("2026-11-20") == "2026-11-20T00:00:00Z"
    assert parse_when("2026-11-20T10:00+01:00") == "2026-11-20T09:00:00Z"
    with pytest.raises(argparse.ArgumentTypeError):
        parse_when("7 days")


def test_details_text() -> None:
    assert details_text({"details": None}) is None
    record = {"details": {"changes": {"role": {"before": "viewer", "after": "admin"}}, "deleted": 3,
                          "after": {"x": 1}}}
    assert details_text(record) == "role: viewer -> admin; deleted=3"


def test_audit_retention_below_7_days_is_refused() -> None:
    assert AdminSettings().audit_retention_days == 180
    settings = load_settings(environ={"JOBRING_AUDIT_RETENTION_DAYS": "6"})
    with pytest.raises(ConfigError, match="audit_retention_days: must be at least 7"):
        validate_settings(settings)
    validate_settings(load_settings(environ={"JOBRING_AUDIT_RETENTION_DAYS": "7"}))
