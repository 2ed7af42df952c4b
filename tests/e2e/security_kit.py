"""Helpers for the end-to-end security tests: a logged-in API client of a real admin process,
a demo executor process, and polling on API state."""

from __future__ import annotations

import asyncio
import os
import re
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, TypeVar

import httpx

from tests.e2e.admin_nodes import TOKEN, AdminNode

ADMIN_PASSWORD = "e2e-password-1234"  # what start_admin configures
T = TypeVar("T")


async def login(node: AdminNode, username: str = "admin", password: str = ADMIN_PASSWORD,
                **client_args: Any) -> httpx.AsyncClient:
    """A client with a session cookie and the CSRF header set; raises unless the login worked."""
    http = httpx.AsyncClient(base_url=node.base_url + "/api/v1", timeout=30, **client_args)
    answer = await http.post("/auth/login", json={"username": username, "password": password})
    if answer.status_code != 200:
        await http.aclose()
        raise AssertionError(f"login of {username} failed: {answer.status_code} {answer.text}")
    http.headers["X-CSRF-Token"] = answer.json()["csrf_token"]
    return http


@asynccontextmanager
async def logged_in(node: AdminNode, username: str = "admin", password: str = ADMIN_PASSWORD,
                    **client_args: Any) -> AsyncIterator[httpx.AsyncClient]:
    http = await login(node, username, password, **client_args)
    try:
        yield http
    finally:
        await http.aclose()


async def eventually(check: Callable[[], Awaitable[T | None]], what: str, limit_s: float = 30.0) -> T:
    """Poll ``check`` until it returns something; fail naming ``what`` after ``limit_s``."""
    deadline = time.monotonic() + limit_s
    while True:
        value = await check()
        if value is not None:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.1)


@asynccontextmanager
async def demo_executor(node: AdminNode, log_path: Path) -> AsyncIterator[str]:
    """The demo executor (handlers hello, fail, ...) as a process registered with ``node``;
    yields its address."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("JOBRING_")}
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "jobring.demo", "--host", "127.0.0.1", "--port", "0",
        "--admin", node.base_url + "/xxl-job-admin/", "--token", TOKEN, "--log-path", str(log_path),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL, env=env,
    )
    try:
        assert proc.stdout is not None
        line = ""
        for _ in range(50):
            line = (await asyncio.wait_for(proc.stdout.readline(), 60)).decode()
            match = re.search(r"listening on 127\.0\.0\.1:(\d+)", line)
            if match or not line:
                break
        assert match, line
        yield f"http://127.0.0.1:{match.group(1)}/"
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
