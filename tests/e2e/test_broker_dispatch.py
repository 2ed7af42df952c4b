"""Broker dispatch end to end: a real admin process publishing to RabbitMQ
(``JOBRING_DISPATCH_BROKER``) and demo executors with ``--dispatch broker`` taking their runs
from it (docs/dispatch.md, "Broker mode"): runs delivered, logs read and runs killed over the
poll, a broker restart that loses no run, and an executor SIGKILLed with an unacknowledged
delivery whose run another executor then runs, once.

Each test uses an appname of its own (so queues of its own) and deletes its queues. The
restart test stops the broker for everyone: it runs in the timing lane, where no other test
uses the broker."""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from jobring.protocol.broker import executor_queue, group_queue
from tests.broker_kit import amqp_url, delete_queues, unique_app
from tests.e2e.admin_nodes import free_port
from tests.e2e.edge_kit import PASSWORD, TOKEN, healthy, stop_process, wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(180)]


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("JOBRING_")}


def start_broker_executor(admin_url: str, app: str, url: str, log_path: Path, slots: int = 200
                          ) -> tuple[subprocess.Popen[bytes], str]:
    """The demo executor as a broker executor of ``app``; the process and its broker:// address."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "jobring.cli", "executor", "jobring.demo:executor", "--app-name", app,
         "--admin", admin_url, "--token", TOKEN, "--log-path", str(log_path), "--beat-interval", "30",
         "--dispatch", "broker", "--dispatch-broker", url],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
        env={**_env(), "JOBRING_EXECUTOR_BROKER_SLOTS": str(slots)},
    )
    assert proc.stdout is not None
    line = proc.stdout.readline().decode()
    match = re.search(r"\(broker dispatch, no listening port\), registering as (broker://\S+)", line)
    if match is None:
        stop_process(proc)
        raise AssertionError(f"the broker executor did not start: {line!r}")
    return proc, match.group(1)


@contextmanager
def admin_process(work: Path, url: str) -> Iterator[tuple[str, httpx.Client]]:
    """An admin on SQLite publishing to ``url``; (its executor URL, the management API)."""
    port = free_port()
    log = (work / "admin.log").open("wb")
    admin = subprocess.Popen(
        [sys.executable, "-m", "jobring.cli", "admin", "--database-url", f"sqlite:///{work / 'broker.db'}",
         "--port", str(port)],
        stdout=log, stderr=subprocess.STDOUT, cwd=work,
        env={**_env(), "JOBRING_ACCESS_TOKEN": TOKEN, "JOBRING_ADMIN_PASSWORD": PASSWORD,
             "JOBRING_DISPATCH_BROKER": url},
    )
    try:
        wait_until(lambda: healthy(port) or admin.poll() is not None, "the admin", 90)
        assert admin.poll() is None, (work / "admin.log").read_text()
        base = f"http://127.0.0.1:{port}/api/v1"
        with httpx.Client(base_url=base, timeout=30) as session:
            login = session.post("/auth/login", json={"username": "admin", "password": PASSWORD})
            made = session.post("/tokens", json={"name": "broker"},
                                headers={"X-CSRF-Token": login.json()["csrf_token"]})
            assert made.status_code == 201, made.text
        bearer = {"Authorization": f"Bearer {made.json()['token']}"}
        with httpx.Client(base_url=base, timeout=30, headers=bearer) as api:
            yield f"http://127.0.0.1:{port}/xxl-job-admin/", api
    finally:
        stop_process(admin)
        log.close()


@contextmanager
def broker_group(tmp_path: Path) -> Iterator[tuple[str, str, str, httpx.Client, int]]:
    """(broker URL, appname, admin executor URL, API, group id); the queues deleted after."""
    url = amqp_url()
    app = unique_app("e2e-broker")
    try:
        with admin_process(tmp_path, url) as (admin_url, api):
            group = api.post("/groups", json={"app_name": app, "title": "broker"})
            assert group.status_code == 201, group.text
            yield url, app, admin_url, api, group.json()["id"]
    finally:
        names = [group_queue(app)] + [executor_queue(app, n) for n in _names(tmp_path)]
        asyncio.run(delete_queues(url, *names))


def _names(tmp_path: Path) -> list[str]:
    path = tmp_path / "names.txt"
    return path.read_text().split() if path.exists() else []


def _remember(tmp_path: Path, address: str) -> None:
    with (tmp_path / "names.txt").open("a") as fh:
        fh.write(address.removeprefix("broker://").rstrip("/") + "\n")


def online(api: httpx.Client, group_id: int) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = api.get(f"/groups/{group_id}").json()["online"]
    return found


def add_job(api: httpx.Client, group_id: int, handler: str, route: str = "ROUND") -> int:
    made = api.post("/jobs", json={"job_group": group_id, "job_desc": handler, "executor_handler": handler,
                                   "schedule_type": "NONE", "executor_route_strategy": route})
    assert made.status_code == 201, made.text
    job_id: int = made.json()["id"]
    return job_id


def trigger(api: httpx.Client, job_id: int, param: str) -> dict[str, Any]:
    fired = api.post(f"/jobs/{job_id}/trigger", json={"executor_param": param})
    assert fired.status_code == 200, fired.text
    body: dict[str, Any] = fired.json()
    return body


def run_of(api: httpx.Client, log_id: int) -> dict[str, Any]:
    run: dict[str, Any] = api.get(f"/runs/{log_id}").json()
    return run


def wait_result(api: httpx.Client, log_id: int, limit_s: float = 60) -> dict[str, Any]:
    wait_until(lambda: run_of(api, log_id)["handle_code"] != 0, f"the result of run {log_id}", limit_s)
    return run_of(api, log_id)


def ended(run: dict[str, Any]) -> bool:
    return bool(run["handle_code"] != 0 or run["trigger_code"] == 500)


def rabbitmqctl(*args: str) -> str:
    tool = shutil.which("rabbitmqctl")
    if tool is None:
        pytest.fail("rabbitmqctl is needed to restart the broker (run as root)", pytrace=False)
    done = subprocess.run([tool, *args], capture_output=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr.decode()
    return done.stdout.decode()


def unacked(queue: str) -> int:
    """The queue's deliveries not acknowledged yet, as the broker counts them."""
    for line in rabbitmqctl("list_queues", "-q", "name", "messages_unacknowledged").splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[0] == queue:
            return int(parts[1])
    return 0


