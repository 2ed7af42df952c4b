"""A histogram's bucket counts kept in plain integers: cheap enough for the fire path (no lock:
one event loop writes, a metrics scrape on the same loop reads)."""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Sequence

__all__ = ["Buckets", "LATENCY_MS_BOUNDS"]

# Upper bounds in ms, for lateness and latency of network calls and statements.
LATENCY_MS_BOUNDS: tuple[float, ...] = (1, 2, 5, 10, 25, 50, 100, 250, 500, 1_000, 2_500, 5_000, 10_000)


class Buckets:
    """Counts of observations per bucket (``le`` upper bounds), their sum and count."""

    __slots__ = ("bounds", "counts", "sum", "count")

    def __init__(self, bounds: Sequence[float] = LATENCY_MS_BOUNDS) -> None:
        self.bounds = tuple(bounds)
        self.counts = [0] * (len(self.bounds) + 1)  # the last one: above every bound (+Inf)
        self.sum = 0.0
        self.count = 0

    def observe(self, value: float) -> None:
        self.counts[bisect_left(self.bounds, value)] += 1
        self.sum += value
        self.count += 1

    def cumulative(self) -> list[tuple[str, int]]:
        """``[(le, cumulative count), ..., ("+Inf", count)]`` as Prometheus exposes them."""
        out: list[tuple[str, int]] = []
        total = 0
        for bound, n in zip((*self.bounds, float("inf")), self.counts, strict=True):
            total += n
            out.append(("+Inf" if bound == float("inf") else repr(float(bound)), total))
        return out
