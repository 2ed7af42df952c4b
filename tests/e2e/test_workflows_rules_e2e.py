"""Workflows with a real admin process and a real jobring executor process (and an XXL-JOB
executor double): the failure rules other than ``stop`` (``skip_descendants`` skips what
needs the failed node while an independent branch goes on and the run ends failed;
``continue`` runs the nodes after it as if it had succeeded and the run succeeds), a handler
result message read as JSON (``result_json``) on an XXL-JOB executor reaching the next node's
params and context, a workflow node's job firing its child job, and one job in two workflows
run and recorded for each separately."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from tests.e2e.waiting import eventually
from tests.e2e.workflow_kit import EXECUTOR_HEAD, WorkflowEnv, states, workflow_env
from tests.e2e.xxl_double import double_group

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(180)]

# "fail" (workflow_kit) fails; "gate" runs until the file "<params>.go" exists in the executor's home (the
# test creates it); "child" notes its params and whether it sees a workflow context.
EXECUTOR_CODE = (
    EXECUTOR_HEAD
    + """

@executor.job("gate")
def gate(ctx: JobContext) -> None:
    _note(f"{{ctx.params}} start")
    go = Path(f"{{ctx.params}}.go")
    deadline = time.monotonic() + 120
    while not go.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    _note(f"{{ctx.params}} end")


@executor.job("child")
def child(ctx: JobContext) -> None:
    _note(f"child params={{ctx.params}} workflow={{ctx.workflow}}")
