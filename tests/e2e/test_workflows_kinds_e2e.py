"""Workflows with a real admin process and a real jobring executor process, node kinds and
repairs: a decision takes the branch its condition picks (the other is skipped), a fan-out
runs its job once per item with at most its cap at once and reaches it (100 items, cap 10, on
an XXL-JOB executor double), an any-success join starts with its first parent, mark-succeeded
lets a failed run go on, stop kills the running node and starts nothing more, and a schedule
starts runs by itself."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.waiting import eventually
from tests.e2e.workflow_kit import EXECUTOR_HEAD, WorkflowEnv, states, workflow_env
from tests.e2e.xxl_double import double_group

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(180)]

# "slow" sleeps 2 s, "fail" fails, "hang" runs until killed.
EXECUTOR_CODE = EXECUTOR_HEAD + '''

@executor.job("slow")
def slow(ctx: JobContext) -> None:
    _note(f"{{ctx.params}} start")
    time.sleep(2)
    _note(f"{{ctx.params}} end")


@executor.job("hang")
def hang(ctx: JobContext) -> None:
    _note(f"{{ctx.params}} start")
    for _ in range(1200):
        ctx.log("still here")
        time.sleep(0.05)
    _note(f"{{ctx.params}} end")
'''


@pytest.fixture
async def kinds(tmp_path: Path) -> AsyncIterator[WorkflowEnv]:
    async with workflow_env(tmp_path, "kinds-app", "kinds_jobs", EXECUTOR_CODE) as env:
        yield env


async def test_a_decision_takes_the_branch_its_condition_picks(kinds: WorkflowEnv) -> None:
    step = await kinds.job("step")
    nodes = [{"key": "route", "kind": "decision"},
             {"key": "big", "job_id": step, "params": "big {{ rows }}"},
             {"key": "small", "job_id": step, "params": "small"},
             {"key": "report", "job_id": step, "params": "report"}]
    edges = [{"from": "route", "to": "big", "when": "rows > 1000"},
             {"from": "route", "to": "small", "else": True},
             {"from": "big", "to": "report"}, {"from": "small", "to": "report"}]
    wid = await kinds.workflow("decide", nodes, edges)
    run = await kinds.ended((await kinds.admin.workflows.trigger(wid, {"rows": 1234}))["workflow_run_id"])
    assert run["state"] == "success", run
    assert states(run) == {"route": "success", "big": "success", "small": "skipped", "report": "success"}
    assert {n["key"]: n["skip_reason"] for n in run["nodes"]}["small"] == "branch"
    assert kinds.order() == ["big 1234 start", "big 1234 end", "report start", "report end"]
    # The other way round: the else branch.
    run = await kinds.ended((await kinds.admin.workflows.trigger(wid, {"rows": 5}))["workflow_run_id"])
    assert states(run)["big"] == "skipped" and states(run)["small"] == "success", run


async def test_a_fan_out_runs_once_per_item_with_at_most_its_cap_at_once(kinds: WorkflowEnv) -> None:
    # On an XXL-JOB executor double: the jobring executor runs the runs of one job one after
    # the other (SERIAL_EXECUTION), so its handlers never overlap; the double holds every run
    # it receives until released, so what it holds at once is what the admin has in flight.
    handlers = {"item": lambda params: f"done {params}", "after": lambda params: "after done"}
    async with double_group(kinds, "fan-double", handlers, holding=True) as (env, double):
        item, after = await env.job("item"), await env.job("after")
        fan = {"key": "files", "kind": "fanout", "job_id": item, "items": "files", "parallelism": 10}
        nodes = [
            {**fan, "params": "item {{ item }} #{{ item_index }}"},
            {"key": "after", "job_id": after, "params": "after"},
        ]
        wid = await env.workflow("fan", nodes, [{"from": "files", "to": "after"}])
        files = [f"f{i}" for i in range(100)]
        run_id = (await env.admin.workflows.trigger(wid, {"files": files}))["workflow_run_id"]

        async def ten_held() -> bool | None:
            return True if double.held >= 10 else None

        await eventually("the first 10 items at the double", ten_held)
        # The node started its cap of items and no more: 10 running (all held by the double),
        # the other 90 waiting for one to end.
        started = await env.admin.workflows.run(run_id)
        item_states = [i["state"] for i in started["nodes"][0]["items"]]
        assert (item_states.count("running"), item_states.count("waiting")) == (10, 90), item_states
        assert double.held == 10 and len(double.runs) == 10
        double.release()
        run = await env.ended(run_id)
    assert run["state"] == "success", run
    items = run["nodes"][0]["items"]
    assert [i["state"] for i in items] == ["success"] * 100
    assert len({i["run_id"] for i in items}) == 100
    # Each item ran exactly once, with its own params; never more than 10 at once, and 10 at once.
    item_runs = [r for r in double.runs if r.handler == "item"]
    assert sorted(r.params for r in item_runs) == sorted(f"item f{i} #{i}" for i in range(100))
    assert {r.log_id for r in item_runs} == {i["run_id"] for i in items}
    assert double.peak == 10, double.peak
    assert [r.params for r in double.runs[-1:]] == ["after"] and len(double.runs) == 101


async def test_an_any_success_join_starts_with_its_first_parent(kinds: WorkflowEnv) -> None:
    step, slow = await kinds.job("step"), await kinds.job("slow")
    nodes = [{"key": "quick", "job_id": step, "params": "quick"},
             {"key": "slow", "job_id": slow, "params": "slow"},
             {"key": "join", "job_id": step, "params": "join", "join": "any_success"},
             {"key": "start", "job_id": step, "params": "start"}]
    edges = [{"from": "start", "to": "quick"}, {"from": "start", "to": "slow"},
             {"from": "quick", "to": "join"}, {"from": "slow", "to": "join"}]
    wid = await kinds.workflow("any", nodes, edges)
    run = await kinds.ended((await kinds.admin.workflows.trigger(wid))["workflow_run_id"])
    assert run["state"] == "success" and set(states(run).values()) == {"success"}, run
    order = kinds.order()
    assert order.index("join end") < order.index("slow end"), order
    assert order.count("join start") == 1


async def test_mark_succeeded_lets_a_failed_run_go_on(kinds: WorkflowEnv) -> None:
    step, fail = await kinds.job("step"), await kinds.job("fail")
    nodes = [{"key": "A", "job_id": step, "params": "A"}, {"key": "F", "job_id": fail, "params": "F"},
             {"key": "D", "job_id": step, "params": "D"}]
    wid = await kinds.workflow("mark", nodes, [{"from": "A", "to": "F"}, {"from": "F", "to": "D"}])
    run = await kinds.ended((await kinds.admin.workflows.trigger(wid))["workflow_run_id"])
    assert run["state"] == "failed" and states(run)["F"] == "failed", run
    assert "D start" not in kinds.order()
    marked = await kinds.admin.workflows.mark_succeeded(run["id"], "F", round=run["round"])
    assert marked["state"] == "running"
    run = await kinds.ended(run["id"])
    assert run["state"] == "success", run
    by_key = {n["key"]: n for n in run["nodes"]}
    assert by_key["F"]["marked_succeeded"] and by_key["D"]["state"] == "success"
    assert kinds.order().count("A start") == 1 and kinds.order().count("F start") == 1


async def test_stop_kills_the_running_node_and_starts_nothing_more(kinds: WorkflowEnv) -> None:
    hang, step = await kinds.job("hang"), await kinds.job("step")
    nodes = [{"key": "H", "job_id": hang, "params": "H"}, {"key": "after", "job_id": step, "params": "after"}]
    wid = await kinds.workflow("stop", nodes, [{"from": "H", "to": "after"}])
    run_id = (await kinds.admin.workflows.trigger(wid))["workflow_run_id"]
    running = await kinds.run_until(run_id, "H running", lambda r: states(r)["H"] == "running"
                                    and r["nodes"][0]["run_id"] is not None and "H start" in kinds.order())
    stopped = await kinds.admin.workflows.stop(run_id, round=running["round"])
    assert stopped["state"] == "stopped"
    assert states(stopped) == {"H": "stopped", "after": "stopped"}, stopped
    job_run_id = stopped["nodes"][0]["run_id"]

    async def job_run_ended() -> dict[str, Any] | None:
        job_run = await kinds.admin.runs.get(job_run_id)
        return job_run if job_run["state"] != "running" else None

    job_run = await eventually("the node's job run to end", job_run_ended)
    assert job_run["state"] != "success", job_run
    assert states(await kinds.admin.workflows.run(run_id)) == {"H": "stopped", "after": "stopped"}
    assert "after start" not in kinds.order() and "H end" not in kinds.order()


async def test_a_schedule_starts_runs_by_itself_until_stopped(kinds: WorkflowEnv) -> None:
    step = await kinds.job("step")
    wid = await kinds.workflow("every second", [{"key": "tick", "job_id": step, "params": "tick {{ n }}"}],
                               [])
    schedule = await kinds.admin.workflows.set_schedule(wid, {
        "schedule_type": "FIX_RATE", "schedule_conf": "1", "overlap": "skip", "params": {"n": 7},
        "enabled": True})
    assert schedule["enabled"] and schedule["next_fire_at"] is not None

    async def two_runs() -> list[dict[str, Any]] | None:
        page = await kinds.admin.workflows.runs(workflow=wid)
        return page.items if len(page.items) >= 2 else None

    runs = await eventually("two scheduled runs", two_runs, limit_s=30)
    assert {r["triggered_by"] for r in runs} == {"schedule"}
    fields = ("schedule_type", "schedule_conf", "schedule_timezone", "misfire_strategy", "overlap", "params")
    body = {**{k: schedule[k] for k in fields}, "enabled": False}
    stopped = await kinds.admin.workflows.set_schedule(wid, body)
    assert not stopped["enabled"] and stopped["next_fire_at"] is None
    assert "started run" in stopped["last_result"] or stopped["last_result"].endswith(": starting")

    async def last_start_done() -> str | None:
        # A fire claimed just before the stop says "starting" until its run is created.
        result = (await kinds.admin.workflows.schedule(wid))["last_result"]
        return result if "started run" in result else None

    await eventually("the last scheduled start recorded", last_start_done, limit_s=30)
    for run in runs:
        assert (await kinds.ended(run["id"]))["state"] == "success"

    async def scheduled_after_a_manual_run() -> int:
        manual = await kinds.admin.workflows.trigger(wid, {"n": 0}, force=True)  # a late fire may run
        await kinds.ended(manual["workflow_run_id"])
        listed = (await kinds.admin.workflows.runs(workflow=wid, limit=100)).items
        return sum(1 for r in listed if r["triggered_by"] == "schedule")

    # A stopped schedule fires no more: the count stays while manual runs come and go (a fire
    # claimed just before the stop may still add its run before the first count).
    count = await scheduled_after_a_manual_run()
    assert await scheduled_after_a_manual_run() == count
    assert kinds.order().count("tick 7 start") == count
