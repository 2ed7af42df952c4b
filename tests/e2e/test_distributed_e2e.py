"""Distributed runs with a real admin process and real jobring executor processes: a map + reduce
over several executors returns the reduce's result on the run; more shards than executors each
run once with their index; a failure tolerance lets a run succeed with a few failed sub-tasks;
"retry failed" runs only those again; a child job fires once after all shards; an executor
SIGKILLed mid-map has its sub-tasks dispatched again once and the reduce runs once; a broadcast
with hooks runs its pre hook once, then one part on each executor, then its post hook once with
their results (and a failed pre hook runs neither)."""

from __future__ import annotations

import signal
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.mapred_kit import Cluster, cluster_of, eventually

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(240)]

@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[Cluster]:
    async for made in cluster_of(tmp_path, 3):
        yield made


async def test_map_reduce_gives_the_reduce_result_on_the_run(cluster: Cluster) -> None:
    job = await cluster.job("count_words")
    lines = [" ".join(["w"] * (i % 7 + 1)) for i in range(40)]
    run_id = await cluster.trigger(job, "|".join(lines))
    run = await cluster.ended(run_id)
    assert run["state"] == "success", run
    expected = sum(i % 7 + 1 for i in range(40))
    page = await cluster.admin.runs.subtasks(run_id, limit=500)
    progress = page["progress"]
    assert (progress["phase"], progress["total"], progress["succeeded"], progress["result"]) == (
        "succeeded", 40, 40, expected)
    assert f"reduce sum_counts: {expected}" in run["handle_msg"]
    keys = sorted(line.split()[1] for line in cluster.ran() if line.startswith("map "))
    assert keys == sorted(f"r/0.{i}" for i in range(40))  # each sub-task once
    assert cluster.ran().count("reduce") == 1
    # Each sub-task's log lines are kept with it (the run page shows them).
    first = (await cluster.subtasks(run_id))[0]
    assert first["log"].endswith(f"counting {lines[0]}"), first
    # Sub-tasks ran on more than one executor (any executor of the group, not only the mapper).
    assert sum(1 for i in range(3) if any(x.startswith("map ") for x in cluster.ran(i))) >= 2
    # The run list shows the parent only; sub-tasks have their own listing.
    runs = await cluster.admin.runs.list(job=job)
    assert [r["id"] for r in runs.items] == [run_id]


async def test_more_shards_than_executors_then_the_child_job_once(cluster: Cluster) -> None:
    child = await cluster.job("after")
    job = await cluster.job("shard", shard_count=64, child_job_ids=[child])
    run_id = await cluster.trigger(job)
    run = await cluster.ended(run_id)
    assert run["state"] == "success", run
    shards = sorted(line for line in cluster.ran() if line.startswith("shard "))
    assert shards == sorted(f"shard {i}/64" for i in range(64))  # each index once
    per_executor = [sum(1 for x in cluster.ran(i) if x.startswith("shard ")) for i in range(3)]
    assert sum(per_executor) == 64 and min(per_executor) > 0
    tasks = await cluster.subtasks(run_id)
    assert sorted(t["result"]["index"] for t in tasks) == list(range(64))

    async def child_ran() -> bool | None:
        return True if "after" in cluster.ran() else None

    await eventually("the child job", child_ran)
    child_runs = await cluster.admin.runs.list(job=child)
    assert len(child_runs.items) == 1


