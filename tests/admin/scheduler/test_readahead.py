"""Fires recorded ahead: the tagged outcome per fire, withdrawal, and what is sent how."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest

from jobring.admin.loop.ahead import Ahead, Outcome, Withdrawals
from jobring.admin.loop.config import LoopConfig
from jobring.admin.loop.held import HeldSet
from jobring.admin.loop.ports import FirePreparer, PlannedFire
from jobring.admin.loop.readahead import ReadAhead
from jobring.core.enums import TriggerType
from jobring.core.schedule import parse_schedule
from tests.admin.loop_fakes import T0, fix_rate_job, loop_context


class Preparer:
    """Prepares fires as strings; instants in ``recorded`` are duplicates, ``fail`` raises."""

    def __init__(self) -> None:
        self.recorded: set[int] = set()
        self.fail = False
        self.gate: asyncio.Event | None = None
        self.dispatched: list[str] = []
        self.cancelled: list[str] = []
        self.fired: list[int] = []

    async def __call__(self, fires: Sequence[PlannedFire]) -> None:
        self.fired += [f.planned_ms for f in fires]

    async def prepare(self, fires: Sequence[PlannedFire]) -> list[str | None]:
        if self.gate is not None:
            await asyncio.wait_for(self.gate.wait(), 5)
        if self.fail:
            raise RuntimeError("database down")
        return [None if f.planned_ms in self.recorded else f"{f.job.id}@{f.planned_ms}" for f in fires]

    async def dispatch(self, batches: Sequence[str]) -> None:
        self.dispatched += batches

    async def cancel(self, batches: Sequence[str]) -> None:
        self.cancelled += batches


def _setup(preparer: Preparer) -> tuple[HeldSet, ReadAhead, Withdrawals]:
    assert isinstance(preparer, FirePreparer)
    ctx = loop_context(LoopConfig(prepare_ahead_ms=2_500), preparer)
    held = HeldSet(ctx.withdrawals)
    held.adopt(fix_rate_job(1, T0 + 1_000), parse_schedule("FIX_RATE", "1", "UTC"), T0 + 1_000, T0 + 10_000,
               T0 + 1_000)
    return held, ReadAhead(ctx, held, preparer), ctx.withdrawals


def _slots(held: HeldSet) -> dict[int, Ahead]:
    entry = held.get(1)
    assert entry is not None
    return entry.prepared


async def test_each_fire_in_the_window_gets_its_outcome() -> None:
    preparer = Preparer()
    preparer.recorded = {T0 + 2_000}
    held, ahead, withdrawals = _setup(preparer)
    await ahead.start(T0)
    slots = _slots(held)
    assert sorted(slots) == [T0 + 1_000, T0 + 2_000]
    assert slots[T0 + 1_000].outcome is Outcome.PREPARED
    assert slots[T0 + 1_000].batch == f"1@{T0 + 1_000}"
    assert slots[T0 + 2_000].outcome is Outcome.NOTHING_TO_SEND
    # The next cycle records only what it has not looked at yet.
    await ahead.start(T0 + 1_000)
    assert sorted(slots) == [T0 + 1_000, T0 + 2_000, T0 + 3_000]


async def test_a_failed_recording_leaves_the_fires_unprepared_and_sent_at_their_instant() -> None:
    preparer = Preparer()
    preparer.fail = True
    held, ahead, withdrawals = _setup(preparer)
    await ahead.start(T0)
    slots = _slots(held)
    assert {s.outcome for s in slots.values()} == {Outcome.UNPREPARED}
    fire = PlannedFire(fix_rate_job(1, T0 + 1_000), TriggerType.CRON, T0 + 1_000)
    await ahead.send([fire], [slots[T0 + 1_000]])
    assert preparer.fired == [T0 + 1_000] and preparer.dispatched == []


async def test_send_waits_for_a_recording_in_progress_and_skips_duplicates() -> None:
    preparer = Preparer()
    preparer.gate = asyncio.Event()
    preparer.recorded = {T0 + 2_000}
    held, ahead, withdrawals = _setup(preparer)
    task = ahead.start(T0)
    await asyncio.sleep(0)
    slots = _slots(held)
    assert slots[T0 + 1_000].outcome is Outcome.PENDING
    fires = [PlannedFire(fix_rate_job(1, t), TriggerType.CRON, t) for t in (T0 + 1_000, T0 + 2_000)]
    sending = asyncio.ensure_future(ahead.send(fires, [slots[T0 + 1_000], slots[T0 + 2_000]]))
    await asyncio.sleep(0)
    assert not sending.done()
    preparer.gate.set()
    await asyncio.wait_for(asyncio.gather(task, sending), 5)
    assert preparer.dispatched == [f"1@{T0 + 1_000}"]
    assert preparer.fired == []


async def test_withdrawn_fires_are_cancelled_whether_recorded_yet_or_not() -> None:
    preparer = Preparer()
    preparer.gate = asyncio.Event()
    held, ahead, withdrawals = _setup(preparer)
    task = ahead.start(T0)
    await asyncio.sleep(0)
    slots = _slots(held)
    withdrawals.withdraw(slots[T0 + 1_000])  # still being recorded
    preparer.gate.set()
    await asyncio.wait_for(task, 5)
    withdrawals.withdraw(slots[T0 + 2_000])  # recorded already
    await withdrawals.cancel()
    assert preparer.cancelled == [f"1@{T0 + 1_000}", f"1@{T0 + 2_000}"]
    await withdrawals.cancel()
    assert len(preparer.cancelled) == 2


async def test_a_failed_cancel_is_kept_for_the_next_try() -> None:
    preparer = Preparer()
    held, ahead, withdrawals = _setup(preparer)
    await ahead.start(T0)
    withdrawals.withdraw(_slots(held)[T0 + 1_000])

    async def broken(batches: Sequence[str]) -> None:
        raise RuntimeError("database down")

    preparer.cancel = broken  # type: ignore[method-assign]
    with pytest.raises(RuntimeError):
        await withdrawals.cancel()
    del preparer.cancel
    await withdrawals.cancel()
    assert preparer.cancelled == [f"1@{T0 + 1_000}"]
