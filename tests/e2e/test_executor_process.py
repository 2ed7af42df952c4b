"""The demo executor as a real process (`jobring executor jobring.demo:executor`) with a fake admin."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from tests.executor.fake_admin import FakeAdmin

pytestmark = pytest.mark.e2e
TOKEN = "e2e-token"


def trigger(job_id: int, log_id: int, handler: str, params: str = "", **extra: object) -> dict[str, object]:
    return {"jobId": job_id, "executorHandler": handler, "executorParams": params, "logId": log_id,
            "logDateTime": 1795350973184, "executorBlockStrategy": "SERIAL_EXECUTION",
            "broadcastIndex": 0, "broadcastTotal": 1, **extra}


@pytest.fixture
async def admin() -> AsyncIterator[FakeAdmin]:
    fake = FakeAdmin()
    await fake.start()
    try:
        yield fake
    finally:
        await fake.stop()


async def start_demo(admin: FakeAdmin, log_path: Path) -> tuple[asyncio.subprocess.Process, int]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("JOBRING_")}
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "jobring.demo", "--host", "127.0.0.1", "--port", "0",
        "--admin", admin.base_url, "--token", TOKEN, "--log-path", str(log_path), "--beat-interval", "30",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=env,
    )
    assert proc.stdout is not None
    line = (await asyncio.wait_for(proc.stdout.readline(), 20)).decode()
    match = re.search(r"listening on 127\.0\.0\.1:(\d+), registering as (\S+)", line)
    assert match, line
    return proc, int(match.group(1))


async def stop(proc: asyncio.subprocess.Process) -> None:
    if proc.returncode is None:
        proc.kill()
        await proc.wait()


async def test_demo_process_runs_jobs_reports_results_and_leaves_on_ctrl_c(
    admin: FakeAdmin, tmp_path: Path
) -> None:
    proc, port = await start_demo(admin, tmp_path)
    try:
        await admin.wait_for(lambda a: any(p.endswith("api/registry") for p in a.paths()))
        registered = admin.requests[0].json()
        assert registered["registryKey"] == "jobring-demo"
        assert registered["registryValue"].endswith(f":{port}/")
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}",
                                     headers={"XXL-JOB-ACCESS-TOKEN": TOKEN}, timeout=10) as client:
            assert (await client.post("/beat", headers={"XXL-JOB-ACCESS-TOKEN": "wrong"})).json() == {
                "code": 500, "msg": "The access token is wrong."}
            for body in (trigger(1, 11, "hello", "p=1"), trigger(2, 12, "fail"),
                         trigger(3, 13, "shard", broadcastIndex=1, broadcastTotal=4),
                         trigger(4, 14, "slow", "30")):
                assert (await client.post("/run", json=body)).json() == {"code": 200}
            await admin.wait_for(lambda a: {c["logId"] for c in a.callbacks()} >= {11, 12, 13})
            assert (await client.post("/idleBeat", json={"jobId": 4})).json()["code"] == 500
            assert (await client.post("/kill", json={"jobId": 4})).json() == {"code": 200}
            await admin.wait_for(lambda a: 14 in {c["logId"] for c in a.callbacks()})
            got = {c["logId"]: c for c in admin.callbacks()}
            assert got[11]["handleCode"] == 200 and "handleMsg" not in got[11]
            assert (got[12]["handleCode"], got[12]["handleMsg"]) == (500, "failed on purpose")
            assert (got[14]["handleCode"], got[14]["handleMsg"]) == (
                500, "scheduling center kill job. [job running, killed]")
            hello_log = (await client.post("/log", json={"logDateTim": 1795350973184, "logId": 11,
                                                         "fromLineNum": 1})).json()["content"]
            assert "params=p=1" in hello_log["logContent"]
            shard_log = (await client.post("/log", json={"logDateTim": 1795350973184, "logId": 13,
                                                         "fromLineNum": 1})).json()["content"]
            assert "shard 1 of 4" in shard_log["logContent"]
        proc.send_signal(signal.SIGINT)
        assert await asyncio.wait_for(proc.wait(), 20) == 0
        assert admin.paths()[-1] == "/xxl-job-admin/api/registryRemove"
        assert len(admin.callbacks()) == 4
    finally:
        await stop(proc)