async def test_failure_tolerance_and_retry_failed_only(cluster: Cluster) -> None:
    job = await cluster.job("count_words", failure_tolerance="2")
    lines = ["a b", "fail here", "c", "d e f", "fail too"]
    run_id = await cluster.trigger(job, "|".join(lines))
    run = await cluster.ended(run_id)
    assert run["state"] == "success", run  # 2 failed, 2 allowed
    assert "3 of 5 sub-tasks succeeded, 2 failed" in run["handle_msg"]
    failed = await cluster.subtasks(run_id, status="failed")
    assert sorted(t["key"] for t in failed) == ["r/0.1", "r/0.4"]
    assert all("cannot count a failing line" in t["message"] for t in failed)
    # Too many failures: a tolerance of 1 fails the run; retry only the failed ones.
    strict = await cluster.job("count_words", failure_tolerance="1")
    strict_run = await cluster.trigger(strict, "|".join(lines))
    assert (await cluster.ended(strict_run))["state"] == "failed"
    before = Counter(cluster.ran())
    (cluster.home / "fixed").touch()
    assert (await cluster.admin.runs.retry_failed(strict_run))["retried"] == 2

    async def success() -> dict[str, Any] | None:
        run = await cluster.admin.runs.get(strict_run)
        return run if run["state"] == "success" else None

    run = await eventually("the retried run to succeed", success)
    again = Counter(cluster.ran()) - before
    assert sorted(x for x in again.elements() if x.startswith("map ")) == ["map r/0.1", "map r/0.4"]
    assert again["reduce"] == 1
    assert "reduce sum_counts: 10" in run["handle_msg"]


async def test_an_executor_killed_mid_map(tmp_path: Path) -> None:
    fast = {"JOBRING_EXECUTOR_DEAD_AFTER_S": "4", "JOBRING_LOST_RUN_CHECK_S": "1"}
    async for cluster in cluster_of(tmp_path, 3, fast):
        (cluster.home / "slow").touch()
        job = await cluster.job("count_words")
        lines = [f"w{i}" for i in range(60)]
        run_id = await cluster.trigger(job, "|".join(lines))

        async def some_ran(cluster: Cluster = cluster) -> bool | None:
            return True if len([x for x in cluster.ran(2) if x.startswith("map ")]) >= 2 else None

        await eventually("sub-tasks on the executor to kill", some_ran)
        victim = cluster.executors[2]
        victim.send_signal(signal.SIGKILL)
        await victim.wait()
        run = await cluster.ended(run_id, limit_s=120)
        assert run["state"] == "success", run
        progress = (await cluster.admin.runs.subtasks(run_id))["progress"]
        assert (progress["succeeded"], progress["result"]) == (60, 60)
        assert cluster.ran().count("reduce") == 1
        tasks = await cluster.subtasks(run_id)
        moved = [t for t in tasks if t["attempt"] > 1]
        assert moved and all(t["attempt"] == 2 for t in moved)  # each lost one dispatched again once


async def test_a_broadcast_runs_its_pre_hook_once_every_executor_then_its_post_hook_once(
    cluster: Cluster,
) -> None:
    job = await cluster.job("refresh", executor_route_strategy="SHARDING_BROADCAST",
                            broadcast_pre="snapshot", broadcast_post="report")
    run_id = await cluster.trigger(job)
    run = await cluster.ended(run_id)
    assert run["state"] == "success", run
    assert cluster.ran().count("pre") == 1
    # One part on each executor, each after the pre hook (it has the pre hook's result).
    parts = [[x for x in cluster.ran(i) if x.startswith("part ")] for i in range(3)]
    assert sorted(p for ran in parts for p in ran) == [f"part {i}/3 snapshot 7" for i in range(3)]
    assert all(len(ran) == 1 for ran in parts)
    # The post hook once, after all of them: it saw every part's result.
    assert cluster.ran().count("post 3 of 3") == 1
    assert "post hook report: [0,1,2]" in run["handle_msg"], run
    assert [r["id"] for r in (await cluster.admin.runs.list(job=job)).items] == [run_id]  # one run
    # A failing pre hook fails the run: no part runs, no post hook.
    (cluster.home / "pre_fails").touch()
    before = Counter(cluster.ran())
    failed = await cluster.ended(await cluster.trigger(job))
    assert failed["state"] == "failed", failed
    assert "pre hook failed" in failed["handle_msg"] and "no snapshot today" in failed["handle_msg"]
    # ran() joins the executors' files one after the other: compare counts, not a tail.
    assert Counter(cluster.ran()) - before == Counter(["pre"])
