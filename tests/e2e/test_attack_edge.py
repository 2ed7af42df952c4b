"""Attacks on the HTTP edge of a real admin process and a real executor process (issue #9
items 6, 7, 10, 11): each test performs the attack and passes only because it fails.

One admin (`jobring admin`, SQLite) and one demo executor (`python -m jobring.demo`)
registered with it serve the whole module; malformed, oversized and trickling requests are
written on raw sockets.
"""

from __future__ import annotations

import re
import socket
import time
from collections.abc import Iterator

import httpx
import psutil
import pytest

from jobring.protocol.edge import CONTENT_SECURITY_POLICY
from tests.e2e.edge_kit import (
    TOKEN,
    Stack,
    exchange,
    executor_call,
    parse,
    request,
    run_hello,
    running_stack,
    still_serving,
)

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(180)]

HEAD_TIMEOUT_S = 1.5  # both servers' header deadline in these tests (default 10 s)
LOG_TIME = 1795350973184


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    with running_stack(tmp_path_factory.mktemp("edge"),
                       admin_env={"JOBRING_HEADER_TIMEOUT": str(HEAD_TIMEOUT_S)},
                       executor_env={"JOBRING_EXECUTOR_HEADER_TIMEOUT_S": str(HEAD_TIMEOUT_S)}) as running:
        yield running


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
