"""``jobring.background``: tasks held until they end, failures logged (not raised), a wait
that covers the tasks started meanwhile and gives back those still running at its timeout."""

from __future__ import annotations

import asyncio
import logging

import pytest

from jobring.background import Background


async def test_a_failure_is_logged_with_what_failed_and_the_others_go_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    background = Background(logging.getLogger("jobring.test"))
    done = asyncio.Event()

    async def broken() -> None:
        raise RuntimeError("boom")

    async def fine() -> None:
        done.set()

    background.spawn(broken(), "the broken part")
    background.spawn(fine(), "the fine part")
    assert len(background) == 2
    assert await background.wait() == set()
    assert done.is_set() and len(background) == 0
    failed = [r for r in caplog.records if r.name == "jobring.test"]
    assert [r.getMessage() for r in failed] == ["the broken part failed"]
    assert failed[0].exc_info is not None


async def test_a_wait_covers_tasks_started_meanwhile_and_gives_back_the_late_ones() -> None:
    background = Background()
    release = asyncio.Event()
    second = asyncio.Event()

    async def blocked() -> None:
        await release.wait()

    async def first() -> None:
        background.spawn(blocked(), "blocked")  # started by a task of the set
        second.set()

    background.spawn(first(), "first")
    late = await background.wait(0.05)
    assert second.is_set() and len(late) == 1 and late == background.tasks
    release.set()
    assert await background.wait() == set()


async def test_a_cancelled_wait_cancels_the_tasks_it_waited_for() -> None:
    # A stop bounded by core.bounded.within cancels the wait when the database hangs: the
    # tasks must not go on running after the component stopped (and its store closed).
    background = Background()
    started = asyncio.Event()

    async def hanging() -> None:
        started.set()
        await asyncio.Event().wait()

    background.spawn(hanging(), "hanging")
    (task,) = background.tasks
    await started.wait()
    waiter = asyncio.ensure_future(background.wait())
    await asyncio.sleep(0)  # the wait has begun
    waiter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiter
    await asyncio.wait({task}, timeout=5.0)
    assert task.cancelled()
    assert len(background) == 0
