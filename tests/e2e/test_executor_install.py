"""`pip install jobring` (no extra) into a clean venv is the executor library, the client and
the CLI: `from jobring import Executor` works, the admin's libraries (SQLAlchemy, FastAPI,
uvicorn, ...) are not there, an admin command says which extra it needs, and an executor of
that venv runs a job for an admin started from the development venv.

The venv is built from a copy of pyproject.toml, README.md and src/ (so no build output lands
in the checkout); pip downloads the few dependencies from PyPI (or its cache)."""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from jobring.admin.store import Store
from tests.e2e.admin_nodes import (
    TOKEN,
    add_manual_group,
    fired,
    fix_rate,
    free_port,
    now_ms,
    start_admin,
    stop,
)

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(240)]

REPO = Path(__file__).resolve().parents[2]
ADMIN_ONLY = ("sqlalchemy", "alembic", "fastapi", "starlette", "uvicorn", "asyncpg", "aiomysql",
              "prometheus_client", "argon2", "aio_pika")
EXECUTOR_SCRIPT = f"""
import importlib.util, sys
from jobring import Executor, JobContext

present = [m for m in {ADMIN_ONLY!r} if importlib.util.find_spec(m) is not None]
assert not present, f"admin libraries in an executor install: {{present}}"
admin, port, log_path = sys.argv[1], int(sys.argv[2]), sys.argv[3]
executor = Executor(app_name="e2e-exec", admin_addresses=[admin], access_token={TOKEN!r},
                    host="127.0.0.1", port=port, log_path=log_path, beat_interval_s=30)


@executor.job("hello")
def hello(ctx: JobContext) -> None:
    ctx.log("hello from a plain install")


executor.run()
"""


def _install(tmp_path: Path) -> Path:
    source = tmp_path / "source"
    shutil.copytree(REPO / "src", source / "src", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, source / name)
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=60)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet",
                    "--disable-pip-version-check", str(source)], check=True, timeout=180, env=env)
    return venv


def _jobring(venv: Path, *args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(venv / "bin" / "jobring"), *args], capture_output=True, text=True, env=env,
                          timeout=60)


async def test_the_executor_alone_installs_without_the_admin_and_runs_a_job(tmp_path: Path) -> None:
    venv = _install(tmp_path)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")
           and not k.startswith("JOBRING_")}

    # An admin command of that install names the extra it needs (exit 2, no traceback).
    db = _jobring(venv, "db", "upgrade", "--database-url", f"sqlite+aiosqlite:///{tmp_path}/x.db", env=env)
    assert db.returncode == 2, db.stderr
    assert "pip install 'jobring[admin]'" in db.stderr and "Traceback" not in db.stderr

    url = f"sqlite+aiosqlite:///{tmp_path}/admin.db"
    admin = await start_admin(url, "plain", tmp_path)
    store = await Store.open(url, upgrade=False)
    executor = None
    try:
        port = free_port()
        (tmp_path / "jobs.py").write_text(EXECUTOR_SCRIPT, encoding="utf-8")
        with (tmp_path / "executor.log").open("wb") as out:
            executor = await asyncio.create_subprocess_exec(
                str(venv / "bin" / "python"), str(tmp_path / "jobs.py"), admin.base_url + "/xxl-job-admin",
                str(port), str(tmp_path / "runlogs"), stdout=out, stderr=out, env=env, cwd=tmp_path)
        # The job fires once: first the executor listens (it logs its registration, which a
        # slow machine may take seconds to reach).
        for _ in range(1200):
            if f"as http://127.0.0.1:{port}/ with" in (tmp_path / "executor.log").read_text():
                break
            assert executor.returncode is None, (tmp_path / "executor.log").read_text()
            await asyncio.sleep(0.1)
        else:
            pytest.fail(f"the executor never registered: {(tmp_path / 'executor.log').read_text()}")
        group = await add_manual_group(store, f"http://127.0.0.1:{port}/")
        await store.jobs.create(fix_rate(group, now_ms() + 1_000, seconds=3600))
        for _ in range(600):
            rows = await fired(store)
            if rows and rows[0].handle_code:
                break
            assert executor.returncode is None, (tmp_path / "executor.log").read_text()
            await asyncio.sleep(0.1)  # a real admin and executor: no event to wait on from here
        assert rows and rows[0].handle_code == 200, (rows, (tmp_path / "executor.log").read_text())
    finally:
        if executor is not None and executor.returncode is None:
            executor.terminate()
            await asyncio.wait_for(executor.wait(), 30)
        await store.close()
        await stop(admin)
