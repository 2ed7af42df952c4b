"""A fire recorded ahead of its instant and the outcome of that recording: what the held
jobs keep and the read-ahead settles (apart from both, so neither imports the other)."""

from __future__ import annotations

import asyncio
from enum import Enum


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
