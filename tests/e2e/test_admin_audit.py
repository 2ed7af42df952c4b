"""The audit log of a real admin process: a refused login, a login, a job created and
triggered, all read back from ``/api/v1/audit`` with who, from where and what."""

from __future__ import annotations

from pathlib import Path

import pytest

from jobring.admin.store import Store
from jobring.client import AdminApiError, AsyncAdminClient
from tests.e2e.admin_nodes import RecordingExecutor, add_manual_group, kill, start_admin, stop

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(180)]

PASSWORD = "e2e-password-1234"  # what start_admin configures for the first admin


async def test_login_job_and_trigger_are_in_the_audit_log(tmp_path: Path) -> None:
    url = f"sqlite+aiosqlite:///{tmp_path / 'audit.db'}"
    executor = RecordingExecutor()
    await executor.start()
    node = await start_admin(url, "audited", tmp_path)
    try:
        store = await Store.open(url, upgrade=False)
        try:
            group = await add_manual_group(store, executor.address)
        finally:
            await store.close()
        async with AsyncAdminClient(node.base_url) as admin:
            with pytest.raises(AdminApiError) as refused:
                await admin.login("admin", "a wrong password")
            assert refused.value.status == 401
            await admin.login("admin", PASSWORD)
            job = await admin.jobs.create(
                {"job_group": group, "job_desc": "audited job", "executor_handler": "hello"}
            )
            result = await admin.jobs.trigger(job["id"], executor_param="once")
            assert result["trigger_code"] == 200, result
            page = await admin.audit.list()
        records = list(reversed(page.items))  # oldest first
        assert [r["action"] for r in records] == [
            "auth.login_failed",
            "auth.login",
            "job.create",
            "job.trigger",
        ]
        assert {r["source"] for r in records} == {"127.0.0.1"}
        failed, login, created, triggered = records
        assert (failed["actor"], failed["actor_kind"], failed["outcome"]) == ("admin", "anonymous", "failure")
        assert (login["actor"], login["actor_kind"], login["outcome"]) == ("admin", "session", "success")
        assert created["target_id"] == str(job["id"]) and created["group_id"] == group
        assert created["details"]["after"]["job_desc"] == "audited job"
        assert triggered["outcome"] == "success" and triggered["details"]["executor_param"] == "once"
        assert triggered["details"]["log_ids"] == result["log_ids"]
        assert "a wrong password" not in str(records) and PASSWORD not in str(records)
        assert [call.job_id for call in executor.calls] == [job["id"]]
        assert await stop(node) == 0
    finally:
        await kill(node)
        await executor.stop()
