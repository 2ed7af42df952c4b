"""`jobring run` (what `make run` starts): admin + demo executor + demo jobs, end to end."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest

from jobring.client import AdminClient
from tests.e2e.admin_nodes import free_port

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(180)]

LIMIT_S = 90.0


def _wait_for(what: str, check: Callable[[], Any], proc: subprocess.Popen[bytes], log: Path) -> Any:
    deadline = time.monotonic() + LIMIT_S
    while True:
        if proc.poll() is not None:
            raise AssertionError(f"jobring run exited {proc.returncode}:\n{log.read_text()}")
        result = check()
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} not seen in time:\n{log.read_text()}")
        time.sleep(0.2)


@pytest.fixture
def local_run(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[bytes], int, Path]]:
    port, demo_port = free_port(), free_port()
    log = tmp_path / "run.log"
    env = {k: v for k, v in os.environ.items() if not k.startswith("JOBRING_")}
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "jobring.cli", "run", "--port", str(port), "--demo-port", str(demo_port)],
            cwd=tmp_path, env=env, stdout=out, stderr=subprocess.STDOUT,
        )
    try:
        yield proc, port, log
    finally:
        children = psutil.Process(proc.pid).children(recursive=True) if proc.poll() is None else []
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        for child in children:
            if child.is_running():
                child.kill()


def _healthy(port: int) -> bool:
    try:
        return httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def test_run_starts_admin_and_demo_executor_and_demo_jobs_run(
    local_run: tuple[subprocess.Popen[bytes], int, Path],
) -> None:
    proc, port, log = local_run
    _wait_for("health", lambda: _healthy(port), proc, log)
    match = _wait_for("generated password", lambda: re.search(r"generated password: (\S+)", log.read_text()),
                      proc, log)
    assert (Path(log.parent) / "jobring.db").exists()  # the SQLite default, in the working folder

    with AdminClient(f"http://127.0.0.1:{port}") as admin:
        admin.login("admin", match.group(1))
        admin.auth.change_password(match.group(1), "a-new-password-1")
        admin.login("admin", "a-new-password-1")
        jobs = {job["executor_handler"]: job for job in admin.jobs.list().items}
        assert set(jobs) == {"hello", "shard", "slow", "fail"}
        assert all(job["trigger_status"] == 0 for job in jobs.values())  # seeded stopped

        group = jobs["hello"]["job_group"]
        _wait_for("demo executor online", lambda: admin.groups.get(group).get("addresses"), proc, log)
        admin.jobs.start(jobs["hello"]["id"])

        def succeeded() -> Any:
            runs = admin.runs.list(job=jobs["hello"]["id"], status="success").items
            return runs[0] if runs else None

        run = _wait_for("a successful demo run", succeeded, proc, log)
        # The run's address is recorded in a batch shortly after the dispatch, so the callback
        # may be stored first; the log is read from that address once it is there.
        text = _wait_for("the run's log", lambda: "hello from jobring, params=world" in
                         admin.runs.log(run["id"], from_line=1)["log_content"], proc, log)
        assert text

    proc.send_signal(signal.SIGINT)
    assert proc.wait(30) == 0


@pytest.mark.parametrize("taken", ["admin", "demo"])
def test_a_taken_port_stops_the_start_before_anything_happens(tmp_path: Path, taken: str) -> None:
    blocker = socket.socket()
    blocker.bind(("127.0.0.1", 0))
    blocker.listen()
    try:
        busy = blocker.getsockname()[1]
        port, demo_port = (busy, free_port()) if taken == "admin" else (free_port(), busy)
        env = {k: v for k, v in os.environ.items() if not k.startswith("JOBRING_")}
        done = subprocess.run(
            [sys.executable, "-m", "jobring.cli", "run", "--port", str(port), "--demo-port", str(demo_port)],
            cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60,
        )
    finally:
        blocker.close()
    assert done.returncode == 2
    option = "--port" if taken == "admin" else "--demo-port"
    assert done.stderr.startswith(f"jobring: error: port {busy} ") and option in done.stderr
    assert len(done.stderr.splitlines()) == 1  # no traceback, no password used up
    assert list(tmp_path.iterdir()) == []  # no database created