"""
)


@pytest.fixture
async def rules(tmp_path: Path) -> AsyncIterator[WorkflowEnv]:
    async with workflow_env(tmp_path, "rules-app", "rules_jobs", EXECUTOR_CODE) as env:
        yield env


def skip_reasons(run: dict[str, Any]) -> dict[str, str | None]:
    return {n["key"]: n["skip_reason"] for n in run["nodes"]}


async def test_skip_descendants_skips_what_needs_the_failed_node_while_another_branch_goes_on(
    rules: WorkflowEnv,
) -> None:
    step, fail, gate = await rules.job("step"), await rules.job("fail"), await rules.job("gate")
    nodes = [
        {"key": "A", "job_id": step, "params": "A"},
        {"key": "F", "job_id": fail, "params": "F", "on_failure": "skip_descendants"},
        {"key": "D1", "job_id": step, "params": "D1"},
        {"key": "D2", "job_id": step, "params": "D2"},
        {"key": "B", "job_id": gate, "params": "B"},
        {"key": "B2", "job_id": step, "params": "B2"},
        {"key": "R", "job_id": step, "params": "R", "join": "all_done"},
    ]
    edges = [
        {"from": "A", "to": "F"},
        {"from": "A", "to": "B"},
        {"from": "F", "to": "D1"},
        {"from": "D1", "to": "D2"},
        {"from": "B", "to": "B2"},
        {"from": "D2", "to": "R"},
        {"from": "B2", "to": "R"},
    ]
    wid = await rules.workflow("skip", nodes, edges)
    run_id = (await rules.admin.workflows.trigger(wid))["workflow_run_id"]

    def failed_and_skipped(run: dict[str, Any]) -> bool:
        now = states(run)
        skipped = now["F"] == "failed" and now["D1"] == now["D2"] == "skipped" and "B start" in rules.order()
        return skipped or run["state"] != "running"

    # F failed while B (held by its gate) runs: F's descendants are skipped, B goes on and the
    # run goes on (under "stop" it would have failed at once, B killed).
    run = await rules.run_until(
        run_id, "F failed, its descendants skipped (or the run ended)", failed_and_skipped
    )
    assert run["state"] == "running", run
    assert states(run)["B"] == "running" and states(run)["B2"] == "waiting", run
    assert skip_reasons(run)["D1"] == skip_reasons(run)["D2"] == "upstream", run
    await asyncio.to_thread((rules.home / "B.go").write_text, "", "utf-8")
    run = await rules.ended(run_id)
    # The independent branch ran to its end, the all-done join after both branches ran, and the
    # run ended failed.
    assert run["state"] == "failed", run
    assert states(run) == {
        "A": "success",
        "F": "failed",
        "D1": "skipped",
        "D2": "skipped",
        "B": "success",
        "B2": "success",
        "R": "success",
    }, run
    order = rules.order()
    assert not any(line.startswith("D") for line in order), order
    assert order.count("B2 start") == 1 and order.count("R start") == 1, order
    assert order.index("B end") < order.index("B2 start") < order.index("R start"), order
    assert order.index("F start") < order.index("B end"), order


async def test_continue_runs_the_nodes_after_a_failed_node_as_if_it_had_succeeded(rules: WorkflowEnv) -> None:
    step, fail = await rules.job("step"), await rules.job("fail")
    nodes = [
        {"key": "P", "job_id": step, "params": "P"},
        {"key": "F", "job_id": fail, "params": "F", "on_failure": "continue"},
        {"key": "D", "job_id": step, "params": "D"},
        {"key": "E", "job_id": step, "params": "E"},
    ]
    edges = [{"from": "P", "to": "D"}, {"from": "F", "to": "D"}, {"from": "D", "to": "E"}]
    wid = await rules.workflow("continue", nodes, edges)
    run = await rules.ended((await rules.admin.workflows.trigger(wid))["workflow_run_id"])
    # F stays failed; D (all_success over P and F) and E ran; the run succeeded.
    assert run["state"] == "success", run
    assert states(run) == {"P": "success", "F": "failed", "D": "success", "E": "success"}, run
    by_key = {n["key"]: n for n in run["nodes"]}
    assert "as asked" in by_key["F"]["message"], by_key["F"]
    order = rules.order()
    assert order.count("F start") == 1 and order.count("D start") == 1 and order.count("E start") == 1, order
    assert order.index("F start") < order.index("D start") < order.index("E start"), order


async def test_an_xxl_job_executor_passes_data_on_through_its_result_message(rules: WorkflowEnv) -> None:
    extracted = {"rows": 1234, "files": ["a.csv", "b.csv"]}
    handlers = {
        "extract": lambda params: orjson.dumps(extracted).decode(),
        "load": lambda params: f"loaded {params}",
    }
    async with double_group(rules, "json-double", handlers) as (env, double):
        extract, load = await env.job("extract"), await env.job("load")
        nodes = [
            {"key": "extract", "job_id": extract, "params": "day={{ day }}", "result_json": True},
            {"key": "load", "job_id": load, "params": "rows={{ rows }} first={{ files[0] }}"},
        ]
        wid = await env.workflow("xxl data", nodes, [{"from": "extract", "to": "load"}])
        run = await env.ended(
            (await env.admin.workflows.trigger(wid, {"day": "20261201"}))["workflow_run_id"]
        )
    assert run["state"] == "success", run
    assert run["context"] == {"day": "20261201", **extracted}
    assert [(r.handler, r.params) for r in double.runs] == [
        ("extract", "day=20261201"),
        ("load", "rows=1234 first=a.csv"),
    ]
    # The run of the next node carries the context with the message's keys (workflowContext).
    assert double.runs[1].workflow_context == {"day": "20261201", **extracted}, double.runs[1]
    job_run = await rules.admin.runs.get(run["nodes"][1]["run_id"])
    assert (job_run["executor_param"], job_run["handle_msg"]) == (
        "rows=1234 first=a.csv",
        "loaded rows=1234 first=a.csv",
    )


async def test_a_workflow_node_fires_its_jobs_child_job(rules: WorkflowEnv) -> None:
    child = await rules.job("child")
    parent = int(
        (
            await rules.admin.jobs.create(
                {
                    "job_group": rules.group,
                    "job_desc": "parent",
                    "executor_handler": "step",
                    "child_job_ids": [child],
                }
            )
        )["id"]
    )
    wid = await rules.workflow("with child", [{"key": "p", "job_id": parent, "params": "p"}], [])
    run = await rules.ended((await rules.admin.workflows.trigger(wid, {"day": "d1"}))["workflow_run_id"])
    assert run["state"] == "success" and states(run) == {"p": "success"}, run

    async def child_ran() -> list[dict[str, Any]] | None:
        runs = (await rules.admin.runs.list(job=child)).items
        return runs if runs and all(r["handle_code"] == 200 for r in runs) else None

    # The child job fired once, as a child job (trigger type PARENT), outside the workflow run:
    # its handler sees no workflow context.
    [child_run] = await eventually("the child job's run", child_ran, limit_s=30)
    assert child_run["trigger_type"] == "PARENT", child_run
    parent_run = await rules.admin.runs.get(run["nodes"][0]["run_id"])
    assert parent_run["trigger_type"] == "WORKFLOW" and "child job" in parent_run["handle_msg"], parent_run
    assert rules.order() == ["p start", "p end", "child params= workflow=None"]
    assert states(await rules.admin.workflows.run(run["id"])) == {"p": "success"}


async def test_one_job_in_two_workflows_runs_in_each_and_is_recorded_for_each(rules: WorkflowEnv) -> None:
    step = await rules.job("step")
    first = await rules.workflow("first", [{"key": "a", "job_id": step, "params": "w1"}], [])
    second = await rules.workflow("second", [{"key": "b", "job_id": step, "params": "w2"}], [])
    started = await asyncio.gather(
        rules.admin.workflows.trigger(first), rules.admin.workflows.trigger(second)
    )
    runs = [await rules.ended(s["workflow_run_id"]) for s in started]
    assert [(r["workflow_id"], r["state"]) for r in runs] == [(first, "success"), (second, "success")], runs
    job_run_ids = [r["nodes"][0]["run_id"] for r in runs]
    assert len(set(job_run_ids)) == 2
    for job_run_id, params in zip(job_run_ids, ("w1", "w2"), strict=True):
        job_run = await rules.admin.runs.get(job_run_id)
        assert (
            job_run["job_id"],
            job_run["trigger_type"],
            job_run["executor_param"],
            job_run["handle_code"],
        ) == (step, "WORKFLOW", params, 200), job_run
    for wid, run in ((first, runs[0]), (second, runs[1])):
        assert [r["id"] for r in (await rules.admin.workflows.runs(workflow=wid)).items] == [run["id"]]
    assert {r["id"] for r in (await rules.admin.runs.list(job=step)).items} == set(job_run_ids)
    assert sorted(rules.order()) == ["w1 end", "w1 start", "w2 end", "w2 start"]
