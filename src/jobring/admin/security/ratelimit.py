"""Login rate limiting, in memory: a backoff per (user name, client address) and a looser cap
per client address.

- Per (user, address): the first ``free_failures`` failures cost nothing; each later one makes
  the next attempt wait ``base_delay_ms * 2**k`` (1 s, 2 s, 4 s, ... up to ``max_delay_ms``).
  A success or ``forget_after_ms`` without failures clears it. Someone guessing a user's
  password from one address slows down only themselves: the user logs in from elsewhere.
- Per address: at most ``address_max_failures`` failures (any user names) per ``window_ms``,
  which bounds spraying many names from one address.

The client address is the TCP peer, or what a configured trusted proxy forwarded (uvicorn
applies ``JOBRING_TRUSTED_PROXIES``); headers from anyone else are ignored. Each admin node
counts on its own, which bounds online guessing per node.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from jobring.core.clock import Clock, SystemClock


@dataclass(slots=True)
class _Backoff:
    failures: int
    last_ms: int


class LoginRateLimiter:
    """Failed-login accounting; :meth:`retry_after_s` says how long a login must wait."""

    def __init__(
        self,
        *,
        free_failures: int = 5,
        base_delay_ms: int = 1000,
        max_delay_ms: int = 5 * 60_000,
        forget_after_ms: int = 15 * 60_000,
        address_max_failures: int = 30,
        window_ms: int = 5 * 60_000,
        clock: Clock | None = None,
        max_keys: int = 10_000,
    ) -> None:
        self.free_failures = free_failures
        self.base_delay_ms = base_delay_ms
        self.max_delay_ms = max_delay_ms
        self.forget_after_ms = forget_after_ms
        self.address_max_failures = address_max_failures
        self.window_ms = window_ms
        self._clock = clock or SystemClock()
        self._max_keys = max_keys
        self._pairs: dict[tuple[str, str], _Backoff] = {}
        self._addresses: dict[str, deque[int]] = {}

    def delay_ms(self, failures: int) -> int:
        """How long the attempt after ``failures`` consecutive failures must wait."""
        extra = failures - self.free_failures
        if extra < 0:
            return 0
        return min(self.base_delay_ms * (1 << min(extra, 40)), self.max_delay_ms)

    def retry_after_s(self, username: str, address: str) -> int:
        """Seconds until a login of ``username`` from ``address`` may be tried; 0 when now."""
        now = self._clock.now_ms()
        wait_ms = 0
        pair = self._pair(username, address, now)
        if pair is not None:
            wait_ms = pair.last_ms + self.delay_ms(pair.failures) - now
        times = self._recent(address, now)
        if len(times) >= self.address_max_failures:
            wait_ms = max(wait_ms, times[-self.address_max_failures] + self.window_ms - now)
        return max(0, -(-wait_ms // 1000))

    def record_failure(self, username: str, address: str) -> None:
        now = self._clock.now_ms()
        if len(self._pairs) >= self._max_keys or len(self._addresses) >= self._max_keys:
            self._evict(now)
        key = (username.lower(), address)
        pair = self._pair(username, address, now)
        if pair is None:
            self._pairs[key] = _Backoff(1, now)
        else:
            pair.failures += 1
            pair.last_ms = now
        times = self._addresses.setdefault(address, deque(maxlen=self.address_max_failures))
        times.append(now)

    def record_success(self, username: str, address: str) -> None:
        """Clears the (user, address) backoff; the address's recent failures still count."""
        self._pairs.pop((username.lower(), address), None)

    def _pair(self, username: str, address: str, now: int) -> _Backoff | None:
        key = (username.lower(), address)
        pair = self._pairs.get(key)
        if pair is not None and now - pair.last_ms >= self.forget_after_ms + self.delay_ms(pair.failures):
            del self._pairs[key]
            return None
        return pair

    def _recent(self, address: str, now: int) -> deque[int]:
        times = self._addresses.get(address)
        if times is None:
            return deque()
        while times and times[0] <= now - self.window_ms:
            times.popleft()
        if not times:
            del self._addresses[address]
        return times

    def _evict(self, now: int) -> None:
        # Drop stale entries; if all are fresh, drop the oldest half so memory stays bounded.
        for username, address in list(self._pairs):
            self._pair(username, address, now)
        for address in list(self._addresses):
            self._recent(address, now)
        if len(self._pairs) >= self._max_keys:
            by_age = sorted(self._pairs, key=lambda k: self._pairs[k].last_ms)
            for key in by_age[: self._max_keys // 2]:
                del self._pairs[key]
        if len(self._addresses) >= self._max_keys:
            oldest = sorted(self._addresses, key=lambda a: self._addresses[a][-1])
            for address in oldest[: self._max_keys // 2]:
                del self._addresses[address]
