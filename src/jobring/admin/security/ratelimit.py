"""Login rate limiting: failed attempts per user name and per client address, in memory.

Each admin node counts on its own; that bounds guessing per node, which is what matters
for an online attack against a handful of nodes.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable

from jobring.core.clock import Clock, SystemClock


class LoginRateLimiter:
    """At most ``max_failures`` failed logins per key within ``window_ms``."""

    def __init__(
        self,
        max_failures: int = 5,
        window_ms: int = 5 * 60_000,
        clock: Clock | None = None,
        max_keys: int = 10_000,
    ) -> None:
        self.max_failures = max_failures
        self.window_ms = window_ms
        self._clock = clock or SystemClock()
        self._max_keys = max_keys
        self._failures: dict[str, deque[int]] = {}

    def _now(self) -> int:
        return self._clock.now_ms()

    def _recent(self, key: str, now: int) -> deque[int]:
        times = self._failures.get(key)
        if times is None:
            return deque()
        while times and times[0] <= now - self.window_ms:
            times.popleft()
        if not times:
            del self._failures[key]
        return times

    def retry_after_s(self, keys: list[str]) -> int:
        """Seconds until a login for ``keys`` may be tried again; 0 when it may now."""
        now = self._now()
        wait_ms = 0
        for key in keys:
            times = self._recent(key, now)
            if len(times) >= self.max_failures:
                wait_ms = max(wait_ms, times[-self.max_failures] + self.window_ms - now)
        return -(-wait_ms // 1000)

    def record_failure(self, keys: list[str]) -> None:
        now = self._now()
        if len(self._failures) >= self._max_keys:
            self._evict(now)
        for key in keys:
            self._failures.setdefault(key, deque(maxlen=self.max_failures * 4)).append(now)

    def record_success(self, keys: list[str]) -> None:
        for key in keys:
            self._failures.pop(key, None)

    def _evict(self, now: int) -> None:
        # Drop stale keys; if all are fresh, drop the oldest half so memory stays bounded.
        for key in list(self._failures):
            self._recent(key, now)
        if len(self._failures) >= self._max_keys:
            oldest: Callable[[str], int] = lambda k: self._failures[k][-1]  # noqa: E731
            for key in sorted(self._failures, key=oldest)[: self._max_keys // 2]:
                del self._failures[key]
