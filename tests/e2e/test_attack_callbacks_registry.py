"""Security issue #19, items 1.1, 1.2 and 7(a), attacked end to end: a real admin process,
group B's real executor process (with B's token), and an attacker holding group A's
executor token who talks to the admin's executor API directly. Each test passes only
because every attack fails.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from jobring.client import AsyncAdminClient
from jobring.core.enums import AlarmStatus
from tests.e2e.admin_nodes import ADMIN_PASSWORD, AdminNode, kill, start_admin, stop
from tests.e2e.test_attack_executor_token import _start_executor, _until

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]

EXECUTOR_MODULE = '''
from jobring import Executor, JobContext

executor = Executor(app_name="placeholder")


@executor.job("record")
def ok(ctx: JobContext) -> None:
    return None


@executor.job("boom")
def boom(ctx: JobContext) -> None:
    raise RuntimeError("boom on purpose")
'''
FORGED = "forged by A"
ATTACK_S = 8.0


@dataclass
class World:
    node: AdminNode
    admin: AsyncAdminClient
    group_b: int
    token_a: str
    b_address: str
    db: Path

    async def api(self, uri: str, body: Any, headers: dict[str, str] | None = None) -> httpx.Response:
        async with httpx.AsyncClient(base_url=self.node.base_url, timeout=30) as http:
            return await http.post(f"/xxl-job-admin/api/{uri}", json=body,
                                   headers={"XXL-JOB-ACCESS-TOKEN": self.token_a, **(headers or {})})

    def rows(self, sql: str, *args: Any) -> list[Any]:
        with sqlite3.connect(f"file:{self.db}?mode=ro", uri=True, timeout=30) as conn:
            return conn.execute(sql, args).fetchall()


@pytest.fixture
async def world(tmp_path: Path) -> AsyncIterator[World]:
    (tmp_path / "team_jobs.py").write_text(EXECUTOR_MODULE, encoding="utf-8")
    db = tmp_path / "admin.db"
    node = await start_admin(f"sqlite+aiosqlite:///{db}", "cbreg", tmp_path, env={"JOBRING_ACCESS_TOKEN": ""})
    admin = AsyncAdminClient(node.base_url, timeout=30)
    proc: asyncio.subprocess.Process | None = None
    try:
        await admin.login("admin", ADMIN_PASSWORD)
        group_a = (await admin.groups.create("probe-a", "Attacker A"))["id"]
        group_b = (await admin.groups.create("team-b", "Team B"))["id"]
        token_a = await admin.groups.access_token(group_a)
        token_b = await admin.groups.access_token(group_b)
        proc = await _start_executor(tmp_path, node.base_url, "team-b", token_b, tmp_path / "runs-b.txt")

        async def online() -> str | None:
            addresses = (await admin.groups.get(group_b))["addresses"]
            return str(addresses[0]) if addresses else None

        b_address = await _until(online, 60, "B's executor never registered")
        yield World(node, admin, group_b, token_a, b_address, db)
    finally:
        if proc is not None and proc.returncode is None:
            proc.terminate()
            try:
                await asyncio.wait_for(proc.wait(), 15)
            except TimeoutError:
                proc.kill()
                await proc.wait()
        await admin.aclose()
        if await stop(node) != 0:
            await kill(node)


async def test_a_token_cannot_report_b_s_runs_even_those_created_while_it_posts(world: World) -> None:
    """Item 1.1: A's token posts results for the next 29 run ids, in a loop, while B's jobs
    fire (a parent with a child job, and a failing job with a retry)."""
    child = (await world.admin.jobs.create({
        "job_group": world.group_b, "job_desc": "child", "executor_handler": "record"}))["id"]
    parent = (await world.admin.jobs.create({
        "job_group": world.group_b, "job_desc": "parent", "executor_handler": "record",
        "schedule_type": "FIX_RATE", "schedule_conf": "1", "child_job_ids": [child]}))["id"]
    failing = (await world.admin.jobs.create({
        "job_group": world.group_b, "job_desc": "failing", "executor_handler": "boom",
        "schedule_type": "FIX_RATE", "schedule_conf": "1", "executor_fail_retry_count": 1}))["id"]
    answers: list[tuple[int, int]] = []

    async def attacker(stop_at: float) -> None:
        loop = asyncio.get_running_loop()
        while loop.time() < stop_at:
            newest = world.rows("SELECT COALESCE(MAX(id), 0) FROM xxl_job_log")[0][0]
            forged = [{"logId": newest + k, "logDateTim": 0, "handleCode": 200, "handleMsg": FORGED}
                      for k in range(1, 30)]
            response = await world.api("callback", forged)
            answers.append((response.status_code, int(response.json()["code"])))

    for job in (parent, failing):
        await world.admin.jobs.start(job)
    stop_at = asyncio.get_running_loop().time() + ATTACK_S
    await asyncio.gather(attacker(stop_at), attacker(stop_at))
    for job in (parent, failing):
        await world.admin.jobs.stop(job)

    async def settled() -> bool | None:
        # Every dispatched run has its result, and every failed one was handled by the fail
        # monitor (retried, alarm decided: alarm_status left 0). Runs are judged by their
        # result below: an executor's result can be recorded before the dispatch's own.
        waiting = world.rows("SELECT COUNT(*) FROM xxl_job_log WHERE (trigger_code = 200 AND handle_code = 0)"
                             " OR (handle_code = 500 AND alarm_status = 0)")
        return True if waiting[0][0] == 0 else None

    try:
        await _until(settled, 60, "B's runs never settled")
    except (TimeoutError, AssertionError):
        left = world.rows("SELECT id, job_id, trigger_type, trigger_code, handle_code, alarm_status"
                          " FROM xxl_job_log WHERE handle_code IN (0, 500)")
        raise AssertionError(f"B's runs never settled: {left}") from None
    runs = world.rows("SELECT id, job_id, trigger_type, trigger_code, handle_code, handle_msg, attempt, "
                      "retry_of, alarm_status FROM xxl_job_log ORDER BY id")
    assert not [r for r in runs if FORGED in (r[5] or "")]
    # Refused (400), and once the token's refusal budget is spent, refused unread (429).
    assert answers and all(a in ((400, 500), (429, 500)) for a in answers), answers[:5]
    assert (400, 500) in answers
    parents = [r for r in runs if r[1] == parent and r[4] != 0]
    failures = [r for r in runs if r[1] == failing and r[4] != 0]
    assert len(parents) >= 3 and len(failures) >= 3, runs
    assert all(r[4] == 200 for r in parents)
    assert all(r[4] == 500 and "boom on purpose" in (r[5] or "") for r in failures)
    # Every parent success fired its child, every first failure its retry.
    children = [r for r in runs if r[1] == child and r[2] == "PARENT"]
    assert len(children) == len(parents)
    # A first failure the fail monitor handled after the job was stopped is not retried
    # (no retry of a stopped scheduled job): it is alarmed instead. Either way, exactly once.
    firsts = [r for r in failures if r[6] == 1]
    # (A retry fired as the job stopped can fail to trigger: it is a retry all the same.)
    retried = sorted(r[7] for r in runs if r[1] == failing and r[6] == 2)
    handled = sorted(r[0] for r in firsts if r[8] == AlarmStatus.NOT_NEEDED)
    assert set(retried) <= set(handled), runs
    # With no alarm channel a refused retry is not alarmed either: it ends as handled too.
    # Only the last failures can be refused so, those the monitor reached after the stop
    # (it handles each failure within about a second, more under load).
    assert set(handled) - set(retried) <= {r[0] for r in sorted(firsts)[-3:]}, runs
    assert all(r[8] not in (AlarmStatus.DEFAULT, AlarmStatus.LOCKED) for r in firsts), runs
    assert len(retried) >= 2, runs


async def test_a_token_cannot_take_b_s_executor_out_or_switch_its_dialect(world: World) -> None:
    """Item 1.2: A's token registers B's executor under A's appname (as a 3.5 executor),
    then removes it; an alias spelling of B's address is the same address; item 7(a): a
    callback batch over 1,000 items is refused."""
    job = (await world.admin.jobs.create({
        "job_group": world.group_b, "job_desc": "b", "executor_handler": "record"}))["id"]

    async def trigger_b() -> dict[str, Any]:
        return await world.admin.jobs.trigger(job)

    beat = {"registryGroup": "EXECUTOR", "registryKey": "probe-a", "registryValue": world.b_address}
    answer = (await world.api("registry", beat, {"XXL-JOB-APPNAME": "probe-a"})).json()
    assert answer["code"] == 200, answer
    triggered = await trigger_b()
    assert triggered["trigger_code"] == 200, triggered  # still /run, no XXL-JOB-APPNAME
    assert (await world.api("registryRemove", beat)).json()["code"] == 200
    for _ in range(3):  # "until B's next beat" was the attack's window: no window at all now
        triggered = await trigger_b()
        assert triggered["trigger_code"] == 200, triggered

    async def succeeded() -> bool | None:
        runs = (await world.admin.runs.list(job=job)).items
        return True if len(runs) == 4 and all(r["handle_code"] == 200 for r in runs) else None

    await _until(succeeded, 60, "B's runs did not all succeed")

    # An alias spelling is stored as the canonical address ...
    port = world.b_address.rsplit(":", 1)[1]
    alias = {**beat, "registryValue": f"http://0x7f.0.0.1:{port}"}
    assert (await world.api("registry", alias)).json()["code"] == 200
    entries = world.rows("SELECT registry_value FROM xxl_job_registry WHERE registry_key = 'probe-a'")
    assert entries == [(f"http://127.0.0.1:{port}",)]
    # ... so disabling B's address leaves no spelling of it routable.
    await world.admin.groups.disable_address(world.group_b, world.b_address)
    triggered = await trigger_b()
    assert triggered["trigger_code"] != 200 and "empty" in triggered["trigger_msg"], triggered

    # 7(a): at most 1,000 results per callback request.
    items = [{"logId": 10_000_000 + k, "logDateTim": 0, "handleCode": 200} for k in range(1001)]
    response = await world.api("callback", items)
    assert response.status_code == 413 and "at most 1000 items" in response.json()["msg"], response.text
    response = await world.api("callback", items[:1000])
    assert response.status_code == 400 and "refused for runs" in response.json()["msg"], response.text
