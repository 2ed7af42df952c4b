"""`jobring run` / `jobring admin` as processes: health, clean stop on SIGINT/SIGTERM, refusals."""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path

import httpx
import pytest

from tests.e2e.admin_nodes import kill, start_admin, wait_healthy

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(180)]


async def test_run_serves_health_and_stops_cleanly_on_ctrl_c(tmp_path: Path) -> None:
    url = f"sqlite+aiosqlite:///{tmp_path / 'run.db'}"
    node = await start_admin(url, "runner", tmp_path)
    try:
        body = await wait_healthy(node)
        assert body["status"] == "ok" and body["node"] == "runner"
        async with httpx.AsyncClient() as client:
            docs = await client.get(node.base_url + "/api/v1/openapi.json")
        assert docs.status_code == 200
        node.proc.send_signal(signal.SIGINT)
        assert await asyncio.wait_for(node.proc.wait(), 30) == 0
    finally:
        await kill(node)
    log = node.log_text()
    assert "generated password" not in log  # a password was configured
    assert "admin node runner stopped" in log


async def test_no_upgrade_on_an_empty_database_fails_to_start(tmp_path: Path) -> None:
    url = f"sqlite+aiosqlite:///{tmp_path / 'empty.db'}"
    with pytest.raises(AssertionError, match="exited 1") as failure:
        await start_admin(url, "no-upgrade", tmp_path, "--no-upgrade")
    assert "run `jobring db upgrade`" in str(failure.value)
    assert "Traceback" not in str(failure.value)
