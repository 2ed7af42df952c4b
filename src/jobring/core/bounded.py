"""Bounded waits for shutdown: an admin stops within seconds even when the database hangs.

A database that stopped answering (a frozen host, a dead socket nobody resets) blocks every
statement, and with it the cleanup of a cancelled one (SQLAlchemy rolls back on the way
out). A step that overruns its time is cancelled and left behind, not awaited: what it did
not write is covered elsewhere (leases run out, the lost-run monitor, the next holder's
takeover).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable
from typing import Any

log = logging.getLogger(__name__)

_left_behind: set[asyncio.Future[Any]] = set()


def _forget(task: asyncio.Future[Any]) -> None:
    _left_behind.discard(task)
    if not task.cancelled() and task.exception() is not None:
        log.warning("a shutdown step left behind failed later: %r", task.exception())


async def within(work: Awaitable[Any], seconds: float, what: str) -> bool:
    """Await ``work`` for at most ``seconds``; past that, cancel it and go on without waiting
    for it. True when it finished (its exception, if any, is raised)."""
    task = asyncio.ensure_future(work)
    try:
        done, _ = await asyncio.wait({task}, timeout=max(0.0, seconds))
    except asyncio.CancelledError:
        task.cancel()
        raise
    if task in done:
        task.result()
        return True
    task.cancel()
    _left_behind.add(task)
    task.add_done_callback(_forget)
    log.warning("%s did not finish within %.1f s (database not answering?); going on without it",
                what, seconds)
    return False
