"""A real pyxxl executor (unchanged, from PyPI) against our executor API and TriggerService."""

from __future__ import annotations

from pathlib import Path

import pytest

from jobring.admin.store import Store
from jobring.admin.trigger.trigger import FireRequest
from jobring.core.enums import TriggerType
from tests.e2e.pyxxl_harness import running_admin, wait_for

# pyxxl executors in real processes.
pytestmark = pytest.mark.e2e


async def test_pyxxl_registers_runs_calls_back_and_leaves(sqlite_store: Store, tmp_path: Path) -> None:
    async with running_admin(sqlite_store, tmp_path) as admin:
        executor = admin.start_executor()
        await admin.wait_registered(executor)
        assert await admin.addresses() == [executor.address]

        demo = await admin.job("demo", executor_param="hello")
        ok = await admin.trigger.fire(FireRequest(demo, TriggerType.MANUAL))
        assert ok.trigger_code == 200, ok.trigger_msg
        entry = await admin.wait_result(ok.log_ids[0])
        assert entry.handle_code == 200 and entry.handle_msg == f"ok hello on {executor.port}"
        assert entry.executor_address == executor.address and entry.trigger_code == 200

        fail = await admin.job("fail")
        failed = await admin.trigger.fire(FireRequest(fail, TriggerType.API))
        entry = await admin.wait_result(failed.log_ids[0])
        assert entry.handle_code == 500 and "failed on purpose" in (entry.handle_msg or "")

        missing = await admin.job("no-such-handler")
        refused = await admin.trigger.fire(FireRequest(missing, TriggerType.MANUAL))
        assert refused.trigger_code == 500
        log = await admin.store.logs.get(refused.log_ids[0])
        assert log is not None and log.trigger_code == 500 and "no-such-handler" in (log.trigger_msg or "")

        # Stopping the executor sends registryRemove: the address leaves the group at once.
        await executor.stop()

        async def gone() -> bool:
            return await admin.addresses() == []

        await wait_for("registryRemove", gone)


async def test_child_job_runs_after_parent_success(sqlite_store: Store, tmp_path: Path) -> None:
    async with running_admin(sqlite_store, tmp_path) as admin:
        executor = admin.start_executor()
        await admin.wait_registered(executor)
        child = await admin.job("demo", executor_param="child")
        parent = await admin.job("demo", executor_param="parent", child_jobid=str(child.id))
        fired = await admin.trigger.fire(FireRequest(parent, TriggerType.MANUAL))
        await admin.wait_result(fired.log_ids[0])

        async def child_logged() -> bool:
            return bool(await admin.store.logs.for_job(child.id))

        await wait_for("the child's log", child_logged)
        # The children's summary is appended to the parent's message after its result is
        # recorded, before they are fired: read once the child's run exists.
        parent_log = await admin.store.logs.get(fired.log_ids[0])
        assert parent_log is not None and "Trigger child job" in (parent_log.handle_msg or "")
        (child_log,) = await admin.store.logs.for_job(child.id)
        assert child_log.trigger_type == "PARENT"
        done = await admin.wait_result(child_log.id)
        assert done.handle_code == 200 and done.handle_msg == f"ok child on {executor.port}"
