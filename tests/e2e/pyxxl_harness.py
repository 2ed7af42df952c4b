"""End-to-end harness: our executor-facing admin API on a loopback uvicorn server, our
TriggerService, and real ``pyxxl`` executor processes that register against it."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import subprocess
import sys
import textwrap
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import IO

import uvicorn
from starlette.applications import Starlette
from starlette.routing import Mount

from jobring.admin.api.executor_api import executor_api_routes
from jobring.admin.dispatch.client import ExecutorClient
from jobring.admin.monitors.monitors import RegistryService
from jobring.admin.services.callbacks import CallbackService
from jobring.admin.store import Store
from jobring.admin.store.records import JobGroup, JobInfo, LogEntry
from jobring.admin.trigger.trigger import TriggerService
from jobring.core.clock import SystemClock
from jobring.core.enums import AddressType

TOKEN = "e2e-token"
APP_NAME = "pyxxl-app"
WAIT_S = 20.0

EXECUTOR_SCRIPT = textwrap.dedent('''
    import sys
    from pyxxl import ExecutorConfig, PyxxlRunner
    from pyxxl.ctx import g

    admin_url, port, token, app_name, log_dir = sys.argv[1:6]
    config = ExecutorConfig(
        xxl_admin_baseurl=admin_url, executor_app_name=app_name, access_token=token,
        executor_listen_host="127.0.0.1", executor_listen_port=int(port),
        executor_url=f"http://127.0.0.1:{port}", executor_log_path=f"{log_dir}/pyxxl.log",
        log_local_dir=log_dir, dotenv_try=False, http_retry_duration=1,
    )
    runner = PyxxlRunner(config)

    @runner.register(name="demo")
    async def demo():
        return f"ok {g.xxl_run_data.executorParams} on {port}"

    @runner.register(name="fail")
    async def fail():
        raise RuntimeError("failed on purpose")

    @runner.register(name="shard")
    async def shard():
        d = g.xxl_run_data
        return f"shard {d.broadcastIndex}/{d.broadcastTotal} on {port}"

    runner.run_executor()
''')


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def wait_for(what: str, check: Callable[[], Awaitable[bool]], within_s: float = WAIT_S) -> None:
    """Poll ``check`` until it is true; fail with ``what`` after ``within_s`` seconds."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within_s
    while not await check():
        if loop.time() > deadline:
            raise AssertionError(f"timed out after {within_s}s waiting for {what}")
        await asyncio.sleep(0.05)


@dataclass
class PyxxlExecutor:
    port: int
    process: subprocess.Popen[bytes]
    log_dir: Path
    stderr: IO[bytes]

    @property
    def address(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def stop(self, sig: int = signal.SIGTERM) -> None:
        """Signal the process and wait for it without blocking the loop (the admin served
        in this loop must answer its registryRemove); kill it after 10 s."""
        if self.process.poll() is None:
            self.process.send_signal(sig)
            try:
                await asyncio.to_thread(self.process.wait, 10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                await asyncio.to_thread(self.process.wait, 10)
        self.stderr.close()

    def output(self) -> str:
        path = self.log_dir / "pyxxl.log"
        return path.read_text(errors="replace") if path.exists() else ""


@dataclass
class Admin:
    store: Store
    trigger: TriggerService
    callbacks: CallbackService
    base_url: str
    group_id: int
    tmp: Path
    executors: list[PyxxlExecutor] = field(default_factory=list)

    def start_executor(self) -> PyxxlExecutor:
        port = free_port()
        log_dir = self.tmp / f"pyxxl-{port}"
        log_dir.mkdir()
        script = self.tmp / "pyxxl_executor.py"
        if not script.exists():
            script.write_text(EXECUTOR_SCRIPT)
        env = {k: v for k, v in os.environ.items() if not k.upper().startswith(("ACCESS_TOKEN", "EXECUTOR_"))}
        stderr = (log_dir / "stderr.txt").open("wb")
        process = subprocess.Popen(
            [sys.executable, str(script), f"{self.base_url}/xxl-job-admin/api/", str(port), TOKEN, APP_NAME,
             str(log_dir)],
            stdout=subprocess.DEVNULL, stderr=stderr, env=env, cwd=log_dir,
        )
        executor = PyxxlExecutor(port, process, log_dir, stderr)
        self.executors.append(executor)
        return executor

    async def addresses(self) -> list[str]:
        group = await self.store.groups.get(self.group_id)
        return group.addresses if group else []

    async def wait_registered(self, *executors: PyxxlExecutor) -> None:
        async def registered() -> bool:
            for e in executors:
                if e.process.poll() is not None:
                    raise AssertionError(f"executor on {e.port} exited: "
                                         f"{(e.log_dir / 'stderr.txt').read_text(errors='replace')}")
            have = await self.addresses()
            return all(e.address in have for e in executors)

        await wait_for("executor registration", registered)

    async def job(self, handler: str, route: str = "FIRST", **fields: object) -> JobInfo:
        values: dict[str, object] = {"job_group": self.group_id, "job_desc": f"e2e {handler}",
                                     "executor_handler": handler, "executor_route_strategy": route,
                                     "glue_type": "BEAN"}
        values.update(fields)
        job_id = await self.store.jobs.create(JobInfo(**values))  # type: ignore[arg-type]
        job = await self.store.jobs.get(job_id)
        assert job is not None
        return job

    async def wait_result(self, log_id: int) -> LogEntry:
        found: list[LogEntry] = []

        async def done() -> bool:
            entry = await self.store.logs.get(log_id)
            if entry is not None and entry.handle_code != 0:
                found.append(entry)
                return True
            return False

        await wait_for(f"the result of log {log_id}", done)
        return found[0]


@contextlib.asynccontextmanager
async def running_admin(store: Store, tmp: Path) -> AsyncIterator[Admin]:
    """Serve the executor API on a loopback port; stop every executor and the server after."""
    clock = SystemClock()
    client = ExecutorClient(access_token=TOKEN)
    trigger = TriggerService(store, client, node_id="e2e", clock=clock,
                             admin_timezone="UTC")
    callbacks = CallbackService(store, trigger, clock)
    routes = executor_api_routes(RegistryService(store, clock), callbacks, TOKEN)
    app = Starlette(routes=[Mount("/xxl-job-admin", routes=routes), *routes])
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off", ws="none"))
    serving = asyncio.create_task(server.serve(sockets=[sock]))
    now = datetime.now(UTC)
    group_id = await store.groups.create(JobGroup(app_name=APP_NAME, title="pyxxl",
                                                  address_type=AddressType.AUTO), now)
    admin = Admin(store, trigger, callbacks, f"http://127.0.0.1:{port}", group_id, tmp)
    try:
        await wait_for("the admin server", lambda: _started(server))
        yield admin
    finally:
        for executor in admin.executors:
            await executor.stop()
        await callbacks.close()
        await trigger.close()
        await client.aclose()
        server.should_exit = True
        await serving
        sock.close()


async def _started(server: uvicorn.Server) -> bool:
    return server.started
