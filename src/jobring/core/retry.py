"""Retry timing: when the retry of a failed run is due (pure; times in milliseconds)."""

from __future__ import annotations

from enum import StrEnum


class RetryBackoff(StrEnum):
    FIXED = "fixed"
    EXPONENTIAL = "exponential"


class AlarmOn(StrEnum):
    """Which failures alarm: only the last (no retry follows), or each one."""

    FAILURE_FINAL = "failure_final"
    EVERY_FAILURE = "every_failure"


def retry_delay_ms(attempt: int, interval_s: int, backoff: str, max_s: int) -> int:
    """The wait before retrying run number ``attempt`` (1 = the first run) that failed.

    Fixed: ``interval_s`` each time. Exponential: ``interval_s * 2**(attempt-1)``, at most
    ``max_s`` (when positive).
    """
    if interval_s <= 0:
        return 0
    if backoff == RetryBackoff.EXPONENTIAL:
        seconds = interval_s * 2 ** min(max(attempt - 1, 0), 40)
        if max_s > 0:
            seconds = min(seconds, max_s)
        return int(seconds * 1000)
    return interval_s * 1000
