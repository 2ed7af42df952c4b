from __future__ import annotations

import pytest

from jobring.client import AdminApiError
from jobring.protocol.models import ReturnT
from tests.client.adminkit import AdminEnv, log_answer


async def _triggered(env: AdminEnv) -> tuple[int, int]:
    job = await env.job(await env.group())
    async with env.client() as admin:
        result = await admin.jobs.trigger(job["id"])
    return job["id"], result["log_ids"][0]


async def test_list_and_get_runs_of_a_job(env: AdminEnv) -> None:
    job_id, run_id = await _triggered(env)
    other = await env.job(await env.group("other-app", "Other"))
    async with env.client() as admin:
        await admin.jobs.trigger(other["id"])
        page = await admin.runs.list(job=job_id)
        assert page.total == 1 and page.items[0]["id"] == run_id
        assert (await admin.runs.list()).total == 2
        assert (await admin.runs.list(status="running")).total == 2
        assert (await admin.runs.list(status="success")).total == 0
        first = await admin.runs.list(limit=1)
        assert first.total_exact and first.next_cursor is not None
        rest = await admin.runs.list(limit=1, cursor=first.next_cursor)
        assert rest.items[0]["id"] != first.items[0]["id"] and rest.total == 2
        run = await admin.runs.get(run_id)
    assert run["job_id"] == job_id and run["trigger_code"] == 200
    assert run["executor_address"] == env.executors.address(0) and run["trigger_type"] == "MANUAL"


async def test_bad_status_filter_is_a_client_error(env: AdminEnv) -> None:
    async with env.client() as admin:
        with pytest.raises(AdminApiError) as info:
            await admin.runs.list(status="sideways")
    assert info.value.status == 422 and info.value.field == "status"


async def test_log_is_read_from_the_executor_by_line_range(env: AdminEnv) -> None:
    _, run_id = await _triggered(env)
    address = env.executors.address(0)
    env.executors.answer(address, "log", log_answer({1: "one", 2: "two", 3: "three"}, end_after=3))
    async with env.client() as admin:
        whole = await admin.runs.log(run_id)
        tail = await admin.runs.log(run_id, from_line=3)
    assert whole["log_content"] == "one\ntwo\nthree\n" and whole["is_end"] is True
    assert tail["from_line_num"] == 3 and tail["log_content"] == "three\n"
    asked = [c.body["fromLineNum"] for c in env.executors.calls if c.path == "log"]
    assert asked == [1, 3]


async def test_kill_asks_the_executor(env: AdminEnv) -> None:
    job_id, run_id = await _triggered(env)
    env.executors.answer(env.executors.address(0), "kill", _answer(ReturnT.fail("job thread is not running")))
    async with env.client() as admin:
        result = await admin.runs.kill(run_id)
    assert [c.body for c in env.executors.calls if c.path == "kill"] == [{"jobId": job_id}]
    assert result["killed"] is False and "not running" in result["msg"]


async def test_clear_deletes_runs_by_rule(env: AdminEnv) -> None:
    job_id, _ = await _triggered(env)
    async with env.client() as admin:
        with pytest.raises(AdminApiError) as info:
            await admin.runs.clear("whenever", job=job_id)
        assert info.value.is_client_error
        assert (await admin.runs.list(job=job_id)).total == 1
        cleared = await admin.runs.clear("all", job=job_id)
        assert cleared["deleted"] == 1
        assert (await admin.runs.list(job=job_id)).total == 0


def _answer(result: ReturnT):  # type: ignore[no-untyped-def]
    async def answer(body: dict[str, object]) -> ReturnT:
        return result

    return answer
