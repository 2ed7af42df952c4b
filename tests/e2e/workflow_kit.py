"""The set-up the workflow end-to-end suites share: an admin process on SQLite, a real jobring
executor process whose handlers a suite writes into its home (``EXECUTOR_HEAD`` plus its own
handlers), its group, and :class:`WorkflowEnv` to make jobs and workflows and watch runs."""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from jobring.client import AsyncAdminClient
from tests.e2e.admin_nodes import ADMIN_PASSWORD, TOKEN, AdminNode, free_port, kill, start_admin
from tests.e2e.waiting import eventually

# The executor module's start: ``_note`` appends one line to order.log (one write per line, so
# lines of parallel runs do not mix); "step" notes "<params> start", sleeps 0.2 s, notes
# "<params> end"; "fail" notes its start and fails; "flaky" fails until the file flaky.ok exists
# in the executor's home (a test creates it before a repair). A suite appends its own handlers
# (braces doubled: the code is formatted with ``app``).
EXECUTOR_HEAD = '''
import time
from pathlib import Path

from jobring import Executor, JobContext

executor = Executor(app_name="{app}")
ORDER = Path("order.log")


def _note(text: str) -> None:
    with ORDER.open("a", encoding="utf-8") as out:
        out.write(text + "\\n")


@executor.job("step")
def step(ctx: JobContext) -> None:
    _note(f"{{ctx.params}} start")
    time.sleep(0.2)
    _note(f"{{ctx.params}} end")


@executor.job("fail")
def fail(ctx: JobContext) -> None:
    _note(f"{{ctx.params}} start")
    ctx.fail("fail: as asked")


@executor.job("flaky")
def flaky(ctx: JobContext) -> None:
    _note(f"{{ctx.params}} start")
    if not Path("flaky.ok").exists():
        _note(f"{{ctx.params}} failed")
        ctx.fail("flaky: not yet")
        return
    _note(f"{{ctx.params}} end")
'''


class WorkflowEnv:
    """An admin client logged in, the executor's home and its group."""

    def __init__(self, admin: AsyncAdminClient, home: Path, group: int) -> None:
        self.admin, self.home, self.group = admin, home, group
        self.jobs: dict[str, int] = {}

    def order(self) -> list[str]:
        path = self.home / "order.log"
        return path.read_text(encoding="utf-8").splitlines() if path.exists() else []

    async def job(self, handler: str) -> int:
        """The group's job for ``handler``: the one there (e.g. declared in code), else a new one."""
        if handler not in self.jobs:
            jobs = await self.admin.jobs.list(group=self.group, handler=handler, limit=100)
            found = [j for j in jobs.items if j["executor_handler"] == handler]
            if found:
                self.jobs[handler] = int(found[0]["id"])
            else:
                made = await self.admin.jobs.create({"job_group": self.group, "job_desc": handler,
                                                     "executor_handler": handler})
                self.jobs[handler] = int(made["id"])
        return self.jobs[handler]

    async def workflow(self, name: str, nodes: list[Any], edges: list[Any]) -> int:
        made = await self.admin.workflows.create({"name": name, "job_group": self.group, "nodes": nodes,
                                                  "edges": edges})
        return int(made["id"])

    async def run_until(
        self, run_id: int, what: str, check: Callable[[dict[str, Any]], bool]
    ) -> dict[str, Any]:
        async def probe() -> dict[str, Any] | None:
            run = await self.admin.workflows.run(run_id)
            return run if check(run) else None

        return await eventually(f"workflow run {run_id}: {what}", probe)

    async def ended(self, run_id: int) -> dict[str, Any]:
        return await self.run_until(run_id, "ended", lambda r: r["state"] != "running")


def states(run: dict[str, Any]) -> dict[str, str]:
    return {n["key"]: n["state"] for n in run["nodes"]}


def _write_module(home: Path, module: str, code: str) -> None:
    home.mkdir()
    (home / f"{module}.py").write_text(code, encoding="utf-8")


async def start_executor(
    home: Path, admins: Sequence[AdminNode], module: str, code: str
) -> asyncio.subprocess.Process:
    """``jobring executor <module>:executor`` in ``home`` (the module's ``code`` written there),
    registering with every admin of ``admins`` (the shared executor token)."""
    await asyncio.to_thread(_write_module, home, module, code)
    port = free_port()
    environ = {k: v for k, v in os.environ.items() if not k.startswith("JOBRING_")}
    where = [arg for a in admins for arg in ("--admin", a.base_url + "/xxl-job-admin/")]
    with (home / "executor.log").open("wb") as log:
        return await asyncio.create_subprocess_exec(
            sys.executable, "-m", "jobring.cli", "executor", f"{module}:executor", *where,
            "--token", TOKEN, "--host", "127.0.0.1", "--port", str(port),
            "--address", f"http://127.0.0.1:{port}/", "--log-path", str(home / "logs"),
            cwd=home, env=environ, stdout=log, stderr=log,
        )


async def stop_executor(executor: asyncio.subprocess.Process | None) -> None:
    if executor is not None and executor.returncode is None:
        executor.kill()
        await executor.wait()


async def wait_online(admin: AsyncAdminClient, group: int) -> None:
    async def online() -> bool | None:
        return True if (await admin.groups.get(group))["online"] else None

    await eventually("the executor online", online)


@asynccontextmanager
async def workflow_env(tmp_path: Path, app: str, module: str, code: str) -> AsyncIterator[WorkflowEnv]:
    """An admin on SQLite, the group ``app`` and its executor (``code`` formatted with ``app``)
    online; everything is killed on the way out."""
    node = await start_admin(f"sqlite+aiosqlite:///{tmp_path / 'e2e.db'}", app, tmp_path)
    executor: asyncio.subprocess.Process | None = None
    try:
        async with AsyncAdminClient(node.base_url) as admin:
            await admin.login("admin", ADMIN_PASSWORD)
            group = (await admin.groups.create(app, app))["id"]
            home = tmp_path / "executor"
            executor = await start_executor(home, [node], module, code.format(app=app))
            await wait_online(admin, group)
            yield WorkflowEnv(admin, home, group)
    finally:
        await stop_executor(executor)
        await kill(node)
