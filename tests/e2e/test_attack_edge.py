"""Attacks on the HTTP edge of a real admin process and a real executor process (issue #9
items 6, 7, 10, 11): each test performs the attack and passes only because it fails.

One admin (`jobring admin`, SQLite) and one demo executor (`python -m jobring.demo`)
registered with it serve the whole module; malformed, oversized and trickling requests are
written on raw sockets.
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import orjson
import psutil
import pytest

from jobring.protocol.edge import CONTENT_SECURITY_POLICY
from tests.e2e.admin_nodes import free_port

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(180)]

TOKEN = "e2e-edge-access-token"
PASSWORD = "e2e-edge-admin-password"
HEAD_TIMEOUT_S = 1.5  # both servers' header deadline in these tests (default 10 s)
LOG_TIME = 1795350973184


@dataclass
class Stack:
    admin_port: int
    executor_port: int
    admin: subprocess.Popen[bytes]
    executor: subprocess.Popen[bytes]
    api: httpx.Client  # the management API with an admin's bearer token
    group_id: int
    job_id: int


def _wait_until(check: Callable[[], bool], what: str, limit_s: float = 60.0) -> None:
    deadline = time.monotonic() + limit_s
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)  # polling another process's state: there is no event to wait on


def _healthy(port: int) -> bool:
    try:
        return httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    if proc.stdout is not None:
        proc.stdout.close()


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    work = tmp_path_factory.mktemp("edge")
    env = {k: v for k, v in os.environ.items() if not k.startswith("JOBRING_")}
    admin_port = free_port()
    admin_env = {**env, "JOBRING_ACCESS_TOKEN": TOKEN, "JOBRING_ADMIN_PASSWORD": PASSWORD,
                 "JOBRING_HEADER_TIMEOUT": str(HEAD_TIMEOUT_S)}
    admin_log = (work / "admin.log").open("wb")
    admin = subprocess.Popen(
        [sys.executable, "-m", "jobring.cli", "admin", "--database-url", f"sqlite:///{work / 'edge.db'}",
         "--port", str(admin_port)],
        stdout=admin_log, stderr=subprocess.STDOUT, env=admin_env, cwd=work,
    )
    executor: subprocess.Popen[bytes] | None = None
    try:
        _wait_until(lambda: _healthy(admin_port) or admin.poll() is not None, "the admin", 90)
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
            executor = subprocess.Popen(
                [sys.executable, "-m", "jobring.demo", "--host", "127.0.0.1", "--port", "0",
                 "--admin", f"http://127.0.0.1:{admin_port}/xxl-job-admin/", "--token", TOKEN,
                 "--log-path", str(work / "logs"), "--beat-interval", "30"],
                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                env={**env, "JOBRING_EXECUTOR_HEADER_TIMEOUT_S": str(HEAD_TIMEOUT_S),
                     "JOBRING_EXECUTOR_IP": "127.0.0.1"},
            )
            assert executor.stdout is not None
            line = executor.stdout.readline().decode()
            match = re.search(r"listening on 127\.0\.0\.1:(\d+)", line)
            assert match, line
            _wait_until(lambda: bool(api.get(f"/groups/{group['id']}").json()["addresses"]),
                        "the executor's registration")
            yield Stack(admin_port, int(match.group(1)), admin, executor, api, group["id"], job["id"])
    finally:
        if executor is not None:
            _stop(executor)
        _stop(admin)
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
    _wait_until(lambda: stack.api.get(f"/runs/{log_id}").json()["handle_code"] != 0,
                f"the result of run {log_id}: {stack.api.get(f'/runs/{log_id}').text}")
    run: dict[str, Any] = stack.api.get(f"/runs/{log_id}").json()
    return run


# -- item 6: request line, headers, trickling -------------------------------------------------


@pytest.mark.parametrize("server", ["admin", "executor"])
def test_an_over_long_request_line_is_answered_414(stack: Stack, server: str) -> None:
    port = stack.admin_port if server == "admin" else stack.executor_port
    status, headers, _ = parse(exchange(port, request("POST", "/beat?" + "a" * (1 << 20))))
    assert status == 414
    assert headers["connection"] == "close"
    still_serving(stack)


@pytest.mark.parametrize("server", ["admin", "executor"])
def test_a_64_mib_header_is_answered_431_without_buffering_it(stack: Stack, server: str) -> None:
    port, proc = (stack.admin_port, stack.admin) if server == "admin" else (stack.executor_port,
                                                                            stack.executor)
    rss_before = psutil.Process(proc.pid).memory_info().rss
    raw = exchange(port, b"POST /beat HTTP/1.1\r\nHost: x\r\nX-Fill: " + b"a" * (64 << 20) + b"\r\n\r\n")
    status, _, body = parse(raw)
    assert status == 431
    assert body is not None
    # Many small headers adding up past the limit are refused the same way.
    many = b"".join(b"X-%d: %s\r\n" % (n, b"v" * 100) for n in range(1000))
    assert parse(exchange(port, b"GET /health HTTP/1.1\r\nHost: x\r\n" + many + b"\r\n"))[0] == 431
    assert psutil.Process(proc.pid).memory_info().rss - rss_before < 20 << 20
    still_serving(stack)


@pytest.mark.parametrize("server", ["admin", "executor"])
def test_a_trickled_head_is_cut_off_with_408(stack: Stack, server: str) -> None:
    port = stack.admin_port if server == "admin" else stack.executor_port
    head = request("POST", "/beat", headers={"X-Pad": "p" * 40})
    started = time.monotonic()
    # One byte every 50 ms: the head would take ~9 s; the deadline is HEAD_TIMEOUT_S.
    status, _, _ = parse(exchange(port, head, pause_s=0.05, chunk=1))
    assert status == 408
    assert time.monotonic() - started < HEAD_TIMEOUT_S + 5
    still_serving(stack)


def test_a_head_sent_byte_by_byte_in_time_is_served(stack: Stack) -> None:
    body = b"{}"
    raw = request("POST", "/beat", body, {"XXL-JOB-ACCESS-TOKEN": TOKEN})
    status, _, answer = parse(exchange(stack.executor_port, raw, chunk=1))
    assert (status, answer) == (200, {"code": 200})


def test_a_connection_that_never_speaks_is_closed(stack: Stack) -> None:
    for port in (stack.admin_port, stack.executor_port):
        with socket.create_connection(("127.0.0.1", port), timeout=HEAD_TIMEOUT_S + 10) as sock:
            assert sock.recv(100) == b""  # closed by the server after the head deadline


def test_an_over_large_executor_body_is_refused_413_at_once(stack: Stack) -> None:
    size = 9 << 20
    raw = (b"POST /run HTTP/1.1\r\nHost: x\r\nXXL-JOB-ACCESS-TOKEN: " + TOKEN.encode()
           + b"\r\nContent-Length: %d\r\n\r\n" % size)
    status, _, answer = parse(exchange(stack.executor_port, raw))  # refused before any body byte
    assert status == 413
    assert answer["code"] == 500 and "larger than" in answer["msg"]
    still_serving(stack)


# -- item 7: integers past 64 bits -------------------------------------------------------------


def test_integers_past_64_bits_are_refused_at_the_edge_and_results_keep_flowing(stack: Stack) -> None:
    base = {"jobId": stack.job_id, "executorHandler": "hello", "executorParams": "", "logId": 2**64,
            "logDateTime": LOG_TIME, "executorBlockStrategy": "SERIAL_EXECUTION",
            "glueType": "BEAN", "broadcastIndex": 0, "broadcastTotal": 1}
    for field, value in (("logId", 2**64), ("logId", 10**40), ("jobId", 2**40), ("logDateTime", -(2**70))):
        answer = executor_call(stack, "/run", {**base, "logId": 7, field: value})
        assert answer["code"] == 500 and field in answer["msg"], answer
    answer = executor_call(stack, "/log", {"logDateTim": LOG_TIME, "logId": 1, "fromLineNum": 10**30})
    assert answer["code"] == 500 and "fromLineNum" in answer["msg"]
    # The admin's callback endpoint: a clear refusal naming the field, not a 500.
    callback = httpx.post(
        f"http://127.0.0.1:{stack.admin_port}/xxl-job-admin/api/callback",
        content=b'[{"logId": 18446744073709551616, "logDateTim": 1, "handleCode": 200}]',
        headers={"XXL-JOB-ACCESS-TOKEN": TOKEN, "Content-Type": "application/json"}, timeout=10,
    )
    assert callback.status_code == 400
    assert callback.json()["code"] == 500 and "logId" in callback.json()["msg"]
    # The executor's callback sender is alive: a real run's result reaches the admin.
    run = run_hello(stack)
    assert run["handle_code"] == 200, run


# -- item 10: security headers, offline docs ---------------------------------------------------


def _assert_security_headers(headers: httpx.Headers | dict[str, str], where: str) -> None:
    assert headers.get("content-security-policy") == CONTENT_SECURITY_POLICY, where
    assert headers.get("x-content-type-options") == "nosniff", where
    assert headers.get("x-frame-options") == "DENY", where
    assert headers.get("referrer-policy") == "no-referrer", where
    assert headers.get("cross-origin-opener-policy") == "same-origin", where


def test_every_answer_carries_the_security_headers(stack: Stack) -> None:
    admin = f"http://127.0.0.1:{stack.admin_port}"
    answers = {
        "health": httpx.get(f"{admin}/health"),
        "api": stack.api.get("/jobs"),
        "api 401": httpx.get(f"{admin}/api/v1/jobs"),
        "api 404": httpx.get(f"{admin}/api/v1/nothing-here"),
        "docs": httpx.get(f"{admin}/api/v1/docs"),
        "openapi": httpx.get(f"{admin}/api/v1/openapi.json"),
        "unknown path": httpx.get(f"{admin}/no/such/page"),
        "executor api": httpx.post(f"{admin}/xxl-job-admin/api/registry", json={}),
        "executor api GET": httpx.get(f"{admin}/api/registry"),
        "executor beat": httpx.post(f"http://127.0.0.1:{stack.executor_port}/beat",
                                    headers={"XXL-JOB-ACCESS-TOKEN": TOKEN}),
        "executor bad token": httpx.post(f"http://127.0.0.1:{stack.executor_port}/run"),
    }
    for where, response in answers.items():
        _assert_security_headers(response.headers, where)
    for port in (stack.admin_port, stack.executor_port):
        for raw in (b"\x00garbage\r\n\r\n", request("GET", "/" + "a" * 20000)):
            _assert_security_headers(parse(exchange(port, raw))[1], f"raw error on {port}")


def test_the_docs_page_and_its_assets_come_from_the_admin_only(stack: Stack) -> None:
    admin = f"http://127.0.0.1:{stack.admin_port}/api/v1/"
    page = httpx.get(admin + "docs")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    html = page.text
    assert "<style" not in html and "style=" not in html  # no inline style
    assert re.findall(r"<script(?![^>]*\bsrc=)[^>]*>", html) == []  # no inline script
    refs = re.findall(r'(?:src|href|data-openapi-url)="([^"]+)"', html)
    assert refs and all("//" not in ref and ":" not in ref for ref in refs), refs  # same origin only
    for ref in refs:
        asset = httpx.get(admin + ref)
        assert asset.status_code == 200, ref
        assert asset.content, ref
    assert httpx.get(admin + "docs/static/swagger-ui-bundle.js").headers["content-type"].startswith(
        "text/javascript")
    assert "swagger" in httpx.get(admin + "docs/static/LICENSE").text.lower() or \
        "apache" in httpx.get(admin + "docs/static/LICENSE").text.lower()


# -- item 11: group-limited dashboard, JSON errors, registration values -------------------------


def test_a_group_limited_user_sees_only_its_groups_on_the_dashboard(stack: Stack) -> None:
    assert run_hello(stack)["handle_code"] == 200  # at least one run today in the demo group
    other = stack.api.post("/groups", json={"app_name": "edge-other", "title": "other"}).json()
    password = "viewer-password-for-edge"
    made = stack.api.post("/users", json={"username": "edge-viewer", "password": password, "role": "viewer",
                                          "group_ids": [other["id"]], "must_change_password": False})
    assert made.status_code == 201, made.text
    admin_view = stack.api.get("/dashboard").json()
    assert admin_view["runs_today"] >= 1 and admin_view["executor_count"] >= 1
    with httpx.Client(base_url=f"http://127.0.0.1:{stack.admin_port}/api/v1", timeout=30) as viewer:
        assert viewer.post("/auth/login", json={"username": "edge-viewer", "password": password}).is_success
        mine = viewer.get("/dashboard").json()
    assert (mine["job_count"], mine["executor_count"], mine["runs_today"]) == (0, 0, 0)
    assert all(day["success"] == day["fail"] == day["running"] == 0 for day in mine["chart"])


def test_errors_answer_the_json_error_body(stack: Stack) -> None:
    admin = f"http://127.0.0.1:{stack.admin_port}"
    for method, url, status in (
        ("GET", f"{admin}/api/v1", 404),
        ("POST", f"{admin}/api/v1", 404),
        ("GET", f"{admin}/api/v1/no-such-resource", 404),
        ("PUT", f"{admin}/api/v1/jobs", 405),
        ("GET", f"{admin}/nothing/here", 404),
        ("GET", f"{admin}/api/v1/docs/static/missing.js", 404),
    ):
        response = httpx.request(method, url, headers={"Authorization": stack.api.headers["Authorization"]})
        assert response.status_code == status, (method, url)
        assert response.headers["content-type"] == "application/json", (method, url)
        assert set(response.json()) == {"error", "field"}, (method, url)
    status, headers, body = parse(exchange(stack.admin_port, b"NOT HTTP AT ALL\r\n\r\n"))
    assert (status, headers["content-type"], set(body)) == (400, "application/json", {"error", "field"})


def test_registration_values_with_whitespace_or_control_characters_are_refused(stack: Stack) -> None:
    url = f"http://127.0.0.1:{stack.admin_port}/xxl-job-admin/api/registry"
    bad = [("jobring-demo", "http://127.0.0.1:1/ x"), ("jobring demo", "http://127.0.0.1:1/"),
           ("jobring-demo", "http://127.0.0.1:1/\n"), ("jobring-demo\x00", "http://127.0.0.1:1/"),
           ("jobring-demo", " http://127.0.0.1:1/"), ("jobring-demo", "http://127.0.0.1:1/\u200b"),
           ("x" * 256, "http://127.0.0.1:1/")]
    for key, value in bad:
        param = {"registryGroup": "EXECUTOR", "registryKey": key, "registryValue": value}
        answer = httpx.post(url, json=param, headers={"XXL-JOB-ACCESS-TOKEN": TOKEN}, timeout=10)
        assert answer.json() == {"code": 500, "msg": "Illegal Argument."}, (key, value)
    online = stack.api.get(f"/groups/{stack.group_id}").json()["online"]
    assert len(online) == 1 and online[0]["address"].endswith(f":{stack.executor_port}/"), online
