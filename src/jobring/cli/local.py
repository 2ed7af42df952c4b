"""What `jobring run` adds to an admin node: the demo group and jobs, and a demo executor."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from datetime import UTC, datetime

from jobring.config import AdminSettings

DEMO_LOG_PATH = os.path.join("var", "demo-executor")


async def prepare_local(settings: AdminSettings) -> str:
    """Migrate, bootstrap (prints a generated admin password once) and seed the demo jobs;
    returns the demo group's executor access token (the demo executor's only credential)."""
    from jobring.admin.bootstrap import bootstrap
    from jobring.admin.demo_seed import seed_demo
    from jobring.admin.store import Store

    store = await Store.open(settings.database_url, upgrade=settings.auto_upgrade)
    try:
        await bootstrap(store, settings)
        seeded = await seed_demo(store, datetime.now(UTC).replace(tzinfo=None))
        if seeded.created_jobs:
            print(f"jobring: created the demo group 'jobring-demo' with {seeded.created_jobs} "
                  "stopped demo jobs: start one with `jobring jobs start ID` or the API",
                  file=sys.stderr, flush=True)
        return seeded.access_token
    finally:
        await store.close()


def start_demo_executor(settings: AdminSettings, token: str, port: int) -> subprocess.Popen[bytes]:
    """Start the demo executor (appname ``jobring-demo``) on 127.0.0.1:port as a child process."""
    host = "127.0.0.1" if settings.host in ("0.0.0.0", "::", "") else settings.host
    admin_url = f"http://{host}:{settings.port}{settings.base_path.rstrip('/')}/"
    env = dict(os.environ, JOBRING_EXECUTOR_ACCESS_TOKEN=token)  # not on the command line
    command = [
        sys.executable, "-m", "jobring.demo",
        "--admin", admin_url, "--host", "127.0.0.1", "--port", str(port),
        "--address", f"http://127.0.0.1:{port}/", "--log-path", DEMO_LOG_PATH,
    ]
    print(f"jobring: demo executor at http://127.0.0.1:{port}/ (logs in {DEMO_LOG_PATH})",
          file=sys.stderr, flush=True)
    return subprocess.Popen(command, env=env)


def stop_process(process: subprocess.Popen[bytes], timeout: float = 10.0) -> None:
    """Stop a child gracefully (SIGTERM), then for good (SIGKILL) after ``timeout``."""
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
    try:
        process.wait(timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
