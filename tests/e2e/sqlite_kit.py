"""What several end-to-end files share: a SQLite database of their own (``database``: its URL
and an open store) and an executor's success callback for a recorded run."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from jobring.admin.store import Store
from tests.dbs import (
    BackendUnavailable,
    acreate_test_database,
    adrop_test_database,
    must_fail_when_unavailable,
)
from tests.e2e.admin_nodes import TOKEN, now_ms


@pytest.fixture
async def database(tmp_path: Path) -> AsyncIterator[tuple[str, Store]]:
    try:
        url = await acreate_test_database("sqlite", tmp_path)
    except BackendUnavailable as exc:
        if must_fail_when_unavailable():
            pytest.fail(str(exc))
        pytest.skip(str(exc))
    opened = await Store.open(url)
    try:
        yield url, opened
    finally:
        await opened.close()
        await adrop_test_database(url)


async def report_success(base_url: str, log_id: int) -> None:
    """Post run ``log_id``'s success as its executor would."""
    async with httpx.AsyncClient(base_url=base_url, timeout=30) as http:
        r = await http.post("/xxl-job-admin/api/callback", headers={"XXL-JOB-ACCESS-TOKEN": TOKEN},
                            json=[{"logId": log_id, "logDateTim": now_ms(), "handleCode": 200,
                                   "handleMsg": None}])
        assert r.status_code == 200 and r.json()["code"] == 200, r.text
