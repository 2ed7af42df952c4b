"""What `jobring run` adds to an admin node: the demo group and jobs, and a demo executor."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from datetime import UTC, datetime

from jobring.admin.services.settings import AdminSettings
from jobring.errors import JobringError

DEMO_LOG_PATH = os.path.join("var", "demo-executor")


DEMO_START_TIMEOUT_S = 30.0


class DemoFailed(JobringError):
    """The demo executor did not start."""


def demo_address(port: int) -> str:
    return f"http://127.0.0.1:{port}/"


def demo_port_free(port: int) -> bool:
    """Whether 127.0.0.1:port can be listened on (checked before anything starts)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


async def prepare_local(settings: AdminSettings, demo_port: int) -> str:
    """Migrate, bootstrap (prints a generated admin password once), seed the demo jobs and
    enter the demo executor's address in the registry; returns the executor access token.

    The registry entry is there before the scheduling loop starts, and the demo executor
    listens before the admin serves: a demo job left running fires at once after a restart
    instead of failing "registry address is empty" until the executor registered again.
    """
    from jobring.admin.monitors.monitors import RegistryService
    from jobring.admin.services.bootstrap import bootstrap
    from jobring.admin.services.demo_seed import DEMO_APP_NAME, seed_demo
    from jobring.admin.store import Store
    from jobring.core.clock import SystemClock
    from jobring.protocol.models import RegistryParam

    store = await Store.open(settings.database_url, upgrade=settings.auto_upgrade,
                             pool_size=settings.database_pool_size)
    try:
        await bootstrap(store, settings)
        seeded = await seed_demo(store, datetime.now(UTC).replace(tzinfo=None))
        if seeded.created_jobs:
            print(f"jobring: created the demo group '{DEMO_APP_NAME}' with {seeded.created_jobs} "
                  "stopped demo jobs: start one with `jobring jobs start ID` or the API",
                  file=sys.stderr, flush=True)
        await RegistryService(store, SystemClock()).register(
            RegistryParam("EXECUTOR", DEMO_APP_NAME, demo_address(demo_port)))
        return seeded.access_token
    finally:
        await store.close()


def start_demo_executor(settings: AdminSettings, token: str, port: int) -> subprocess.Popen[bytes]:
    """Start the demo executor (appname ``jobring-demo``) on 127.0.0.1:port as a child
    process; returns once it listens (:class:`DemoFailed` if it does not)."""
    host = "127.0.0.1" if settings.host in ("0.0.0.0", "::", "") else settings.host
    admin_url = f"http://{host}:{settings.port}{settings.base_path.rstrip('/')}/"
    # The token goes in the environment, not on the command line. Its first registration
    # waits for the admin to finish starting: a longer timeout than the default 3 s.
    env = dict(os.environ, JOBRING_EXECUTOR_ACCESS_TOKEN=token, JOBRING_EXECUTOR_ADMIN_TIMEOUT_S="30")
    command = [
        sys.executable, "-m", "jobring.demo",
        "--admin", admin_url, "--host", "127.0.0.1", "--port", str(port),
        "--address", demo_address(port), "--log-path", DEMO_LOG_PATH,
    ]
    print(f"jobring: demo executor at {demo_address(port)} (logs in {DEMO_LOG_PATH})",
          file=sys.stderr, flush=True)
    process = subprocess.Popen(command, env=env)
    deadline = time.monotonic() + DEMO_START_TIMEOUT_S
    while not _listens(port):
        if process.poll() is not None:
            raise DemoFailed(f"the demo executor exited with code {process.returncode}")
        if time.monotonic() > deadline:
            stop_process(process)
            raise DemoFailed(f"the demo executor did not listen on port {port} within "
                             f"{DEMO_START_TIMEOUT_S:g} s")
        time.sleep(0.05)  # a child process's start: no event to wait on
    return process


def _listens(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


def stop_process(process: subprocess.Popen[bytes], timeout: float = 10.0) -> None:
    """Stop a child gracefully (SIGTERM), then for good (SIGKILL) after ``timeout``."""
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
    try:
        process.wait(timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
