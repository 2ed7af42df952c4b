"""Issue #19 item 7(c) and the executor part of item 8, attacked end to end: a real admin
process and a real demo executor process (`python -m jobring.demo`). Each test performs the
attack and passes only because it fails.

- More than 1,030 idle connections held from nine loopback addresses (127.0.0.1-9, re-opened
  as the executor closes them) and 40 token-less ``POST /run`` with 8 MiB bodies at once: the
  admin's ``/run``, ``/log`` and ``/kill`` and fresh ``/beat`` connections with the token all
  get through, and the executor's memory stays bounded (the bodies are never read).
- ``GET /ready`` without the token tells booleans only, not the last error (admin URLs).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.e2e.admin_nodes import free_port
from tests.e2e.edge_kit import (
    TOKEN,
    Stack,
    executor_call,
    run_hello,
    running_stack,
    start_demo_executor,
    stop_process,
    wait_until,
)
from tests.e2e.flood_kit import IdleFlood, RssSampler, tokenless_runs, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]

IDLE_CONNECTIONS = 1_100
TOKENLESS_POSTS = 40
BODY_BYTES = 8 << 20
RSS_GROWTH_LIMIT_MB = 64  # 40 bodies read into memory would be 320 MB


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    with running_stack(tmp_path_factory.mktemp("flood")) as running:
        yield running


def _kill_a_running_run(stack: Stack) -> dict[str, Any]:
    job = stack.api.post("/jobs", json={"job_group": stack.group_id, "job_desc": "slow",
                                        "executor_handler": "slow", "schedule_type": "NONE"})
    assert job.status_code == 201, job.text
    fired = stack.api.post(f"/jobs/{job.json()['id']}/trigger", json={"executor_param": "120"})
    assert fired.status_code == 200 and fired.json()["trigger_code"] == 200, fired.text
    (log_id,) = fired.json()["run_ids"]
    killed = stack.api.post(f"/runs/{log_id}/kill")
    assert killed.status_code == 200, killed.text
    answer: dict[str, Any] = killed.json()
    return answer


def test_idle_connections_and_tokenless_bodies_do_not_keep_the_admin_out(stack: Stack) -> None:
    with RssSampler(stack.executor.pid) as rss, IdleFlood(stack.executor_port, IDLE_CONNECTIONS) as flood, \
            ThreadPoolExecutor(1) as background:
        wait_for(flood.held_at_full, f"{IDLE_CONNECTIONS} idle connections")
        posts = background.submit(tokenless_runs, stack.executor_port, TOKENLESS_POSTS, BODY_BYTES)
        # The admin's calls meanwhile: /run (and the result's callback), /log, /kill.
        for _ in range(3):
            run = run_hello(stack)
            assert run["handle_code"] == 200, run
        log = stack.api.get(f"/runs/{run['id']}/log")
        assert log.status_code == 200 and "hello from jobring" in log.json()["log_content"], log.text
        assert _kill_a_running_run(stack)["killed"] is True
        # New connections with the token, from the address the flood also uses most.
        for _ in range(20):
            assert executor_call(stack, "/beat", {}) == {"code": 200}
        answers = posts.result(timeout=240)
        assert flood.opened > IDLE_CONNECTIONS
    assert answers == [(200, {"code": 500, "msg": "The access token is wrong."})] * TOKENLESS_POSTS
    # The executor closed idle connections to stay within its budgets.
    assert flood.closed_by_server > IDLE_CONNECTIONS - 256
    assert rss.growth_mb < RSS_GROWTH_LIMIT_MB, f"{rss.growth_mb:.0f} MB"
    assert run_hello(stack)["handle_code"] == 200


def test_ready_without_the_token_tells_booleans_only(tmp_path: Path) -> None:
    dead_port = free_port()  # nothing listens there: the registry beat fails, naming the URL
    env = {k: v for k, v in os.environ.items() if not k.startswith("JOBRING_")}
    dead_admin = f"http://127.0.0.1:{dead_port}/xxl-job-admin/"
    executor, port = start_demo_executor(dead_admin, tmp_path / "logs", env)
    ready_url = f"http://127.0.0.1:{port}/ready"
    try:
        def failed_beat() -> bool:
            answer = httpx.get(ready_url, headers={"XXL-JOB-ACCESS-TOKEN": TOKEN}, timeout=10).json()
            return bool(answer["checks"]["admin_reachable"].get("error"))

        wait_until(failed_beat, "a failed registry beat")
        with_token = httpx.get(ready_url, headers={"XXL-JOB-ACCESS-TOKEN": TOKEN}, timeout=10)
        assert str(dead_port) in with_token.json()["checks"]["admin_reachable"]["error"]
        for headers in ({}, {"XXL-JOB-ACCESS-TOKEN": "wrong"}):
            answer = httpx.get(ready_url, headers=headers, timeout=10)
            assert answer.status_code == 503
            assert answer.json() == {"ready": False, "checks": {
                "started": {"ok": True}, "registered": {"ok": False}, "admin_reachable": {"ok": False}}}
            assert str(dead_port) not in answer.text
    finally:
        stop_process(executor)
