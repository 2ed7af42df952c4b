"""A real admin process and a real demo executor process for the end-to-end attacks on the
HTTP edge, and raw HTTP over sockets (malformed, oversized and trickling requests)."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import orjson

from tests.e2e.admin_nodes import free_port

TOKEN = "e2e-edge-access-token"
PASSWORD = "e2e-edge-admin-password"


@dataclass
class Stack:
    admin_port: int
    executor_port: int
    admin: subprocess.Popen[bytes]
    executor: subprocess.Popen[bytes]
    api: httpx.Client  # the management API with an admin's bearer token
    group_id: int
    job_id: int


def wait_until(check: Callable[[], bool], what: str, limit_s: float = 60.0) -> None:
    deadline = time.monotonic() + limit_s
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)  # polling another process's state: there is no event to wait on


def healthy(port: int) -> bool:
    try:
        return httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def stop_process(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    if proc.stdout is not None:
        proc.stdout.close()


def start_demo_executor(admin_url: str, log_path: Path, env: dict[str, str]
                        ) -> tuple[subprocess.Popen[bytes], int]:
    """``python -m jobring.demo`` on a free loopback port with the token ``TOKEN``; returns the
    process (stop it with :func:`stop_process`) and its port once it listens."""
    executor = subprocess.Popen(
        [sys.executable, "-m", "jobring.demo", "--host", "127.0.0.1", "--port", "0", "--admin", admin_url,
         "--token", TOKEN, "--log-path", str(log_path), "--beat-interval", "30"],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env={**env, "JOBRING_EXECUTOR_IP": "127.0.0.1"},
    )
    assert executor.stdout is not None
    line = executor.stdout.readline().decode()
    match = re.search(r"listening on 127\.0\.0\.1:(\d+)", line)
    if match is None:
        stop_process(executor)
        raise AssertionError(f"the demo executor did not start: {line!r}")
    return executor, int(match.group(1))


@contextmanager
def running_stack(work: Path, *, admin_env: dict[str, str] | None = None,
                  executor_env: dict[str, str] | None = None) -> Iterator[Stack]:
    """A real admin (SQLite, global token ``TOKEN``) and the demo executor registered with it,
    with a job of handler ``hello``; extra environment variables for each process."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("JOBRING_")}
    admin_port = free_port()
    admin_env = {**env, "JOBRING_ACCESS_TOKEN": TOKEN, "JOBRING_ADMIN_PASSWORD": PASSWORD,
                 **(admin_env or {})}
    admin_log = (work / "admin.log").open("wb")
    admin = subprocess.Popen(
        [sys.executable, "-m", "jobring.cli", "admin", "--database-url", f"sqlite:///{work / 'edge.db'}",
         "--port", str(admin_port)],
        stdout=admin_log, stderr=subprocess.STDOUT, env=admin_env, cwd=work,
    )
    executor: subprocess.Popen[bytes] | None = None
    try:
        wait_until(lambda: healthy(admin_port) or admin.poll() is not None, "the admin", 90)
        assert admin.poll() is None, (work / "admin.log").read_text()
        with httpx.Client(base_url=f"http://127.0.0.1:{admin_port}/api/v1", timeout=30) as session:
            login = session.post("/auth/login", json={"username": "admin", "password": PASSWORD})
            assert login.status_code == 200, login.text
            made = session.post("/tokens", json={"name": "edge"},
                                headers={"X-CSRF-Token": login.json()["csrf_token"]})
            assert made.status_code == 201, made.text
            api_token = made.json()["token"]
        with httpx.Client(base_url=f"http://127.0.0.1:{admin_port}/api/v1", timeout=30,
                          headers={"Authorization": f"Bearer {api_token}"}) as api:
            # The group exists before the executor registers: its address is usable at once.
            group = api.post("/groups", json={"app_name": "jobring-demo", "title": "demo"}).json()
            job = api.post("/jobs", json={"job_group": group["id"], "job_desc": "hello",
                                          "executor_handler": "hello", "schedule_type": "NONE"}).json()
            admin_url = f"http://127.0.0.1:{admin_port}/xxl-job-admin/"
            executor, executor_port = start_demo_executor(admin_url, work / "logs",
                                                          {**env, **(executor_env or {})})
            wait_until(lambda: bool(api.get(f"/groups/{group['id']}").json()["addresses"]),
                       "the executor's registration")
            yield Stack(admin_port, executor_port, admin, executor, api, group["id"], job["id"])
    finally:
        if executor is not None:
            stop_process(executor)
        stop_process(admin)
        admin_log.close()


# -- raw HTTP ----------------------------------------------------------------------------------


def exchange(port: int, data: bytes, *, pause_s: float = 0.0, chunk: int = 1 << 16,
             timeout_s: float = 20.0) -> bytes:
    """Write ``data`` (in pieces of ``chunk`` bytes, ``pause_s`` apart), then read the answer
    until the server closes or ``timeout_s``; a write the server refused mid-way stops writing."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout_s) as sock:
        try:
            for start in range(0, len(data), chunk):
                sock.sendall(data[start:start + chunk])
                if pause_s:
                    time.sleep(pause_s)  # the trickle is the attack
        except OSError:
            pass  # the server answered and stopped reading: read what it said
        received = b""
        try:
            while True:
                part = sock.recv(65536)
                if not part:
                    break
                received += part
                if _complete(received):
                    break
        except OSError:
            pass
        return received


def _complete(raw: bytes) -> bool:
    head, sep, body = raw.partition(b"\r\n\r\n")
    if not sep:
        return False
    match = re.search(rb"(?im)^content-length:\s*(\d+)", head)
    return match is not None and len(body) >= int(match.group(1))


def parse(raw: bytes) -> tuple[int, dict[str, str], Any]:
    head, _, body = raw.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    assert lines[0].startswith("HTTP/1.1 "), raw[:200]
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    return int(lines[0].split()[1]), headers, orjson.loads(body) if body else None


def request(method: str, path: str, body: bytes = b"", headers: dict[str, str] | None = None) -> bytes:
    lines = [f"{method} {path} HTTP/1.1", "Host: 127.0.0.1", "Connection: close",
             f"Content-Length: {len(body)}", *(f"{k}: {v}" for k, v in (headers or {}).items())]
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


def executor_call(stack: Stack, path: str, payload: dict[str, Any]) -> dict[str, Any]:
    answer: dict[str, Any] = httpx.post(f"http://127.0.0.1:{stack.executor_port}{path}", json=payload,
                                        headers={"XXL-JOB-ACCESS-TOKEN": TOKEN}, timeout=10).json()
    return answer


def still_serving(stack: Stack) -> None:
    assert httpx.get(f"http://127.0.0.1:{stack.admin_port}/health", timeout=10).status_code == 200
    assert executor_call(stack, "/beat", {}) == {"code": 200}


def run_hello(stack: Stack) -> dict[str, Any]:
    """Trigger the job through the admin and wait for the executor's result to reach it."""
    fired = stack.api.post(f"/jobs/{stack.job_id}/trigger", json={"executor_param": "edge"})
    assert fired.status_code == 200, fired.text
    (log_id,) = fired.json()["log_ids"]
    assert fired.json()["trigger_code"] == 200, fired.text
    wait_until(lambda: stack.api.get(f"/runs/{log_id}").json()["handle_code"] != 0,
               f"the result of run {log_id}: {stack.api.get(f'/runs/{log_id}').text}")
    run: dict[str, Any] = stack.api.get(f"/runs/{log_id}").json()
    return run
