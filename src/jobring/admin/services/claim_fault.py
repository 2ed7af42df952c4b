"""A test-only fault point in the workflow claim window (docs/configuration.md#test-only).

``JOBRING_TEST_PAUSE_AFTER_CLAIMS=N`` makes this admin hold the N-th node attempt it claims
right after the claim, before its job run is sent (its step recorded the run with the
attempt where the database has INSERT ... RETURNING), and log that it did; the chaos
test (tests/e2e/test_workflows_chaos_e2e.py) then SIGKILLs the admin inside that window. The
other fires of the admin go on. Read from the environment once at start by the admin's
wiring; not a setting, and unset in production (then nothing here runs).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping

__all__ = ["ENV", "PAUSED", "ClaimFault", "claim_fault_from"]

log = logging.getLogger(__name__)

ENV = "JOBRING_TEST_PAUSE_AFTER_CLAIMS"
PAUSED = "test fault: holding claimed node attempt"


class ClaimFault:
    """Holds the ``after``-th claimed attempt for good (until the process dies)."""

    def __init__(self, after: int) -> None:
        self._after = after
        self._claims = 0
        self._held = asyncio.Event()  # never set: the held fire waits until the process ends

    async def claimed(self, attempt_id: int) -> None:
        self._claims += 1
        if self._claims != self._after:
            return
        log.warning("%s %d (claim %d, %s)", PAUSED, attempt_id, self._claims, ENV)
        await self._held.wait()


def claim_fault_from(environ: Mapping[str, str]) -> ClaimFault | None:
    """The fault asked for by ``environ`` (None: none, the production case)."""
    raw = environ.get(ENV, "").strip()
    if not raw:
        return None
    try:
        after = int(raw)
    except ValueError:
        after = 0  # refused below, naming the variable
    if after < 1:
        raise ValueError(f"{ENV} must be a positive number of claims, got {raw!r}")
    log.warning("%s=%d: a test-only fault point is armed on this admin", ENV, after)
    return ClaimFault(after)
