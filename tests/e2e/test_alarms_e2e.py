"""Retries, alarms and lost runs end to end: two admin nodes (real processes) on one
PostgreSQL database, two demo executor processes, and real local alarm receivers.

- the first start on a database with runs beyond the retention warns and deletes nothing;
- a group created after its executors registered has their addresses at once;
- a failing job is retried twice with its exponential back-off, then alarmed exactly once on
  every channel (Slack, DingTalk, WeCom, Feishu, webhook, email), signatures checked by the
  receivers, although both admin nodes run the fail monitor;
- a run unfinished past its job's deadline is alarmed once;
- an executor killed while running a run: the run is marked lost (``lost: ...``) within
  seconds of its heartbeats going stale, and retried on the other executor.
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
import sys
import time
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import orjson
import pytest

from jobring.admin.store import Store
from jobring.admin.store.records import LogEntry, NewLog
from jobring.client import AsyncAdminClient
from tests.alarm_receivers import RECEIVERS_ALLOW, AlarmHttpReceiver, SmtpReceiver
from tests.dbs import (
    BackendUnavailable,
    acreate_test_database,
    adrop_test_database,
    must_fail_when_unavailable,
)
from tests.e2e.admin_nodes import TOKEN, fix_rate, kill, now_ms, start_admin, stop

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]


@pytest.fixture
async def pg_url(tmp_path: Path) -> AsyncIterator[str]:
    try:
        url = await acreate_test_database("postgresql", tmp_path)
    except BackendUnavailable as exc:
        if must_fail_when_unavailable():
            pytest.fail(str(exc))
        pytest.skip(str(exc))
    try:
        yield url
    finally:
        await adrop_test_database(url)


async def _until(check: object, limit_s: float, what: str) -> None:
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        result = check() if callable(check) else check
        if asyncio.iscoroutine(result):
            result = await result
        if result:
            return
        await asyncio.sleep(0.2)
    raise AssertionError(f"timed out: {what}")


async def _start_executor(admin_urls: list[str], log_path: Path) -> tuple[asyncio.subprocess.Process, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("JOBRING_")}
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        "import sys; from jobring.cli import main; sys.exit(main())",
        "executor",
        "jobring.demo:executor",
        "--host",
        "127.0.0.1",
        "--port",
        "0",
        "--ip",
        "127.0.0.1",
        *(arg for u in admin_urls for arg in ("--admin", u + "/xxl-job-admin/")),
        "--token",
        TOKEN,
        "--log-path",
        str(log_path),
        "--beat-interval",
        "1",
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL,
        env=env,
    )
    assert proc.stdout is not None
    line = (await asyncio.wait_for(proc.stdout.readline(), 60)).decode()
    match = re.search(r"(?:registering|registered) as (\S+)", line)
    assert match, line
    return proc, match.group(1)


def _ms(value: datetime | None) -> int:
    assert value is not None
    return int(value.replace(tzinfo=UTC).timestamp() * 1000)


async def test_retries_alarms_deadline_and_lost_runs(pg_url: str, tmp_path: Path) -> None:
    receiver, smtp = AlarmHttpReceiver(), SmtpReceiver()
    await receiver.start()
    await smtp.start()
    store = await Store.open(pg_url)
    nodes = []
    executors: list[tuple[asyncio.subprocess.Process, str]] = []
    env = {
        "JOBRING_ALARM_DEFAULT_TARGETS": orjson.dumps(
            [*receiver.targets(), {"kind": "email", "to": ["ops@example.com"]}]
        ).decode(),
        "JOBRING_ALARM_TARGET_ALLOW": RECEIVERS_ALLOW,  # the receivers listen on loopback
        "JOBRING_SMTP_HOST": "127.0.0.1",
        "JOBRING_SMTP_PORT": str(smtp.port),
        "JOBRING_PUBLIC_URL": "https://jobring.example.com",
        "JOBRING_EXECUTOR_DEAD_AFTER_S": "4",
        "JOBRING_LOST_RUN_CHECK_S": "1",
    }
    try:
        # History older than the retention (an adopted database): the first start only warns.
        old_runs = await store.logs.insert_fires(
            [
                NewLog(
                    job_group=1,
                    job_id=424242,
                    trigger_time=datetime.now(UTC) - timedelta(days=40 + i),
                    trigger_code=200,
                    handle_code=200,
                )
                for i in range(3)
            ]
        )
        nodes = list(await asyncio.gather(*(start_admin(pg_url, n, tmp_path, env=env) for n in ("a", "b"))))
        await _until(lambda: any("would be deleted" in n.log_text() for n in nodes), 30, "retention warning")
        assert all([await store.logs.get(i) for i in old_runs if i is not None])
        urls = [n.base_url for n in nodes]
        executors = [await _start_executor(urls, tmp_path / f"exec{i}") for i in range(2)]

        async def both_beating() -> bool:
            return len(await store.registry.entries("jobring-demo")) == 2

        await _until(both_beating, 30, "both executors registered")
        # 0. The group is created after its executors registered: it has their addresses at once.
        async with AsyncAdminClient(nodes[1].base_url) as admin:
            await admin.login("admin", "e2e-password-1234")
            created = await admin.groups.create("jobring-demo", "demo")
        assert sorted(created["addresses"]) == sorted(a for _, a in executors)
        group_id = int(created["id"])

        # 1. A job that always fails: 2 retries, exponential from 1 s, then one alarm per channel.
        failing = await store.jobs.create(
            fix_rate(
                group_id,
                now_ms() + 1500,
                3600,
                executor_handler="fail",
                executor_fail_retry_count=2,
                executor_fail_retry_interval_s=1,
                retry_backoff="exponential",
                job_desc="always fails",
            )
        )

        async def three_failed() -> bool:
            runs = await store.logs.for_job(failing)
            return len(runs) == 3 and all(r.handle_code == 500 for r in runs)

        await _until(three_failed, 60, "three failed runs")
        runs = await store.logs.for_job(failing)
        assert [r.attempt for r in runs] == [1, 2, 3]
        gaps = [_ms(b.trigger_time) - _ms(a.handle_time) for a, b in zip(runs, runs[1:], strict=False)]
        assert gaps[0] >= 1000 - 999 and gaps[1] >= 2000 - 999, gaps  # DATETIME columns keep whole seconds
        await _until(lambda: len(receiver.received) >= 5 and smtp.messages, 30, "alarms on every channel")
        await asyncio.sleep(3)  # a double alarm from the other node would arrive by now
        kinds = sorted(r.kind for r in receiver.received)
        assert kinds == ["dingtalk", "feishu", "slack", "webhook", "wecom"], kinds
        assert all(r.signature_ok is not False for r in receiver.received)
        assert receiver.of("webhook")[0].body["logId"] == runs[-1].id
        assert (
            f"https://jobring.example.com/runs/{runs[-1].id}"
            in receiver.of("feishu")[0].body["content"]["text"]
        )
        assert len(smtp.messages) == 1 and smtp.messages[0]["To"] == "ops@example.com"

        # 2. A run still unfinished past its job's deadline: one deadline alarm.
        slow_job = await store.jobs.create(
            fix_rate(
                group_id,
                0,
                3600,
                executor_handler="slow",
                trigger_status=0,
                deadline_minutes=1,
                job_desc="deadline",
            )
        )
        before = len(receiver.received)
        (overdue,) = await store.logs.insert_fires(
            [
                NewLog(
                    job_group=group_id,
                    job_id=slow_job,
                    trigger_time=datetime.now(UTC) - timedelta(minutes=2),
                    trigger_code=200,
                    executor_address=executors[0][1],
                    planned_time=now_ms() - 120_000,
                    # Dispatched since the executor started (queued, say): a run dispatched
                    # before would be lost as forgotten by it 30 s after its first heartbeat,
                    # and alarmed as a failure too.
                    dispatch_time=now_ms(),
                )
            ]
        )
        await _until(lambda: len(receiver.of("webhook")) == 2, 40, "deadline alarm")
        await asyncio.sleep(2)
        assert len(receiver.received) == before + 5
        deadline_hook = receiver.of("webhook")[1].body
        assert deadline_hook["kind"] == "deadline" and deadline_hook["logId"] == overdue

        # 3. An executor killed while it runs a run: lost within seconds, retried on the other.
        lost_job = await store.jobs.create(
            fix_rate(
                group_id,
                now_ms() + 1000,
                3600,
                executor_handler="slow",
                executor_param="120",
                executor_fail_retry_count=1,
                job_desc="lost",
            )
        )

        async def running() -> LogEntry | None:
            found = [r for r in await store.logs.for_job(lost_job) if r.trigger_code == 200]
            return found[0] if found else None

        await _until(running, 30, "the slow run started")
        first = await running()
        assert first is not None
        victim = next(p for p, a in executors if a == first.executor_address)
        survivor = next(a for _, a in executors if a != first.executor_address)
        victim.send_signal(signal.SIGKILL)
        killed_at = time.monotonic()

        async def retried() -> bool:
            found = await store.logs.for_job(lost_job)
            return len(found) == 2 and found[1].trigger_code == 200

        await _until(retried, 60, "the lost run retried")
        lost_after = time.monotonic() - killed_at
        found = await store.logs.for_job(lost_job)
        assert found[0].handle_code == 500 and (found[0].handle_msg or "").startswith("lost:")
        assert found[1].executor_address == survivor and found[1].attempt == 2
        assert lost_after < 60, lost_after
    finally:
        for proc, _ in executors:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
        codes = list(await asyncio.gather(*(stop(n) for n in nodes), return_exceptions=True))
        for n in nodes:
            await kill(n)
        await store.close()
        await receiver.stop()
        await smtp.stop()
    assert all(c == 0 for c in codes), [n.log_text()[-3000:] for n in nodes]