def received_runs(log_path: Path) -> list[str]:
    path = log_path / "received-runs.txt"
    return [line.split()[0] for line in path.read_text().splitlines()] if path.exists() else []


def test_runs_logs_and_kills_through_the_broker(tmp_path: Path) -> None:
    executors: list[subprocess.Popen[bytes]] = []
    logs: dict[str, Path] = {}  # broker address -> its executor's log path
    with broker_group(tmp_path) as (url, app, admin_url, api, group_id):
        try:
            for i in range(2):
                proc, address = start_broker_executor(admin_url, app, url, tmp_path / f"logs{i}")
                executors.append(proc)
                _remember(tmp_path, address)
                logs[address] = tmp_path / f"logs{i}"
            wait_until(lambda: len(online(api, group_id)) == 2, "both broker executors' registration")
            assert {e["dispatch"] for e in online(api, group_id)} == {"broker"}

            hello = add_job(api, group_id, "hello")
            fired = [trigger(api, hello, f"run {i}") for i in range(6)]
            assert all(f["trigger_code"] == 200 for f in fired), fired
            for f in fired:
                assert wait_result(api, f["log_ids"][0])["handle_code"] == 200
            # The log is read wherever the run was taken (over the executors' polls).
            log_id = fired[0]["log_ids"][0]
            text = api.get(f"/runs/{log_id}/log").json()["log_content"]
            assert "hello from jobring, params=run 0" in text

            # A strategy that chooses one executor: its runs run there (its own queue), not
            # wherever a slot is free.
            for route in ("CONSISTENT_HASH", "LAST"):
                pinned = add_job(api, group_id, "hello", route=route)
                ids = [trigger(api, pinned, f"pinned {i}")["log_ids"][0] for i in range(6)]
                assert all(wait_result(api, i)["handle_code"] == 200 for i in ids)
                (chosen,) = {run_of(api, i)["executor_address"] for i in ids}
                for address, path in logs.items():
                    taken = set(received_runs(path)) & {str(i) for i in ids}
                    assert len(taken) == (6 if address == chosen else 0), (route, address, chosen)

            slow = add_job(api, group_id, "slow")
            (slow_id,) = trigger(api, slow, "60")["log_ids"]
            wait_until(lambda: "sleeping" in api.get(f"/runs/{slow_id}/log").json()["log_content"],
                       "the slow run")
            killed = api.post(f"/runs/{slow_id}/kill")
            assert killed.status_code == 200 and killed.json()["killed"] is True, killed.text
            ended = wait_result(api, slow_id)
            assert ended["handle_code"] == 500 and "kill" in (ended["handle_msg"] or "")
        finally:
            for proc in executors:
                stop_process(proc)


