"""Global rate limits: a token bucket per scope whose state is two integers in one row.

A bucket holds at most ``burst`` tokens (default ``limit``) and refills at ``limit`` tokens
per ``period_ms``; a run takes one token to start. The level is kept in millionths of a token
(:data:`TOKEN_UNITS`) so the state is two integers and every step is exact integer
arithmetic: a refill adds ``floor(elapsed_ms * limit * TOKEN_UNITS / period_ms)`` units. The
floor drops less than a millionth of a token per refill and never adds one, so the bucket
never admits more than its rate allows: over any interval of ``d`` ms at most
``burst + floor(d * limit / period_ms)`` runs start.

The state is global because the admin stores it in the database and changes it inside the
admission transaction. ``(stamp_ms, level)`` only ever moves forward: the stamp never goes
back (a node whose clock is behind refills nothing) and at an unchanged stamp the level can
only fall. So a changed state never equals an earlier one, and a conditional update on the
old pair is a safe compare-and-set (no ABA)::

    UPDATE flow_bucket SET level = :new_level, stamp_ms = :new_stamp
     WHERE scope = :scope AND level = :old_level AND stamp_ms = :old_stamp

(an INSERT when there was no row). No row updated means another node took tokens first:
read again and decide again. A node whose clock runs ahead refills early by at most the skew.
"""

from __future__ import annotations

from dataclasses import dataclass

from jobring.core.flow.scopes import FlowError

__all__ = [
    "MAX_RATE",
    "MAX_RATE_PERIOD_MS",
    "TOKEN_UNITS",
    "BucketState",
    "RateLimit",
    "bucket_now",
    "full_bucket",
    "ready_at",
    "supersedes",
    "take",
]

TOKEN_UNITS = 1_000_000
MAX_RATE = 1_000_000
MAX_RATE_PERIOD_MS = 24 * 60 * 60 * 1000


@dataclass(frozen=True, slots=True)
class RateLimit:
    """At most ``limit`` starts per ``period_ms`` (1000: per second, 60000: per minute), with
    bursts of up to ``burst`` starts (default: ``limit``)."""

    limit: int
    period_ms: int
    burst: int | None = None

    def __post_init__(self) -> None:
        if not 1 <= self.limit <= MAX_RATE:
            raise FlowError("rate_limit", f"the limit must be between 1 and {MAX_RATE}")
        if not 1 <= self.period_ms <= MAX_RATE_PERIOD_MS:
            raise FlowError("rate_period_ms", f"the period must be between 1 ms and {MAX_RATE_PERIOD_MS} ms")
        if self.burst is not None and not 1 <= self.burst <= MAX_RATE:
            raise FlowError("rate_burst", f"the burst must be between 1 and {MAX_RATE}")

    @property
    def capacity(self) -> int:
        """The bucket's size in units."""
        return (self.limit if self.burst is None else self.burst) * TOKEN_UNITS


@dataclass(frozen=True, slots=True)
class BucketState:
    """A bucket's level (in :data:`TOKEN_UNITS` per token) as of ``stamp_ms``."""

    level: int
    stamp_ms: int

    def to_row(self) -> dict[str, int]:
        return {"level": self.level, "stamp_ms": self.stamp_ms}

    @classmethod
    def from_row(cls, row: dict[str, int]) -> BucketState:
        return cls(int(row["level"]), int(row["stamp_ms"]))


def full_bucket(rate: RateLimit, now_ms: int) -> BucketState:
    """The state of a bucket that has no row yet."""
    return BucketState(rate.capacity, now_ms)


def bucket_now(rate: RateLimit, state: BucketState | None, now_ms: int) -> BucketState:
    """The bucket refilled up to ``now_ms`` (clamped to the current capacity, which may have
    shrunk since the state was written)."""
    if state is None:
        return full_bucket(rate, now_ms)
    elapsed = max(0, now_ms - state.stamp_ms)
    level = state.level + elapsed * rate.limit * TOKEN_UNITS // rate.period_ms
    return BucketState(min(rate.capacity, level), max(state.stamp_ms, now_ms))


def take(rate: RateLimit, state: BucketState | None, now_ms: int, tokens: int = 1) -> BucketState | None:
    """The state after taking ``tokens`` at ``now_ms``, or None when the bucket lacks them."""
    current = bucket_now(rate, state, now_ms)
    need = tokens * TOKEN_UNITS
    if current.level < need:
        return None
    return BucketState(current.level - need, current.stamp_ms)


def ready_at(rate: RateLimit, state: BucketState | None, now_ms: int, tokens: int = 1) -> int | None:
    """An instant at which taking ``tokens`` succeeds (``now_ms`` when it already does): the
    first one counted from the state refilled at ``now_ms``, which a refill from an older stamp
    may beat by a rounding step. None when it never can (more tokens than the capacity)."""
    need = tokens * TOKEN_UNITS
    if need > rate.capacity:
        return None
    current = bucket_now(rate, state, now_ms)
    deficit = need - current.level
    if deficit <= 0:
        return now_ms
    per_ms = rate.limit * TOKEN_UNITS
    return current.stamp_ms + (deficit * rate.period_ms + per_ms - 1) // per_ms


def supersedes(new: BucketState, old: BucketState) -> bool:
    """True when ``new`` is a later state than ``old`` (the order the module docstring proves)."""
    return new.stamp_ms > old.stamp_ms or (new.stamp_ms == old.stamp_ms and new.level < old.level)
