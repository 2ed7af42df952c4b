"""Everything the API can set on a job, the CLI can (issue 25, item 24): the option list
side by side with the API's writable fields, then retries, alarms, deadline and GLUE
through `jobs add` / `jobs edit` / `jobs glue` against the real app in-process."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from jobring.admin.api.management.models import JobFields, JobUpdate
from jobring.admin.store import Store
from jobring.cli import build_parser
from jobring.cli.jobfields import job_fields
from tests.client.adminkit import AdminEnv, admin_env
from tests.client.clikit import Cli, cli_for

EVERY_OPTION = [
    "--group", "7", "--desc", "d", "--handler", "h", "--cron", "0 0 2 * * ?", "--timezone", "UTC",
    "--param", "p", "--route", "ROUND", "--block", "DISCARD_LATER", "--misfire", "FIRE_ONCE_NOW",
    "--timeout", "60", "--retries", "2", "--retry-interval", "30", "--retry-backoff", "exponential",
    "--retry-backoff-max", "600", "--alarm-email", "ops@example.com", "--alarm-target",
    "webhook:https://hooks.example.com/jobs", "--alarm-on", "every_failure", "--alarm-recovery",
    "--deadline", "90", "--child", "3", "--author", "ana", "--glue-type", "GLUE_PYTHON",
    "--glue-remark", "first", "--calendar", "holidays", "--calendar-action", "move", "--start-at",
    "2026-01-01T00:00:00Z", "--end-at", "2026-12-31T00:00:00Z", "--max-runs", "5", "--jitter", "30",
    "--max-concurrent", "30", "--concurrency-key", "{{params.tenant}}", "--key-limit", "2", "--on-limit",
    "skip", "--rate-limit", "10/minute", "--priority", "3",
    "--shard-count", "64", "--failure-tolerance", "1%", "--broadcast-pre", "snapshot",
    "--broadcast-post", "report",
]


def test_every_writable_api_field_has_an_option(tmp_path: Path) -> None:
    script = tmp_path / "job.py"
    script.write_text("print('hi')\n")
    parser = build_parser()
    created = job_fields(parser.parse_args(["jobs", "add", *EVERY_OPTION, "--glue-source", str(script)]), 7)
    assert set(created) == set(JobFields.model_fields)
    assert created["glue_source"] == "print('hi')\n"
    edited = job_fields(parser.parse_args(["jobs", "edit", "1", *EVERY_OPTION, "--managed-by", "code"]), 7)
    # A job's GLUE source has its own call (PUT /jobs/{id}/glue): `jobs glue ID --set FILE`.
    assert set(edited) == set(JobUpdate.model_fields)


@pytest.fixture
async def env(sqlite_store: Store) -> AsyncIterator[AdminEnv]:
    async for built in admin_env(sqlite_store, glue_enabled=True):
        yield built


@pytest.fixture
def cli(env: AdminEnv, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> Cli:
    return cli_for(env, capsys, monkeypatch)


async def test_retries_alarms_and_deadline_on_add_and_edit(env: AdminEnv, cli: Cli) -> None:
    await env.group("billing", "Billing")
    added = await cli(
        "jobs", "add", "--group", "billing", "--desc", "invoices", "--handler", "invoice", "--none",
        "--retries", "3", "--retry-interval", "20", "--retry-backoff", "exponential",
        "--retry-backoff-max", "300",
        "--alarm-target", "email:ops@example.com,dev@example.com",
        "--alarm-target", '{"kind": "dingtalk", "url": "https://oapi.dingtalk.com/robot/send?'
                          'access_token=t", "secret": "SEC-secret"}',
        "--alarm-on", "every_failure", "--alarm-recovery", "--deadline", "45", "--json")
    assert added.code == 0, added.err
    job = json.loads(added.out)
    assert (job["executor_fail_retry_count"], job["executor_fail_retry_interval_s"]) == (3, 20)
    assert (job["retry_backoff"], job["retry_backoff_max_s"]) == ("exponential", 300)
    assert (job["alarm_on"], job["alarm_recovery"], job["deadline_minutes"]) == ("every_failure", True, 45)
    kinds = [t["kind"] for t in job["alarm_targets"]]
    assert kinds == ["email", "dingtalk"] and job["alarm_targets"][0]["to"] == ["ops@example.com",
                                                                               "dev@example.com"]
    stored = await env.store.jobs.get(job["id"])
    assert stored is not None and "SEC-secret" in (stored.alarm_targets or "")  # masked on output only

    edited = await cli("jobs", "edit", str(job["id"]), "--deadline", "0", "--alarm-target", "",
                       "--no-alarm-recovery", "--retry-backoff", "fixed", "--json")
    assert edited.code == 0, edited.err
    body = json.loads(edited.out)
    assert (body["deadline_minutes"], body["alarm_targets"], body["alarm_recovery"]) == (None, [], False)
    assert body["retry_backoff"] == "fixed" and body["executor_fail_retry_interval_s"] == 20  # kept

    refused = await cli("jobs", "edit", str(job["id"]), "--alarm-target", "pager")
    assert refused.code == 2 and "--alarm-target" in refused.err
    unknown = await cli("jobs", "edit", str(job["id"]), "--alarm-target", "carrier-pigeon:https://x.example/")
    assert unknown.code == 2 and "alarm_targets" in unknown.err  # the admin's refusal, named


async def test_glue_jobs_from_add_to_versions(env: AdminEnv, cli: Cli, tmp_path: Path) -> None:
    await env.group("scripts", "Scripts")
    first, second = tmp_path / "v1.py", tmp_path / "v2.py"
    first.write_text("print('one')\n")
    second.write_text("print('two')\n")
    no_handler = await cli("jobs", "add", "--group", "scripts", "--desc", "s", "--none")
    assert no_handler.code == 2 and "--handler is required for a BEAN job" in no_handler.err
    added = await cli("jobs", "add", "--group", "scripts", "--desc", "script", "--none", "--glue-type",
                      "GLUE_PYTHON", "--glue-source", str(first), "--glue-remark", "v1", "--json")
    assert added.code == 0, added.err
    job_id = json.loads(added.out)["id"]
    shown = await cli("jobs", "glue", str(job_id))
    assert (shown.code, shown.out) == (0, "print('one')\n")

    saved = await cli("jobs", "glue", str(job_id), "--set", str(second), "--remark", "v2")
    assert saved.code == 0 and "new GLUE source saved" in saved.out, saved.err
    current = json.loads((await cli("jobs", "glue", str(job_id), "--json")).out)
    assert current["glue_source"] == "print('two')\n"
    no_remark = await cli("jobs", "glue", str(job_id), "--set", str(first))
    assert no_remark.code == 2 and "--set and --remark go together" in no_remark.err
    assert (await cli("jobs", "glue", str(job_id), "--set", str(first), "--remark", "back")).code == 0
    history = await cli("jobs", "glue", str(job_id), "--history", "--json")
    versions = json.loads(history.out)  # the saved versions, newest first
    assert [v["glue_source"] for v in versions] == ["print('one')\n", "print('two')\n"], versions
    restored = await cli("jobs", "glue", str(job_id), "--restore", str(versions[-1]["id"]))
    assert restored.code == 0, restored.err
    assert (await cli("jobs", "glue", str(job_id))).out == "print('two')\n"
    table = await cli("jobs", "glue", str(job_id), "--history")
    assert table.out.split()[:2] == ["VERSION", "TYPE"]
    both = await cli("jobs", "glue", str(job_id), "--history", "--restore", "1")
    assert both.code == 2 and "exclude each other" in both.err


async def test_flow_control_options_and_runs_cancel(env: AdminEnv, cli: Cli) -> None:
    await env.group("tenants", "Tenants")
    added = await cli("jobs", "add", "--group", "tenants", "--desc", "per tenant", "--handler", "h", "--none",
                      "--max-concurrent", "1", "--concurrency-key", "{{params.tenant}}", "--key-limit", "1",
                      "--rate-limit", "5/minute", "--priority", "3", "--json")
    assert added.code == 0, added.err
    job = json.loads(added.out)
    assert job["flow"] == {"max_concurrent_runs": 1, "concurrency_key": "{{params.tenant}}", "key_limit": 1,
                           "on_limit": "queue", "rate_limit": 5, "rate_period": "minute", "priority": 3}
    edited = await cli("jobs", "edit", str(job["id"]), "--rate-limit", "0", "--concurrency-key", "",
                       "--on-limit", "skip", "--json")
    assert edited.code == 0, edited.err
    flow = json.loads(edited.out)["flow"]
    assert (flow["rate_limit"], flow["concurrency_key"], flow["key_limit"]) == (None, None, None)
    assert (flow["max_concurrent_runs"], flow["on_limit"], flow["priority"]) == (1, "skip", 3)
    bad = await cli("jobs", "edit", str(job["id"]), "--priority", "5")
    assert bad.code == 2
    removed = await cli("jobs", "edit", str(job["id"]), "--no-flow", "--json")
    assert removed.code == 0 and json.loads(removed.out)["flow"] is None
    group = await cli("groups", "flow", "tenants", "--max-concurrent", "30", "--rate-limit", "100")
    assert group.code == 0, group.err
    assert "max_concurrent_runs=30" in group.out and "rate_limit=100/second" in group.out
    shown = await cli("groups", "flow", "tenants", "--json")
    assert json.loads(shown.out)["max_concurrent_runs"] == 30
    not_queued = await cli("runs", "cancel", "999")
    assert not_queued.code != 0
