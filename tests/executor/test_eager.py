"""first_step/resume: a coroutine's first step now, the rest (if any) in a task."""

from __future__ import annotations

import asyncio

import pytest

from jobring.executor.eager import first_step, resume


async def test_a_coroutine_that_never_suspends_finishes_in_its_first_step() -> None:
    async def answer() -> int:
        return 42

    assert first_step(answer()) == (True, 42)


async def test_an_exception_of_the_first_step_propagates() -> None:
    async def broken() -> None:
        raise LookupError("nope")

    with pytest.raises(LookupError, match="nope"):
        first_step(broken())


async def test_a_suspended_coroutine_resumes_in_a_task_with_values_and_errors() -> None:
    gate: asyncio.Future[str] = asyncio.get_running_loop().create_future()
    steps: list[str] = []

    async def waits() -> str:
        steps.append("first")
        got = await gate
        steps.append(got)
        try:
            await asyncio.sleep(0)
            raise ValueError("after the sleep")
        except ValueError as exc:
            return f"{got}, then {exc}"

    coro = waits()
    done, yielded = first_step(coro)
    assert not done and steps == ["first"]
    task = asyncio.get_running_loop().create_task(resume(coro, yielded))
    await asyncio.sleep(0)
    assert not task.done()
    gate.set_result("opened")
    assert await asyncio.wait_for(task, 5) == "opened, then after the sleep"
    assert steps == ["first", "opened"]


async def test_cancelling_the_task_cancels_the_coroutine_inside() -> None:
    started = asyncio.Event()
    seen: list[str] = []

    async def sleeps() -> None:
        started.set()
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            seen.append("cancelled")
            raise

    coro = sleeps()
    done, yielded = first_step(coro)
    assert not done and started.is_set()
    task = asyncio.get_running_loop().create_task(resume(coro, yielded))
    await asyncio.sleep(0)  # the task waits on the sleep's future now
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(task, 5)
    assert seen == ["cancelled"]