def test_an_executor_killed_with_an_unacknowledged_run_leaves_it_to_another(tmp_path: Path) -> None:
    executors: list[subprocess.Popen[bytes]] = []
    with broker_group(tmp_path) as (url, app, admin_url, api, group_id):
        try:
            # One slot: the first run holds it, the second waits here unacknowledged.
            first, address = start_broker_executor(admin_url, app, url, tmp_path / "first", slots=1)
            executors.append(first)
            _remember(tmp_path, address)
            wait_until(lambda: len(online(api, group_id)) == 1, "the first executor's registration")
            slow = add_job(api, group_id, "slow")
            (held,) = trigger(api, slow, "60")["log_ids"]
            wait_until(lambda: "sleeping" in api.get(f"/runs/{held}/log").json()["log_content"],
                       "the held run")
            (waiting,) = trigger(api, slow, "0.2")["log_ids"]
            wait_until(lambda: unacked(group_queue(app)) == 1, "the second run delivered, unacknowledged")
            assert run_of(api, waiting)["trigger_code"] == 200

            first.send_signal(signal.SIGKILL)
            first.wait(10)
            second, address = start_broker_executor(admin_url, app, url, tmp_path / "second")
            executors.append(second)
            _remember(tmp_path, address)
            run = wait_result(api, waiting)
            assert run["handle_code"] == 200, run
            # It ran there once; the first executor never accepted it, and the run it had
            # accepted (and acknowledged) is not delivered again.
            assert received_runs(tmp_path / "second") == [str(waiting)]
            assert received_runs(tmp_path / "first") == [str(held)]
            assert run_of(api, held)["handle_code"] == 0
        finally:
            for proc in executors:
                stop_process(proc)


@pytest.mark.timing
def test_a_broker_restart_loses_no_run(tmp_path: Path) -> None:
    executors: list[subprocess.Popen[bytes]] = []
    with broker_group(tmp_path) as (url, app, admin_url, api, group_id):
        try:
            for i in range(2):
                proc, address = start_broker_executor(admin_url, app, url, tmp_path / f"logs{i}")
                executors.append(proc)
                _remember(tmp_path, address)
            wait_until(lambda: len(online(api, group_id)) == 2, "both broker executors' registration")
            hello = add_job(api, group_id, "hello")
            before = [trigger(api, hello, "before")["log_ids"][0] for _ in range(3)]

            rabbitmqctl("stop_app")
            fired: list[dict[str, Any]] = []
            try:
                # Fired while the broker is down: the admin's publish waits for the reconnect.
                threads = [threading.Thread(target=lambda: fired.append(trigger(api, hello, "during")))
                           for _ in range(3)]
                for thread in threads:
                    thread.start()
            finally:
                rabbitmqctl("start_app")
            for thread in threads:
                thread.join(30)
            after = [trigger(api, hello, "after")["log_ids"][0] for _ in range(3)]

            during = [f["log_ids"][0] for f in fired]
            assert len(during) == 3
            # Every run ends: delivered (after the reconnect) and run, or its trigger recorded
            # as failed (retries apply) - never left without an outcome.
            for log_id in before + during + after:
                wait_until(lambda i=log_id: ended(run_of(api, i)), f"the outcome of run {log_id}")
                run = run_of(api, log_id)
                assert run["handle_code"] == 200 or run["trigger_code"] == 500, run
            assert all(run_of(api, i)["handle_code"] == 200 for i in before + after)
            # With a restart of about a second, the runs fired during it were delivered.
            runs = [run_of(api, i) for i in during]
            assert all(r["handle_code"] == 200 for r in runs), [(r["trigger_msg"], r["handle_msg"])
                                                               for r in runs]
        finally:
            for proc in executors:
                stop_process(proc)
