"""Distributed runs with a real admin process and real jobring executor processes: a map +
reduce over several executors returns the reduce's result on the run; more shards than
executors each run once with their index; a failure tolerance lets a run succeed with a few
failed sub-tasks; "retry failed" runs only those again; a child job fires once after all
shards; an executor SIGKILLed mid-map has its sub-tasks dispatched again once and the reduce
runs once."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest

from jobring.client import AsyncAdminClient
from tests.e2e.admin_nodes import ADMIN_PASSWORD, TOKEN, AdminNode, free_port, kill, start_admin
from tests.e2e.waiting import eventually as wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(240)]

T = TypeVar("T")
APP = "mapred-app"
# Every executor appends what it ran to ran.log (in its own folder): "<kind> <what>".
EXECUTOR_CODE = '''
import os
import time
from pathlib import Path

from jobring import Executor, JobContext

executor = Executor(app_name="{app}")
RAN = Path("ran.log")


def _note(text: str) -> None:
    with RAN.open("a", encoding="utf-8") as out:
        out.write(text + "\\n")


@executor.job("count_words", reduce="sum_counts")
def count_words(ctx: JobContext) -> None:
    lines = ctx.params.split("|")
    ctx.map([{{"line": line}} for line in lines], "count_line")


@executor.job("count_line")
def count_line(ctx: JobContext) -> int:
    _note(f"map {{ctx.task_key}}")
    if Path("../slow").exists():
        time.sleep(0.3)
    if "fail" in ctx.item["line"] and not Path("../fixed").exists():
        raise ValueError("cannot count a failing line")
    return len(ctx.item["line"].split())


@executor.job("sum_counts")
def sum_counts(ctx: JobContext) -> int:
    _note("reduce")
    return sum(ctx.results())


@executor.job("shard")
def shard(ctx: JobContext) -> dict[str, int]:
    _note(f"shard {{ctx.shard_index}}/{{ctx.shard_total}}")
    return {{"index": ctx.shard_index}}


@executor.job("after")
def after(ctx: JobContext) -> None:
    _note("after")
'''


async def eventually(what: str, check: Callable[[], Awaitable[T | None]], limit_s: float = 90.0) -> T:
    return await wait_for(what, check, limit_s)


class Cluster:
    def __init__(self, admin: AsyncAdminClient, home: Path, group: int,
                 executors: list[asyncio.subprocess.Process]) -> None:
        self.admin, self.home, self.group, self.executors = admin, home, group, executors

    def ran(self, index: int | None = None) -> list[str]:
        lines: list[str] = []
        for i in range(len(self.executors)) if index is None else [index]:
            path = self.home / f"ex{i}" / "ran.log"
            if path.exists():
                lines += path.read_text(encoding="utf-8").splitlines()
        return lines

    async def job(self, handler: str, **fields: Any) -> int:
        job = await self.admin.jobs.create({"job_group": self.group, "job_desc": handler,
                                            "executor_handler": handler, **fields})
        return int(job["id"])

    async def trigger(self, job_id: int, param: str | None = None) -> int:
        answer = await self.admin.jobs.trigger(job_id, executor_param=param)
        return int(answer["run_ids"][0])

    async def ended(self, run_id: int, limit_s: float = 90.0) -> dict[str, Any]:
        async def done() -> dict[str, Any] | None:
            run = await self.admin.runs.get(run_id)
            return run if run["state"] not in ("dispatching", "running", "scheduled") else None

        return await eventually(f"run {run_id} to end", done, limit_s)

    async def subtasks(self, run_id: int, status: str | None = None) -> list[dict[str, Any]]:
        found: list[dict[str, Any]] = []
        after = 0
        while True:
            page = await self.admin.runs.subtasks(run_id, status=status, after_id=after, limit=100)
            found += page["items"]
            if page["next_after_id"] is None:
                return found
            after = page["next_after_id"]


def _write_executor(home: Path) -> None:
    home.mkdir(parents=True)
    (home / "mapred_jobs.py").write_text(EXECUTOR_CODE.format(app=APP), encoding="utf-8")


async def _start_executor(home: Path, admin: AdminNode) -> asyncio.subprocess.Process:
    _write_executor(home)
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("JOBRING_")}
    with (home / "executor.log").open("wb") as log:
        return await asyncio.create_subprocess_exec(
            sys.executable, "-m", "jobring.cli", "executor", "mapred_jobs:executor",
            "--admin", admin.base_url + "/xxl-job-admin/", "--token", TOKEN, "--host", "127.0.0.1",
            "--port", str(port), "--address", f"http://127.0.0.1:{port}/", "--log-path", str(home / "logs"),
            "--beat-interval", "1", cwd=home, env=env, stdout=log, stderr=log,
        )


async def _cluster(tmp_path: Path, executors: int, env: dict[str, str] | None = None
                   ) -> AsyncIterator[Cluster]:
    node = await start_admin(f"sqlite+aiosqlite:///{tmp_path / 'e2e.db'}", "mapred", tmp_path, env=env)
    processes: list[asyncio.subprocess.Process] = []
    try:
        async with AsyncAdminClient(node.base_url) as admin:
            await admin.login("admin", ADMIN_PASSWORD)
            group = (await admin.groups.create(APP, "Map reduce"))["id"]
            processes.extend([await _start_executor(tmp_path / f"ex{i}", node) for i in range(executors)])

            async def online() -> bool | None:
                found = await admin.groups.get(group)
                return True if len(found.get("addresses") or []) >= executors else None

            await eventually("the executors online", online)
            yield Cluster(admin, tmp_path, group, processes)
    finally:
        for process in processes:
            if process.returncode is None:
                process.kill()
                await process.wait()
        await kill(node)


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[Cluster]:
    async for made in _cluster(tmp_path, 3):
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
    async for cluster in _cluster(tmp_path, 3, fast):
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
