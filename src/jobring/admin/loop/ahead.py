"""A fire recorded ahead of its instant and the outcome of that recording: what the held
jobs keep and the read-ahead settles (apart from both, so neither imports the other), and
the fires withdrawn from it."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from enum import Enum
from typing import Any, Protocol


class Outcome(Enum):
    """What became of a fire recorded ahead."""

    PENDING = "pending"  # being recorded
    PREPARED = "prepared"  # recorded: send its batch at the instant
    NOTHING_TO_SEND = "nothing to send"  # already recorded (by another node or earlier)
    UNPREPARED = "unprepared"  # recording failed: record and send it at its instant


class Ahead:
    """One fire recorded (or being recorded) ahead: its outcome and, when PREPARED, its batch."""

    # Class-level defaults and no __init__: one is made per fire recorded ahead, and this is
    # cheaper to create than an asyncio future.
    outcome: Outcome = Outcome.PENDING
    batch: object = None
    withdrawn: bool = False  # will not be sent: cancel the batch once recorded
    _settled: asyncio.Future[None] | None = None  # made only when the sender must wait

    async def settled(self) -> Outcome:
        """The outcome, once the recording is done."""
        if self.outcome is Outcome.PENDING:
            if self._settled is None or self._settled.done():
                self._settled = asyncio.get_running_loop().create_future()
            await self._settled
        return self.outcome

    def resolve(self, outcome: Outcome, batch: object) -> None:
        self.outcome = outcome
        self.batch = batch
        if self._settled is not None and not self._settled.done():
            self._settled.set_result(None)


class Withdrawals:
    """Fires recorded ahead that will not be sent, to cancel under the loop's database lock
    before their jobs' leases are released (so the next holder can record those instants).
    Every stage may withdraw a fire; the claim cycle, the releases and the stop cancel."""

    def __init__(self, preparer: _Canceller | None) -> None:
        self._preparer = preparer
        self._to_cancel: list[object] = []

    def withdraw(self, slot: Ahead) -> None:
        """The fire will not be sent: cancel its batch (once recorded)."""
        if slot.outcome is Outcome.PENDING:
            slot.withdrawn = True
        elif slot.outcome is Outcome.PREPARED:
            self._to_cancel.append(slot.batch)

    def settled(self, slot: Ahead) -> None:
        """``slot`` was just resolved: a fire withdrawn while being recorded is cancelled now."""
        if slot.withdrawn and slot.outcome is Outcome.PREPARED:
            self._to_cancel.append(slot.batch)

    async def cancel(self) -> None:
        """Cancel the withdrawn batches (call under the loop's database lock)."""
        if not self._to_cancel or self._preparer is None:
            return
        batches, self._to_cancel = self._to_cancel, []
        try:
            await self._preparer.cancel(batches)
        except BaseException:
            self._to_cancel.extend(batches)
            raise


class _Canceller(Protocol):
    async def cancel(self, batches: Sequence[Any]) -> None: ...
