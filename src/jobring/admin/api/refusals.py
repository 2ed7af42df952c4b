"""A budget of refused callback items per executor token.

An honest executor reports results of runs the admin sent it; a result for a run that does
not exist (or belongs to another group) is rare: a run deleted by retention while its
result waited in a spool. A token whose batches keep naming such runs is flooding: each
1,000-item batch costs the admin a decode and a query, and on a 2-core machine that is CPU
the scheduling loop needs. So each token has a bucket of refused items (``REFUSED_PER_S``
per second, bursts of ``REFUSED_BURST``); every refused item takes one, the level may go
into debt, and while it is not positive the token's callbacks are answered HTTP 429 with
``Retry-After`` before their bodies are read. An executor keeps results answered 429 and
sends them again later (jobring's spool, XXL-JOB's retry file), so an honest executor that
shares a token with a flooding one loses nothing, it only waits.

The state is per admin node and in memory: a flood spread over nodes gets each node's
budget, and a restart forgives the debt.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable

from jobring.core.flow.ratelimit import TOKEN_UNITS, BucketState, RateLimit, bucket_now

__all__ = ["REFUSED_BURST", "REFUSED_PER_S", "RefusalBudget"]

REFUSED_PER_S = 1_000
REFUSED_BURST = 2_000
REFUSED_RATE = RateLimit(REFUSED_PER_S, 1_000, REFUSED_BURST)
# Distinct tokens remembered; only tokens the admin accepted get an entry, so this is a
# safety bound, not a limit a real set-up meets.
_MAX_TOKENS = 10_000


class RefusalBudget:
    """Per key (a token's scope): how many refused items it may still cause."""

    def __init__(self, now_ms: Callable[[], int], rate: RateLimit = REFUSED_RATE) -> None:
        self._now_ms = now_ms
        self._rate = rate
        self._states: dict[Hashable, BucketState] = {}

    def retry_after_s(self, key: Hashable) -> int:
        """0 when ``key`` may send a callback now; else the seconds until it may."""
        state = self._states.get(key)
        if state is None:
            return 0
        current = bucket_now(self._rate, state, self._now_ms())
        if current.level > 0:
            return 0
        per_s = self._rate.limit * TOKEN_UNITS * 1_000 // self._rate.period_ms
        return max(1, -(-(1 - current.level) // per_s))

    def charge(self, key: Hashable, refused: int) -> None:
        """Takes ``refused`` items from ``key``'s bucket (into debt when it lacks them)."""
        if refused <= 0:
            return
        if key not in self._states and len(self._states) >= _MAX_TOKENS:
            self._states.clear()  # forgetting debts is safe: it only admits a few batches early
        current = bucket_now(self._rate, self._states.get(key), self._now_ms())
        self._states[key] = BucketState(current.level - refused * TOKEN_UNITS, current.stamp_ms)
