"""within(): a shutdown step that overruns is cancelled and left behind, not awaited."""

from __future__ import annotations

import asyncio

import pytest

from jobring.core.bounded import within


async def test_a_step_that_finishes_in_time_returns_true_and_raises_its_error() -> None:
    async def fine() -> None:
        await asyncio.sleep(0)

    async def broken() -> None:
        raise ValueError("boom")

    assert await within(fine(), 5, "fine")
    with pytest.raises(ValueError, match="boom"):
        await within(broken(), 5, "broken")


async def test_a_step_blocked_even_in_its_cleanup_is_left_behind() -> None:
    release = asyncio.Event()
    cancelled = asyncio.Event()

    async def stuck() -> None:
        try:
            await asyncio.Event().wait()
        finally:
            cancelled.set()
            await release.wait()  # a rollback on a socket that never answers

    # (A zero timeout: the step has not finished by then, whatever the machine's speed.)
    assert not await within(stuck(), 0, "stuck")
    await asyncio.wait_for(cancelled.wait(), 5)  # cancelled, and not awaited to its end
    release.set()
    await asyncio.sleep(0)
