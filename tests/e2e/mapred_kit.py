"""A map-reduce cluster for end-to-end tests: a real admin process (or several on one
database), jobring executor processes running ``EXECUTOR_CODE`` (each notes what it ran in
its own ``ran.log``), and a client logged in to the first admin. Used by
``tests/e2e/test_distributed_e2e.py`` and ``tests/e2e/test_distributed_nodes_e2e.py``."""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

from jobring.client import AsyncAdminClient
from tests.e2e.admin_nodes import ADMIN_PASSWORD, TOKEN, AdminNode, free_port, kill, start_admin
from tests.e2e.waiting import eventually as wait_for

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
    ctx.log("counting %s", ctx.item["line"])
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


@executor.job("snapshot")
def snapshot(ctx: JobContext) -> dict[str, int]:
    _note("pre")
    if Path("../pre_fails").exists():
        raise ValueError("no snapshot today")
    return {{"snapshot": 7}}


@executor.job("refresh")
def refresh(ctx: JobContext) -> int:
    _note(f"part {{ctx.shard_index}}/{{ctx.shard_total}} snapshot {{ctx.item['snapshot']}}")
    return ctx.shard_index


@executor.job("report")
def report(ctx: JobContext) -> list[int]:
    _note(f"post {{ctx.item['succeeded']}} of {{ctx.item['total']}}")
    return sorted(ctx.results())
'''


async def eventually(what: str, check: Callable[[], Awaitable[T | None]], limit_s: float = 90.0) -> T:
    return await wait_for(what, check, limit_s)


class Cluster:
    def __init__(self, admin: AsyncAdminClient, home: Path, group: int,
                 executors: list[asyncio.subprocess.Process], nodes: list[AdminNode]) -> None:
        self.admin, self.home, self.group, self.executors = admin, home, group, executors
        self.nodes = nodes

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


def _write_executor(home: Path, app: str) -> None:
    home.mkdir(parents=True)
    (home / "mapred_jobs.py").write_text(EXECUTOR_CODE.format(app=app), encoding="utf-8")


async def start_executor(home: Path, admins: Sequence[AdminNode], *, app: str = APP,
                         dispatch: str = "push", broker: str | None = None) -> asyncio.subprocess.Process:
    """An executor process in ``home`` that knows every admin of ``admins`` (in that order);
    ``dispatch`` push (a port of its own), pull or broker (``broker``: the AMQP URL)."""
    _write_executor(home, app)
    env = {k: v for k, v in os.environ.items() if not k.startswith("JOBRING_")}
    each = [arg for admin in admins for arg in ("--admin", admin.base_url + "/xxl-job-admin/")]
    if dispatch == "push":
        port = free_port()
        how = ["--host", "127.0.0.1", "--port", str(port), "--address", f"http://127.0.0.1:{port}/"]
    else:
        how = ["--dispatch", dispatch, *(["--dispatch-broker", broker] if broker else [])]
    with (home / "executor.log").open("wb") as log:
        return await asyncio.create_subprocess_exec(
            sys.executable, "-m", "jobring.cli", "executor", "mapred_jobs:executor",
            *each, "--token", TOKEN, *how, "--log-path", str(home / "logs"),
            "--beat-interval", "1", cwd=home, env=env, stdout=log, stderr=log,
        )


async def cluster_of(tmp_path: Path, executors: int, env: dict[str, str] | None = None, *,
                     url: str | None = None, admins: int = 1, app: str = APP, dispatch: str = "push",
                     broker: str | None = None) -> AsyncIterator[Cluster]:
    """Yield a cluster of ``admins`` admin processes on one database (``url``; a new SQLite
    file by default) and ``executors`` executors of ``dispatch`` mode that know every admin
    (broker mode: the admins publish to ``broker``)."""
    database = url or f"sqlite+aiosqlite:///{tmp_path / 'e2e.db'}"
    if broker:
        env = {**(env or {}), "JOBRING_DISPATCH_BROKER": broker}
    nodes: list[AdminNode] = []
    processes: list[asyncio.subprocess.Process] = []
    try:
        # One at a time: the first migrates the database.
        nodes.extend([await start_admin(database, f"mapred{i}", tmp_path, env=env) for i in range(admins)])
        async with AsyncAdminClient(nodes[0].base_url) as admin:
            await admin.login("admin", ADMIN_PASSWORD)
            group = (await admin.groups.create(app, "Map reduce"))["id"]
            processes.extend([await start_executor(tmp_path / f"ex{i}", nodes, app=app, dispatch=dispatch,
                                                   broker=broker) for i in range(executors)])

            async def online() -> bool | None:
                found = await admin.groups.get(group)
                return True if len(found.get("addresses") or []) >= executors else None

            await eventually("the executors online", online)
            yield Cluster(admin, tmp_path, group, processes, nodes)
    finally:
        for process in processes:
            if process.returncode is None:
                process.kill()
                await process.wait()
        for node in nodes:
            await kill(node)


