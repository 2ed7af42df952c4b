"""``/jobring/subtasks/received``: the sub-tasks this executor holds (accepted, their result
not yet taken by an admin), by run, id and attempt; forgotten once an admin took the result."""

from __future__ import annotations

import asyncio
import json
import threading
from typing import Any

import pytest

from jobring.executor.context import JobContext, JobHandler
from jobring.executor.distributed import AdminLink, DistributedError, SubTaskRunner


class _Admin:
    """Takes the result batches; refuses them while ``down`` (the runner keeps them)."""

    def __init__(self) -> None:
        self.results: list[dict[str, Any]] = []
        self.got = asyncio.Event()
        self.down = True

    async def call(self, what: str, body: dict[str, Any]) -> Any:
        assert what == "results"
        if self.down:
            raise DistributedError("no admin took results: down")
        self.results += body["results"]
        self.got.set()
        return {"changed": len(body["results"])}


async def _held(runner: SubTaskRunner, asked: list[list[int]]) -> list[int]:
    answer = await runner.held(json.dumps({"tasks": asked}).encode())
    assert answer.ok and isinstance(answer.content, dict)
    return sorted(answer.content["received"])


async def test_held_until_an_admin_takes_the_result() -> None:
    admin = _Admin()
    link: AdminLink = admin  # type: ignore[assignment]  # the runner only calls call()
    release = threading.Event()

    def gated(ctx: JobContext) -> int:
        release.wait(10)
        return 1

    runner = SubTaskRunner({"gated": JobHandler("gated", gated)}, link, concurrency=4)
    try:
        tasks = [{"id": i, "attempt": 2, "key": f"r/0.{i}", "task": "gated", "kind": "map", "item": "1"}
                 for i in (11, 12)]
        assert (await runner.accept(json.dumps({"runId": 7, "jobId": 1, "tasks": tasks}).encode())).ok
        asked = [[7, 11, 2], [7, 12, 1], [8, 12, 2], [7, 13, 2]]  # other attempt, other run, unknown
        assert await _held(runner, asked) == [11]
        release.set()  # they run; their results wait for an admin that takes them
        admin.down = False
        async with asyncio.timeout(10):
            while len(admin.results) < 2:
                admin.got.clear()
                await admin.got.wait()
        assert await _held(runner, [[7, 11, 2], [7, 12, 2]]) == []
    finally:
        release.set()
        await runner.close()


@pytest.mark.parametrize("body", [
    b"nope", b'{"tasks": 3}', b'{"tasks": [[1, 2]]}', b'{"tasks": [[1, 2, true]]}',
    json.dumps({"tasks": [[1, 2, 3]] * 10_001}).encode(),
])
async def test_a_bad_question_is_a_value_error(body: bytes) -> None:
    link: AdminLink = _Admin()  # type: ignore[assignment]
    runner = SubTaskRunner({}, link)
    try:
        with pytest.raises(ValueError, match="tasks|JSON"):
            await runner.held(body)
    finally:
        await runner.close()
