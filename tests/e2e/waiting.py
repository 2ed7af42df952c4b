"""Waiting in end-to-end tests: poll until a check answers, fail naming what was awaited."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

T = TypeVar("T")


async def eventually(what: str, check: Callable[[], Awaitable[T | None]], limit_s: float = 60.0,
                     every_s: float = 0.1) -> T:
    """What ``check`` answers once it answers something (not None); an AssertionError naming
    ``what`` after ``limit_s`` seconds."""
    deadline = time.monotonic() + limit_s
    while True:
        value = await check()
        if value is not None:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {limit_s} s waiting for {what}")
        await asyncio.sleep(every_s)
