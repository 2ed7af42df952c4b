"""Pull dispatch end to end: a real admin process and two demo executors with
``JOBRING_EXECUTOR_DISPATCH=pull`` that open no port. A run is sent, read (its log through
the management API, as the console reads it), killed, and fails over when its executor dies."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest

from tests.e2e.admin_nodes import free_port
from tests.e2e.edge_kit import PASSWORD, TOKEN, healthy, stop_process, wait_until

pytestmark = pytest.mark.e2e


def start_pull_executor(admin_url: str, log_path: Path, env: dict[str, str]
                        ) -> tuple[subprocess.Popen[bytes], str]:
    """The demo executor in pull mode; returns the process and its pull:// address."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "jobring.demo", "--admin", admin_url, "--token", TOKEN,
         "--log-path", str(log_path), "--beat-interval", "30"],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
        env={**env, "JOBRING_EXECUTOR_DISPATCH": "pull"},
    )
    assert proc.stdout is not None
    line = proc.stdout.readline().decode()
    match = re.search(r"no listening port\), registering as (pull://\S+)", line)
    if match is None:
        stop_process(proc)
        raise AssertionError(f"the pull executor did not start: {line!r}")
    return proc, match.group(1)


def listening_ports(pid: int) -> list[int]:
    return [c.laddr.port for c in psutil.Process(pid).net_connections(kind="all")
            if c.status == psutil.CONN_LISTEN]


@contextmanager
def admin_process(work: Path) -> Iterator[tuple[int, httpx.Client, subprocess.Popen[bytes]]]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("JOBRING_")}
    port = free_port()
    log = (work / "admin.log").open("wb")
    admin = subprocess.Popen(
        [sys.executable, "-m", "jobring.cli", "admin", "--database-url", f"sqlite:///{work / 'pull.db'}",
         "--port", str(port)],
        stdout=log, stderr=subprocess.STDOUT, cwd=work,
        env={**env, "JOBRING_ACCESS_TOKEN": TOKEN, "JOBRING_ADMIN_PASSWORD": PASSWORD},
    )
    try:
        wait_until(lambda: healthy(port) or admin.poll() is not None, "the admin", 90)
        assert admin.poll() is None, (work / "admin.log").read_text()
        base = f"http://127.0.0.1:{port}/api/v1"
        with httpx.Client(base_url=base, timeout=30) as session:
            login = session.post("/auth/login", json={"username": "admin", "password": PASSWORD})
            made = session.post("/tokens", json={"name": "pull"},
                                headers={"X-CSRF-Token": login.json()["csrf_token"]})
            assert made.status_code == 201, made.text
        bearer = {"Authorization": f"Bearer {made.json()['token']}"}
        with httpx.Client(base_url=base, timeout=30, headers=bearer) as api:
            yield port, api, admin
    finally:
        stop_process(admin)
        log.close()


def wait_result(api: httpx.Client, log_id: int) -> dict[str, Any]:
    wait_until(lambda: api.get(f"/runs/{log_id}").json()["handle_code"] != 0, f"the result of run {log_id}")
    run: dict[str, Any] = api.get(f"/runs/{log_id}").json()
    return run


def add_job(api: httpx.Client, group_id: int, handler: str, route: str) -> dict[str, Any]:
    made = api.post("/jobs", json={"job_group": group_id, "job_desc": f"{handler} {route}",
                                   "executor_handler": handler, "schedule_type": "NONE",
                                   "executor_route_strategy": route})
    assert made.status_code == 201, made.text
    job: dict[str, Any] = made.json()
    return job


def trigger(api: httpx.Client, job_id: int, param: str) -> dict[str, Any]:
    fired = api.post(f"/jobs/{job_id}/trigger", json={"executor_param": param})
    assert fired.status_code == 200, fired.text
    body: dict[str, Any] = fired.json()
    return body


def test_pull_executors_run_are_killed_have_logs_read_and_fail_over(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("JOBRING_")}
    executors: list[subprocess.Popen[bytes]] = []
    with admin_process(tmp_path) as (port, api, _admin):
        try:
            group = api.post("/groups", json={"app_name": "jobring-demo", "title": "demo"}).json()
            admin_url = f"http://127.0.0.1:{port}/xxl-job-admin/"
            started = [start_pull_executor(admin_url, tmp_path / f"logs{i}", env) for i in range(2)]
            executors = [p for p, _ in started]
            by_address = {address: proc for proc, address in started}

            def online() -> list[dict[str, Any]]:
                found: list[dict[str, Any]] = api.get(f"/groups/{group['id']}").json()["online"]
                return found

            wait_until(lambda: len(online()) == 2, "both pull executors' registration")
            assert {e["dispatch"] for e in online()} == {"pull"}
            # Neither executor listens on any port.
            for proc in executors:
                assert listening_ports(proc.pid) == []
            first, second = sorted(by_address)

            job = add_job(api, group["id"], "hello", "FAILOVER")
            fired = trigger(api, job["id"], "over the poll")
            assert fired["trigger_code"] == 200, fired["trigger_msg"]
            (log_id,) = fired["log_ids"]
            run = wait_result(api, log_id)
            assert run["handle_code"] == 200 and run["executor_address"] == first
            # The log is read through the management API (the console's path) over the poll.
            text = api.get(f"/runs/{log_id}/log").json()["log_content"]
            assert "hello from jobring, params=over the poll" in text

            # A long run is killed over the poll.
            slow = add_job(api, group["id"], "slow", "FIRST")
            (slow_id,) = trigger(api, slow["id"], "60")["log_ids"]
            wait_until(lambda: "sleeping" in api.get(f"/runs/{slow_id}/log").json()["log_content"],
                       "the slow run")
            killed = api.post(f"/runs/{slow_id}/kill")
            assert killed.status_code == 200 and killed.json()["killed"] is True, killed.text
            ended = wait_result(api, slow_id)
            assert ended["handle_code"] == 500 and "kill" in (ended["handle_msg"] or "")

            # The first executor dies: its poll's connection closes, and FAILOVER runs the
            # job on the second at once (the registry still lists the dead one).
            by_address[first].send_signal(signal.SIGKILL)
            by_address[first].wait(10)
            assert first in {e["address"] for e in online()}
            fired = trigger(api, job["id"], "after the failover")
            assert fired["trigger_code"] == 200, fired["trigger_msg"]
            run = wait_result(api, fired["log_ids"][0])
            assert run["handle_code"] == 200 and run["executor_address"] == second
            # A route without probes picks the dead executor: refused as unreachable (not
            # delivered: no poll, or, had the admin not yet seen the poll's connection close,
            # no poll took it in time), never delivered later.
            first_job = add_job(api, group["id"], "hello", "FIRST")
            refused = trigger(api, first_job["id"], "to the dead one")
            assert refused["trigger_code"] == 500 and "unreachable (Pull" in refused["trigger_msg"]
        finally:
            for proc in executors:
                stop_process(proc)
