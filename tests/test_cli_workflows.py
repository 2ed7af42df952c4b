"""`jobring workflows ...` against the real management app in-process."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from jobring.admin.services.callbacks import CallbackService
from jobring.admin.services.workflows import WorkflowDriver
from jobring.admin.store import Store
from jobring.protocol.models import HandleCallbackParam
from tests.client.adminkit import T0, AdminEnv, admin_env
from tests.client.clikit import Cli, cli_for


@pytest.fixture
async def env(sqlite_store: Store) -> AsyncIterator[AdminEnv]:
    async for built in admin_env(sqlite_store):
        services = built.services
        assert services.trigger is not None
        services.workflows = WorkflowDriver(
            services.store, services.trigger, services.executors, services.clock, node_id="cli-test"
        )
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
    doc = {
        "name": "nightly",
        "job_group": group,
        "nodes": [{"key": "extract", "job_id": job}, {"key": "load", "job_id": job}],
        "edges": [{"from": "extract", "to": "load"}],
    }
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
    # One run at a time (the overlap rule skip, without a schedule): refused, unless forced.
    again = await cli("workflows", "trigger", wf)
    assert again.code == 2 and f"run going ({run_id})" in again.err and "force" in again.err, again.err
    forced = await cli("workflows", "trigger", wf, "--force")
    assert forced.code == 0, forced.err
    assert (await cli("workflows", "stop", forced.out.split()[-1])).code == 0
    stopped = await cli("workflows", "stop", run_id)
    assert stopped.code == 0 and ": stopped" in stopped.out
    runs = json.loads((await cli("workflows", "runs", "--workflow", wf, "--json")).out)
    assert [(r["id"], r["state"]) for r in runs["items"]] == [(int(forced.out.split()[-1]), "stopped"),
                                                               (int(run_id), "stopped")]
    retried = await cli("workflows", "retry", run_id)
    assert retried.code == 0 and ": running" in retried.out


async def test_bad_input_exits_2_naming_the_field(env: AdminEnv, cli: Cli, tmp_path: Path) -> None:
    group = await env.group()
    job = (await env.job(group))["id"]
    cyclic = {
        "name": "c",
        "job_group": group,
        "nodes": [{"key": "a", "job_id": job}, {"key": "b", "job_id": job}],
        "edges": [{"from": "a", "to": "b"}, {"from": "b", "to": "a"}],
    }
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
    parent = {
        "name": "parent",
        "job_group": group,
        "nodes": [{"key": "sub", "kind": "subworkflow", "workflow_id": int(child_id)}],
        "edges": [],
    }
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
    set_ = await cli(
        "workflows", "schedule", wf, "--once", "2099-12-01 02:00", "--tz", "Asia/Shanghai", "--start"
    )
    assert set_.code == 0 and "ONCE 2099-12-01T02:00:00 (Asia/Shanghai), started" in set_.out, set_.err
    assert "next fire 2099-11-30" in set_.out  # 18:00 UTC the day before
    refused = await cli("workflows", "schedule", wf, "--once", "soon")
    assert refused.code == 2 and "schedule_conf" in refused.err


# -- update, delete, the repairs of a node, a cron schedule -------------------------------------


async def _made(cli: Cli, path: Path, doc: dict[str, Any]) -> int:
    created = await cli("workflows", "create", "--file", _write(path, doc))
    assert created.code == 0, created.err
    return int(created.out.split()[2])


async def _run(env: AdminEnv, run_id: int) -> dict[str, Any]:
    async with env.client() as admin:
        return await admin.workflows.run(run_id)


async def _finish(env: AdminEnv, run_id: int, key: str, code: int = 200) -> dict[str, Any]:
    """The job run of node ``key``'s latest attempt reports ``code`` (as its executor's callback
    would); the run as it then is."""
    driver = env.services.workflows
    assert isinstance(driver, WorkflowDriver) and env.services.trigger is not None
    await driver.wait_idle()
    node = {n["key"]: n for n in (await _run(env, run_id))["nodes"]}[key]
    assert node["state"] == "running" and node["run_id"], node
    message = "ok" if code == 200 else "boom"
    callbacks = CallbackService(env.store, env.services.trigger, env.clock)
    try:
        await callbacks.handle([HandleCallbackParam(node["run_id"], T0, code, message)])
    finally:
        await callbacks.close()
    await driver.on_results([(node["run_id"], code, message)])
    await driver.wait_idle()
    return await _run(env, run_id)


def _nodes(run: dict[str, Any]) -> list[tuple[str, str, int]]:
    return [(n["key"], n["state"], n["attempt"]) for n in run["nodes"]]


def _fields(stored: object | None, *names: str) -> tuple[Any, ...]:
    assert stored is not None
    return tuple(getattr(stored, name) for name in names)


async def test_update_saves_a_new_version_and_delete_removes_it(
    env: AdminEnv, cli: Cli, tmp_path: Path
) -> None:
    group = await env.group()
    job = (await env.job(group))["id"]
    doc = {"name": "nightly", "job_group": group, "nodes": [{"key": "a", "job_id": job}], "edges": []}
    wf = await _made(cli, tmp_path / "w.json", doc)
    changed = {
        **doc,
        "name": "nightly-2",
        "description": "two steps",
        "version": 1,
        "nodes": [{"key": "a", "job_id": job}, {"key": "b", "job_id": job, "params": "x"}],
        "edges": [{"from": "a", "to": "b"}],
    }
    saved = await cli("workflows", "update", str(wf), "--file", _write(tmp_path / "v2.json", changed))
    assert (saved.code, saved.out.strip()) == (0, f"saved workflow {wf} as version 2"), saved.err
    stored = await env.store.workflows.get(wf)
    assert stored is not None and stored.version == 2, stored
    assert (stored.name, stored.description) == ("nightly-2", "two steps")
    assert "a -> b" in (await cli("workflows", "show", str(wf))).out
    as_json = await cli("workflows", "update", str(wf), "--json", "--file", _write(tmp_path / "v3.json", doc))
    assert as_json.code == 0 and json.loads(as_json.out)["version"] == 3, as_json.err
    # An edit started from an older version, a bad file, a workflow that does not exist: exit 2.
    stale = await cli("workflows", "update", str(wf), "--file", _write(tmp_path / "old.json", changed))
    assert stale.code == 2 and "version" in stale.err and "was saved meanwhile" in stale.err, stale.err
    bad = await cli("workflows", "update", str(wf), "--file", str(tmp_path / "missing.json"))
    assert bad.code == 2 and "--file" in bad.err
    unknown = await cli("workflows", "update", "999", "--file", _write(tmp_path / "u.json", doc))
    assert unknown.code == 2 and "999" in unknown.err
    stored = await env.store.workflows.get(wf)
    assert stored is not None and (stored.name, stored.version) == ("nightly", 3)

    run_id = (await cli("workflows", "trigger", str(wf))).out.split()[-1]
    busy = await cli("workflows", "delete", str(wf))
    assert busy.code == 2 and f"has running runs ({run_id})" in busy.err, busy.err
    assert await env.store.workflows.get(wf) is not None
    assert (await cli("workflows", "stop", run_id)).code == 0
    deleted = await cli("workflows", "delete", str(wf))
    assert (deleted.code, deleted.out.strip()) == (0, f"deleted workflow {wf}"), deleted.err
    assert await env.store.workflows.get(wf) is None
    assert await env.store.workflows.get_run(int(run_id)) is None  # with its runs
    assert (await cli("workflows", "show", str(wf))).code == 2
    again = await cli("workflows", "delete", str(wf))
    assert again.code == 2 and f"workflow {wf}" in again.err, again.err


async def test_mark_succeeded_and_rerun_from_a_node(env: AdminEnv, cli: Cli, tmp_path: Path) -> None:
    group = await env.group()
    job = (await env.job(group))["id"]
    doc = {
        "name": "chain",
        "job_group": group,
        "nodes": [{"key": k, "job_id": job, "params": k} for k in "abc"],
        "edges": [{"from": "a", "to": "b"}, {"from": "b", "to": "c"}],
    }
    wf = await _made(cli, tmp_path / "w.json", doc)
    run_id = int((await cli("workflows", "trigger", str(wf))).out.split()[-1])
    await _finish(env, run_id, "a")
    run = await _finish(env, run_id, "b", code=500)
    assert run["state"] == "failed" and _nodes(run)[:2] == [("a", "success", 1), ("b", "failed", 1)], run

    # mark-succeeded: b counts as succeeded and the run goes on with c.
    not_failed = await cli("workflows", "mark-succeeded", str(run_id), "a")
    assert not_failed.code == 2 and "only a failed or stopped node" in not_failed.err, not_failed.err
    marked = await cli("workflows", "mark-succeeded", str(run_id), "b", "--round", str(run["round"]))
    assert marked.code == 0 and ": running" in marked.out and f"round {run['round'] + 1}" in marked.out, (
        marked.err
    )
    run = await _run(env, run_id)
    b = run["nodes"][1]
    assert (b["state"], b["marked_succeeded"], b["attempt"]) == ("success", True, 1), b
    run = await _finish(env, run_id, "c")
    assert run["state"] == "success" and _nodes(run) == [(k, "success", 1) for k in "abc"], run
    again = await cli("workflows", "mark-succeeded", str(run_id), "b", "--round", str(run["round"] - 1))
    assert again.code == 2 and f"round {run['round']}, not {run['round'] - 1}" in again.err, again.err

    # rerun: b and c again (new attempts, new job runs), a kept.
    before = {n["key"]: n["run_id"] for n in run["nodes"]}
    unknown = await cli("workflows", "rerun", str(run_id), "zz")
    assert unknown.code == 2 and "no node 'zz'" in unknown.err, unknown.err
    fired = len(env.executors.runs())
    rerun = await cli("workflows", "rerun", str(run_id), "b", "--round", str(run["round"]), "--json")
    assert rerun.code == 0, rerun.err
    shown = json.loads(rerun.out)
    assert (shown["state"], shown["round"]) == ("running", run["round"] + 1)
    assert _nodes(shown) == [("a", "success", 1), ("b", "running", 2), ("c", "waiting", 1)]
    running = await cli("workflows", "rerun", str(run_id), "a")
    assert running.code == 2 and "still running" in running.err, running.err
    await _finish(env, run_id, "b")
    run = await _finish(env, run_id, "c")
    assert run["state"] == "success", run
    assert _nodes(run) == [("a", "success", 1), ("b", "success", 2), ("c", "success", 2)]
    after = {n["key"]: n["run_id"] for n in run["nodes"]}
    assert after["a"] == before["a"] and after["b"] != before["b"] and after["c"] != before["c"]
    stale = await cli("workflows", "rerun", str(run_id), "b", "--round", str(run["round"] - 1))
    assert stale.code == 2 and f"round {run['round']}" in stale.err, stale.err  # a repeated rerun
    assert [c.body["executorParams"] for c in env.executors.runs()[fired:]] == ["b", "c"]
    async with env.client() as admin:
        audit = await admin.audit.list(action="workflow", target_type="workflow_run")
    applied = [(r["action"], r["target_id"]) for r in audit.items if r["details"]["refused"] is None]
    assert ("workflow.run_mark_succeeded", str(run_id)) in applied
    assert ("workflow.run_rerun_from", str(run_id)) in applied


async def test_a_cron_schedule_started_stopped_and_made_manual(
    env: AdminEnv, cli: Cli, tmp_path: Path
) -> None:
    group = await env.group()
    job = (await env.job(group))["id"]
    doc = {"name": "cron", "job_group": group, "nodes": [{"key": "a", "job_id": job}], "edges": []}
    wf = await _made(cli, tmp_path / "w.json", doc)
    unset = await cli("workflows", "schedule", str(wf))
    assert unset.code == 0 and "manual only" in unset.out and "stopped" in unset.out, unset.err
    # The admin's clock is at 2026-09-21 14:13:20 UTC: 02:00 in Shanghai is 18:00 UTC.
    cron = ("--cron", "0 0 2 * * ?", "--tz", "Asia/Shanghai")
    started = await cli(
        "workflows",
        "schedule",
        str(wf),
        *cron,
        "--overlap",
        "queue_one",
        "--params",
        '{"day": "x"}',
        "--start",
    )
    assert started.code == 0, started.err
    assert "CRON 0 0 2 * * ? (Asia/Shanghai), started; misfire DO_NOTHING, overlap queue_one" in started.out
    assert "next fire 2026-09-21 18:00:00" in started.out, started.out
    stored = await env.store.workflow_schedules.get(wf)
    assert stored is not None
    kept = _fields(stored, "schedule_type", "schedule_conf", "time_zone", "enabled", "overlap", "params")
    assert kept == ("CRON", "0 0 2 * * ?", "Asia/Shanghai", True, "queue_one", {"day": "x"})
    first = T0 + (18 * 3600 - (14 * 3600 + 13 * 60 + 20)) * 1000
    assert stored.next_fire_at == first
    shown = json.loads((await cli("workflows", "schedule", str(wf), "--json")).out)
    assert shown["next_times"] == [first + day * 86_400_000 for day in range(5)]

    # Malformed input exits 2 naming the field and leaves the schedule as it was.
    for argv, field in (
        (("--cron", "not a cron"), "schedule_conf"),
        (("--cron", "0 0 25 * * ?"), "schedule_conf"),
        (("--tz", "Mars/Olympus"), "schedule_timezone"),
        (("--manual", "--start"), "enabled"),
        (("--params", "[1]"), "--params"),
    ):
        refused = await cli("workflows", "schedule", str(wf), *argv)
        assert refused.code == 2 and field in refused.err, (argv, refused.err)
    assert await env.store.workflow_schedules.get(wf) == stored

    # A Unix 5-field expression is stored in its Quartz form; other fields are kept.
    unix = await cli("workflows", "schedule", str(wf), "--cron", "30 3 * * *")
    assert unix.code == 0, unix.err
    kept = _fields(await env.store.workflow_schedules.get(wf), "schedule_conf", "time_zone", "enabled")
    assert kept == ("0 30 3 * * ?", "Asia/Shanghai", True)
    stopped = await cli("workflows", "schedule", str(wf), "--stop")
    assert stopped.code == 0 and "(Asia/Shanghai), stopped" in stopped.out and "next fire" not in stopped.out
    kept = _fields(await env.store.workflow_schedules.get(wf), "schedule_type", "enabled", "next_fire_at")
    assert kept == ("CRON", False, 0)
    manual = await cli("workflows", "schedule", str(wf), *cron, "--start")
    assert manual.code == 0 and "started" in manual.out
    manual = await cli("workflows", "schedule", str(wf), "--manual")
    assert manual.code == 0 and "manual only" in manual.out and "stopped" in manual.out, manual.err
    kept = _fields(
        await env.store.workflow_schedules.get(wf),
        "schedule_type",
        "schedule_conf",
        "enabled",
        "next_fire_at",
    )
    assert kept == ("NONE", "", False, 0)
    async with env.client() as admin:
        audit = await admin.audit.list(action="workflow.schedule", target_id=wf)
    assert len(audit.items) == 5  # each change saved; the refusals none
