"""A sub-task's log lines (``ctx.log``) go back to the admin with its result: the last
``TASK_LOG_MAX_BYTES`` of them, whole lines while they fit; none when it logged nothing."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from jobring.executor.context import JobContext, JobHandler
from jobring.executor.distributed import TASK_LOG_MAX_BYTES, AdminLink, SubTaskRunner


class _Admin:
    """Takes the runner's calls in place of AdminLink: the result batches it sent."""

    def __init__(self) -> None:
        self.results: list[dict[str, Any]] = []
        self.got = asyncio.Event()

    async def call(self, what: str, body: dict[str, Any]) -> Any:
        assert what == "results"
        self.results += body["results"]
        self.got.set()
        return {"changed": len(body["results"])}


def _chatty(ctx: JobContext) -> int:
    for i in range(int(ctx.item["lines"])):
        ctx.log("line %d of item %s", i, ctx.item["n"])
    return int(ctx.item["n"])


async def _run(items: list[dict[str, int]]) -> list[dict[str, Any]]:
    admin = _Admin()
    link: AdminLink = admin  # type: ignore[assignment]  # the runner only calls call()
    runner = SubTaskRunner({"chatty": JobHandler("chatty", _chatty)}, link, concurrency=4)
    tasks = [{"id": i + 1, "attempt": 1, "key": f"r/0.{i}", "task": "chatty", "kind": "map",
              "item": json.dumps(item)} for i, item in enumerate(items)]
    answer = await runner.accept(json.dumps({"runId": 7, "jobId": 1, "tasks": tasks}).encode())
    assert answer.ok
    async with asyncio.timeout(10):
        while len(admin.results) < len(items):
            admin.got.clear()
            await admin.got.wait()
    await runner.close()
    return sorted(admin.results, key=lambda r: int(r["id"]))


async def test_the_log_lines_go_with_the_result() -> None:
    quiet, chatty, flood = await _run([{"n": 1, "lines": 0}, {"n": 2, "lines": 2}, {"n": 3, "lines": 500}])
    assert quiet["ok"] and "log" not in quiet
    assert chatty["ok"] and chatty["result"] == 2
    lines = chatty["log"].splitlines()
    assert [line.rsplit("] ", 1)[-1] for line in lines] == ["line 0 of item 2", "line 1 of item 2"]
    assert len(flood["log"]) <= TASK_LOG_MAX_BYTES
    kept = flood["log"].splitlines()
    assert kept[-1].endswith("line 499 of item 3") and not kept[0].endswith("line 0 of item 3")
