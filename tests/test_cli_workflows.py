"""`jobring workflows ...` against the real management app in-process."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from jobring.admin.services.workflows import WorkflowDriver
from jobring.admin.store import Store
from tests.client.adminkit import AdminEnv, admin_env
from tests.client.clikit import Cli, cli_for


@pytest.fixture
async def env(sqlite_store: Store) -> AsyncIterator[AdminEnv]:
    async for built in admin_env(sqlite_store):
        services = built.services
        assert services.trigger is not None
        services.workflows = WorkflowDriver(services.store, services.trigger, services.executors,
                                            services.clock, node_id="cli-test")
        yield built


@pytest.fixture
def cli(env: AdminEnv, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> Cli:
    return cli_for(env, capsys, monkeypatch)


def _write(path: Path, doc: object) -> str:
    path.write_text(json.dumps(doc), encoding="utf-8")
    return str(path)


async def test_create_trigger_show_stop_retry(env: AdminEnv, cli: Cli, tmp_path: Path) -> None:
    group = await env.group()
    job = (await env.job(group))["id"]
    doc = {"name": "nightly", "job_group": group,
           "nodes": [{"key": "extract", "job_id": job}, {"key": "load", "job_id": job}],
           "edges": [{"from": "extract", "to": "load"}]}
    created = await cli("workflows", "create", "--file", _write(tmp_path / "w.json", doc))
    assert created.code == 0 and created.out.startswith("created workflow "), created.err
    wf = created.out.split()[2]
    listed = await cli("workflows", "list")
    assert "nightly" in listed.out
    shown = await cli("workflows", "show", wf)
    assert "extract -> load" in shown.out
    started = await cli("workflows", "trigger", wf, "--params", '{"day": "20261201"}')
    assert started.code == 0, started.err
    run_id = started.out.split()[-1]
    run = await cli("workflows", "run-show", run_id)
    assert run.code == 0 and ": running" in run.out and "extract" in run.out
    stopped = await cli("workflows", "stop", run_id)
    assert stopped.code == 0 and ": stopped" in stopped.out
    runs = json.loads((await cli("workflows", "runs", "--workflow", wf, "--json")).out)
    assert [(r["id"], r["state"]) for r in runs["items"]] == [(int(run_id), "stopped")]
    retried = await cli("workflows", "retry", run_id)
    assert retried.code == 0 and ": running" in retried.out


async def test_bad_input_exits_2_naming_the_field(env: AdminEnv, cli: Cli, tmp_path: Path) -> None:
    group = await env.group()
    job = (await env.job(group))["id"]
    cyclic = {"name": "c", "job_group": group,
              "nodes": [{"key": "a", "job_id": job}, {"key": "b", "job_id": job}],
              "edges": [{"from": "a", "to": "b"}, {"from": "b", "to": "a"}]}
    refused = await cli("workflows", "create", "--file", _write(tmp_path / "c.json", cyclic))
    assert refused.code == 2 and "cycle" in refused.err
    not_json = await cli("workflows", "create", "--file", _write(tmp_path / "x.json", "[1]"))
    assert not_json.code == 2 and "--file" in not_json.err
    assert (await cli("workflows", "trigger", "1", "--params", "[]")).code == 2
    assert (await cli("workflows", "run-show", "999")).code == 2


async def test_a_sub_workflow_node_and_its_child_run(env: AdminEnv, cli: Cli, tmp_path: Path) -> None:
    group = await env.group()
    job = (await env.job(group))["id"]
    child = {"name": "child", "job_group": group, "nodes": [{"key": "c", "job_id": job}], "edges": []}
    child_id = (await cli("workflows", "create", "--file", _write(tmp_path / "c.json", child))).out.split()[2]
    parent = {"name": "parent", "job_group": group,
              "nodes": [{"key": "sub", "kind": "subworkflow", "workflow_id": int(child_id)}], "edges": []}
    made = await cli("workflows", "create", "--file", _write(tmp_path / "p.json", parent))
    parent_id = made.out.split()[2]
    assert f"workflow {child_id}" in (await cli("workflows", "show", parent_id)).out
    run_id = (await cli("workflows", "trigger", parent_id)).out.split()[-1]
    run = json.loads((await cli("workflows", "run-show", run_id, "--json")).out)
    child_run = run["nodes"][0]["run_id"]
    assert f"workflow run {child_run}" in (await cli("workflows", "run-show", run_id)).out
    shown = await cli("workflows", "run-show", str(child_run))
    assert f"a sub-workflow run of workflow run {run_id}" in shown.out
    looping = {**child, "nodes": [{"key": "back", "kind": "subworkflow", "workflow_id": int(parent_id)}]}
    refused = await cli("workflows", "update", child_id, "--file", _write(tmp_path / "l.json", looping))
    assert refused.code == 2 and "(node 'back')" in refused.err and "may not recurse" in refused.err


async def test_a_one_shot_schedule(env: AdminEnv, cli: Cli, tmp_path: Path) -> None:
    group = await env.group()
    job = (await env.job(group))["id"]
    doc = {"name": "once", "job_group": group, "nodes": [{"key": "a", "job_id": job}], "edges": []}
    wf = (await cli("workflows", "create", "--file", _write(tmp_path / "w.json", doc))).out.split()[2]
    set_ = await cli("workflows", "schedule", wf, "--once", "2099-12-01 02:00", "--tz", "Asia/Shanghai",
                     "--start")
    assert set_.code == 0 and "ONCE 2099-12-01T02:00:00 (Asia/Shanghai), started" in set_.out, set_.err
    assert "next fire 2099-11-30" in set_.out  # 18:00 UTC the day before
    refused = await cli("workflows", "schedule", wf, "--once", "soon")
    assert refused.code == 2 and "schedule_conf" in refused.err
