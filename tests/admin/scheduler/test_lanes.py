"""The dispatch lanes' slots: taken at once or awaited, handed to waiters in order."""

from __future__ import annotations

import asyncio

from jobring.admin.trigger.lanes import DispatchLanes, Lane
from jobring.core.clock import ManualClock


async def test_lane_slots_are_taken_now_or_awaited_in_order() -> None:
    lane = Lane(1)
    assert lane.enter_now() and not lane.enter_now()
    order: list[str] = []

    async def wait(name: str) -> None:
        await lane.enter()
        order.append(name)

    first, second = asyncio.ensure_future(wait("first")), asyncio.ensure_future(wait("second"))
    await asyncio.sleep(0)
    assert not lane.enter_now()  # waiters go first
    lane.leave()
    await first
    assert order == ["first"] and not second.done()
    lane.leave()
    await second
    lane.leave()
    assert lane.enter_now()


async def test_a_slot_handed_to_a_cancelled_waiter_is_passed_on() -> None:
    lane = Lane(1)
    assert lane.enter_now()
    cancelled = asyncio.ensure_future(lane.enter())
    other = asyncio.ensure_future(lane.enter())
    await asyncio.sleep(0)
    lane.leave()  # handed to the first waiter ...
    cancelled.cancel()  # ... which is cancelled before it runs
    await asyncio.gather(cancelled, return_exceptions=True)
    await asyncio.wait_for(other, timeout=5)
    assert not lane.enter_now()


async def test_dispatch_lanes_enter_now_and_record_slow_jobs() -> None:
    lanes = DispatchLanes(ManualClock(0), fast_size=1, slow_size=1, slow_threshold_ms=10, slow_after=1)
    lane = lanes.enter_now(7)
    assert lane is not None and lanes.enter_now(8) is None
    lanes.leave(lane, 7, 50)
    lanes.leave(lanes.enter_now(7) or lane, 7, 50)
    assert lanes.is_slow(7)
    slow = lanes.enter_now(7)  # the slow lane has its own slot
    assert slow is not None and lanes.enter_now(8) is not None
