"""A schedule declared in code with its workflow, with a real admin process and a real jobring
executor process: the executor declares a fixed-rate workflow and a cron workflow at its start,
the admin stores their schedules managed by code and fires them by itself (runs started by
``schedule`` with the declared starting context), and the API refuses to change them."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from jobring.client import AdminApiError
from tests.e2e.waiting import eventually
from tests.e2e.workflow_kit import EXECUTOR_HEAD, WorkflowEnv, workflow_env

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(180)]

# Every second (fixed rate) and every two seconds (cron, in a zone of its own); each run notes
# its starting context through the node's params template.
EXECUTOR_CODE = EXECUTOR_HEAD + '''

executor.workflow("every-second", fix_rate=1, params={{"source": "code"}},
                  nodes=[{{"key": "s", "job": "step", "params": "rate {{{{ source }}}}"}}])
executor.workflow("every-other-second", cron="*/2 * * * * ?", timezone="Asia/Shanghai", overlap="allow",
                  params={{"source": "cron"}},
                  nodes=[{{"key": "s", "job": "step", "params": "cron {{{{ source }}}}"}}])
'''


@pytest.fixture
async def env(tmp_path: Path) -> AsyncIterator[WorkflowEnv]:
    async with workflow_env(tmp_path, "declared-schedule", "declared_jobs", EXECUTOR_CODE) as env:
        yield env


async def test_declared_schedules_fire_by_themselves(env: WorkflowEnv) -> None:
    async def declared() -> dict[str, dict[str, Any]] | None:
        # A declaration is applied in several writes (the workflow, its audit, its schedule):
        # wait for both schedules, not only both workflows.
        found = {w["name"]: w for w in (await env.admin.workflows.list()).items}
        return found if len(found) == 2 and all(w["schedule"] for w in found.values()) else None

    flows = await eventually("the declared workflows", declared)
    rate, cron = flows["every-second"], flows["every-other-second"]
    assert rate["schedule"]["schedule_type"] == "FIX_RATE" and rate["schedule"]["managed_by"] == "code"
    assert (cron["schedule"]["schedule_conf"], cron["schedule"]["schedule_timezone"]) == (
        "*/2 * * * * ?", "Asia/Shanghai")

    for flow, line in ((rate, "rate code"), (cron, "cron cron")):
        async def two_runs(wid: int = flow["id"]) -> list[dict[str, Any]] | None:
            runs = [r for r in (await env.admin.workflows.runs(workflow=wid, limit=100)).items
                    if r["state"] == "success"]
            return runs if len(runs) >= 2 else None

        runs = await eventually(f"two scheduled runs of {flow['name']}", two_runs, limit_s=60)
        assert {r["triggered_by"] for r in runs} == {"schedule"}
        assert f"{line} end" in env.order()
        shown = await env.admin.workflows.schedule(flow["id"])
        assert shown["enabled"] and shown["managed_by"] == "code" and shown["last_fire_at"]

    with pytest.raises(AdminApiError) as refused:
        await env.admin.workflows.set_schedule(rate["id"], {"schedule_type": "NONE"})
    assert (refused.value.status, refused.value.field) == (409, "managed_by")
