"""Helpers for the execution engine's tests: a collecting report and trigger builders."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from jobring.protocol.models import HandleCallbackParam, TriggerParam

LOG_TIME = 1795350973184  # 2026-11-22, as in the reference fixtures


class Reports:
    """A list-collecting ``report`` that tests can wait on."""

    def __init__(self) -> None:
        self.items: list[HandleCallbackParam] = []
        self._changed = asyncio.Event()

    def __call__(self, param: HandleCallbackParam) -> None:
        self.items.append(param)
        self._changed.set()

    def of(self, log_id: int) -> list[HandleCallbackParam]:
        return [p for p in self.items if p.log_id == log_id]

    async def _until(self, predicate: Callable[[], bool], within: float) -> None:
        async with asyncio.timeout(within):
            while not predicate():
                self._changed.clear()
                await self._changed.wait()

    async def wait(self, log_id: int, within: float = 10.0) -> HandleCallbackParam:
        """The (single) report of ``log_id``, waiting for it up to ``within`` seconds."""
        await self._until(lambda: bool(self.of(log_id)), within)
        found = self.of(log_id)
        assert len(found) == 1, found
        return found[0]

    async def wait_count(self, count: int, within: float = 10.0) -> None:
        await self._until(lambda: len(self.items) >= count, within)


def trigger(job_id: int, log_id: int, handler: str = "h", **fields: object) -> TriggerParam:
    param = TriggerParam(job_id=job_id, executor_handler=handler, log_id=log_id, log_date_time=LOG_TIME)
    for name, value in fields.items():
        assert hasattr(param, name), name
        setattr(param, name, value)
    return param
