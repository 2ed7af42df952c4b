"""Routing strategies: which executor address(es) of a group receive a trigger.

Pure logic: no I/O and no clock reads. The time of the route is passed in (for the daily
reset of per-job counters), randomness comes from an injectable ``random.Random``, and the
two strategies that must ask executors (FAILOVER via ``/beat``, BUSYOVER via
``/idleBeat``) get an async probe injected by the admin.

State (round-robin counters, usage counts) is per admin node, as in the reference.
"""

from __future__ import annotations

import bisect
import hashlib
import random
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Protocol

from jobring.core.enums import RouteStrategy

DAY_MS = 24 * 60 * 60 * 1000
VIRTUAL_NODES = 100
# Counters are restarted before they grow without bound (the reference's limit).
_COUNTER_LIMIT = 1_000_000

# Strategies whose choice of executor is the point (a fixed one, the same one for a job, one
# that answered a probe, each shard its own): a run routed by one must run where it was routed
# (for a broker executor: through that executor's own queue). ROUND, RANDOM and
# LEAST_FREQUENTLY/RECENTLY_USED only spread the load, which a shared queue does by itself.
PINNED_STRATEGIES = frozenset({
    RouteStrategy.FIRST, RouteStrategy.LAST, RouteStrategy.CONSISTENT_HASH, RouteStrategy.FAILOVER,
    RouteStrategy.BUSYOVER, RouteStrategy.SHARDING_BROADCAST,
})



class ProbeAnswer(Protocol):
    """An executor's answer to a probe (the wire's ``ReturnT`` is one; core reads only these)."""

    @property
    def code(self) -> int: ...
    @property
    def msg(self) -> str | None: ...
    @property
    def ok(self) -> bool: ...


@dataclass(frozen=True, slots=True)
class _Unanswered:
    msg: str
    code: int = 500  # XXL-JOB's failure code
    ok: bool = False


Probe = Callable[[str, int], Awaitable[ProbeAnswer]]
"""``probe(address, job_id)``: ask one executor; a failed answer (never an exception) on error."""


@dataclass(frozen=True, slots=True)
class RouteResult:
    """The chosen addresses (one, or all for SHARDING_BROADCAST) and a message for the log."""

    addresses: tuple[str, ...]
    msg: str | None = None

    @property
    def ok(self) -> bool:
        return bool(self.addresses)

    @property
    def address(self) -> str | None:
        return self.addresses[0] if self.addresses else None


class _DailyState:
    """Per-job state that is dropped when a day has passed since it was started."""

    def __init__(self) -> None:
        self._valid_until = -1

    def _expire(self, now_ms: int) -> bool:
        if now_ms > self._valid_until:
            self._valid_until = now_ms + DAY_MS
            return True
        return False


class RoundRobin(_DailyState):
    """ROUND: a per-job counter that starts at a random value and is reset daily."""

    def __init__(self, rng: random.Random) -> None:
        super().__init__()
        self._rng = rng
        self._counts: dict[int, int] = {}

    def pick(self, job_id: int, addresses: Sequence[str], now_ms: int) -> str:
        if self._expire(now_ms):
            self._counts.clear()
        count = self._counts.get(job_id)
        # A random start spreads jobs that begin together over the addresses.
        count = self._rng.randrange(100) if count is None or count > _COUNTER_LIMIT else count + 1
        self._counts[job_id] = count
        return addresses[count % len(addresses)]


class LeastFrequentlyUsed(_DailyState):
    """LEAST_FREQUENTLY_USED: per job, the address used least often today."""

    def __init__(self, rng: random.Random) -> None:
        super().__init__()
        self._rng = rng
        self._uses: dict[int, dict[str, int]] = {}

    def pick(self, job_id: int, addresses: Sequence[str], now_ms: int) -> str:
        if self._expire(now_ms):
            self._uses.clear()
        uses = self._uses.setdefault(job_id, {})
        current = set(addresses)
        for gone in [a for a in uses if a not in current]:
            del uses[gone]
        for address in addresses:
            if uses.get(address, _COUNTER_LIMIT + 1) > _COUNTER_LIMIT:
                # A random initial count avoids sending every new job to the same address.
                uses[address] = self._rng.randrange(len(addresses))
        chosen = min(addresses, key=lambda a: uses[a])
        uses[chosen] += 1
        return chosen


class LeastRecentlyUsed(_DailyState):
    """LEAST_RECENTLY_USED: per job, the address whose last use is the oldest."""

    def __init__(self) -> None:
        super().__init__()
        self._order: dict[int, OrderedDict[str, None]] = {}

    def pick(self, job_id: int, addresses: Sequence[str], now_ms: int) -> str:
        if self._expire(now_ms):
            self._order.clear()
        order = self._order.setdefault(job_id, OrderedDict())
        current = set(addresses)
        for gone in [a for a in order if a not in current]:
            del order[gone]
        for address in addresses:
            if address not in order:
                order[address] = None
        chosen = next(iter(order))
        order.move_to_end(chosen)
        return chosen


def md5_hash(key: str) -> int:
    """The reference's ring hash: the first four MD5 bytes as an unsigned little-endian int."""
    return int.from_bytes(hashlib.md5(key.encode("utf-8")).digest()[:4], "little")


@lru_cache(maxsize=256)
def _hash_ring(addresses: tuple[str, ...]) -> tuple[list[int], list[str]]:
    points: dict[int, str] = {}
    for address in addresses:
        for i in range(VIRTUAL_NODES):
            points[md5_hash(f"SHARD-{address}-NODE-{i}")] = address
    keys = sorted(points)
    return keys, [points[k] for k in keys]


def consistent_hash(job_id: int, addresses: Sequence[str]) -> str:
    """CONSISTENT_HASH: the job id's point on an MD5 ring of 100 virtual nodes per address.

    Adding or removing one address moves only the jobs whose arc it takes or frees.
    """
    keys, owners = _hash_ring(tuple(sorted(addresses)))
    index = bisect.bisect_left(keys, md5_hash(str(job_id)))
    return owners[index % len(owners)]


def declaring(
    handler: str | None, addresses: Sequence[str], declared: Mapping[str, frozenset[str]]
) -> tuple[list[str], list[str]]:
    """The addresses that may receive a job of ``handler``, and those passed over.

    ``declared`` maps an address to the handlers its executor declared (jobring executors);
    an address without an entry declared nothing (XXL-JOB's, pyxxl, older jobring) and may
    receive every job, as before declarations existed. ``handler`` None (a GLUE job) passes
    every address. Every strategy routes among the first list only, so FIRST, a failover
    probe or a broadcast never picks an executor that lacks the handler.
    """
    if handler is None or not declared:
        return list(addresses), []
    able: list[str] = []
    passed: list[str] = []
    for address in addresses:
        names = declared.get(address)
        (able if names is None or handler in names else passed).append(address)
    return able, passed


def _probe_line(kind: str, address: str, answer: ProbeAnswer) -> str:
    return f"{kind}: address={address} code={answer.code} msg={answer.msg}"


async def _first_answering(kind: str, probe: Probe, job_id: int, addresses: Sequence[str]) -> RouteResult:
    lines: list[str] = []
    for address in addresses:
        answer = await probe(address, job_id)
        lines.append(_probe_line(kind, address, answer))
        if answer.ok:
            return RouteResult((address,), "\n".join(lines))
    return RouteResult((), "\n".join(lines))


async def _no_probe(address: str, job_id: int) -> ProbeAnswer:
    return _Unanswered("no probe configured")


class Router:
    """All strategies with their per-node state; one instance per admin node."""

    def __init__(
        self,
        *,
        rng: random.Random | None = None,
        beat: Probe | None = None,
        idle_beat: Probe | None = None,
    ) -> None:
        self._rng = rng or random.Random()
        self._beat = beat or _no_probe
        self._idle_beat = idle_beat or _no_probe
        self._round = RoundRobin(self._rng)
        self._lfu = LeastFrequentlyUsed(self._rng)
        self._lru = LeastRecentlyUsed()

    async def route(
        self, strategy: RouteStrategy, job_id: int, addresses: Sequence[str], now_ms: int,
        probes: tuple[Probe, Probe] | None = None,
    ) -> RouteResult:
        """Pick the address(es) for one trigger; no addresses gives an empty result.
        ``probes`` (beat, idleBeat) replace the router's own for this call."""
        if not addresses:
            return RouteResult((), "registry address is empty")
        beat, idle_beat = probes or (self._beat, self._idle_beat)
        if strategy is RouteStrategy.FAILOVER:
            return await _first_answering("beat", beat, job_id, addresses)
        if strategy is RouteStrategy.BUSYOVER:
            return await _first_answering("idleBeat", idle_beat, job_id, addresses)
        return self.route_now(strategy, job_id, addresses, now_ms)

    def route_now(
        self, strategy: RouteStrategy, job_id: int, addresses: Sequence[str], now_ms: int
    ) -> RouteResult:
        """The strategies that need no probe, synchronously."""
        if not addresses:
            return RouteResult((), "registry address is empty")
        match strategy:
            case RouteStrategy.FIRST:
                chosen = addresses[0]
            case RouteStrategy.LAST:
                chosen = addresses[-1]
            case RouteStrategy.ROUND:
                chosen = self._round.pick(job_id, addresses, now_ms)
            case RouteStrategy.RANDOM:
                chosen = addresses[self._rng.randrange(len(addresses))]
            case RouteStrategy.CONSISTENT_HASH:
                chosen = consistent_hash(job_id, addresses)
            case RouteStrategy.LEAST_FREQUENTLY_USED:
                chosen = self._lfu.pick(job_id, addresses, now_ms)
            case RouteStrategy.LEAST_RECENTLY_USED:
                chosen = self._lru.pick(job_id, addresses, now_ms)
            case RouteStrategy.SHARDING_BROADCAST:
                return RouteResult(tuple(addresses))
            case _:
                raise ValueError(f"strategy {strategy} needs a probe: use route()")
        return RouteResult((chosen,))


def parse_strategy(name: str | None) -> RouteStrategy | None:
    """The strategy named in a job row, or None when the name is unknown."""
    try:
        return RouteStrategy(name) if name else None
    except ValueError:
        return None
