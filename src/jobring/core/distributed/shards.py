"""Sharded runs with any shard count: which executor runs which shard, and where the
unfinished shards of a dead executor go.

A job's shard count is its own (``1..MAX_SHARDS``), independent of the number of executors:
64 shards over 5 executors puts 13 on four of them and 12 on the fifth. Each shard is a run
with ``broadcastIndex``/``broadcastTotal`` = its index and the count. The spread follows the
job's routing strategy where it means something for many shards (:func:`spread_for`):

- ROUND_ROBIN: shard ``i`` to the ``(offset + i)``-th executor in address order; the offset
  comes from the job, so different jobs put their extra shards on different executors.
  Counts differ by at most one.
- CONSISTENT_HASH: each shard's point on a ring of the executors (virtual nodes), skipping
  executors already holding ``ceil(N / M)`` shards (consistent hashing with bounded loads):
  a shard tends to stay on the same executor when executors come and go, and none holds
  more than ``ceil(N / M)``.
- LEAST_LOADED: each shard to the executor with the fewest runs (the loads given plus the
  shards assigned so far); ties by address.

Reassignment moves only the unfinished shards of executors that are gone, to the live ones
(filling the least loaded first, or along the ring for CONSISTENT_HASH): minimal movement.
"""

from __future__ import annotations

import bisect
import heapq
from collections import Counter
from collections.abc import Collection, Mapping, Sequence
from enum import StrEnum

from jobring.core.enums import RouteStrategy
from jobring.core.fielderror import FieldError
from jobring.core.routing import VIRTUAL_NODES, md5_hash

__all__ = [
    "MAX_SHARDS",
    "ShardError",
    "Spread",
    "assign_shards",
    "check_shard_total",
    "reassign_shards",
    "spread_for",
]

MAX_SHARDS = 10_000


class ShardError(FieldError):
    """Invalid sharding input; ``field`` names the offending field."""


class Spread(StrEnum):
    ROUND_ROBIN = "round_robin"
    CONSISTENT_HASH = "consistent_hash"
    LEAST_LOADED = "least_loaded"


# FIRST/LAST/RANDOM/ROUND/LRU/FAILOVER/SHARDING_BROADCAST spread evenly: putting every shard
# on one executor (FIRST, LAST) or on random ones defeats sharding, and the admin passes only
# live executors (what FAILOVER probes for). LFU and BUSYOVER prefer the least busy executor.
_SPREADS = {
    RouteStrategy.CONSISTENT_HASH: Spread.CONSISTENT_HASH,
    RouteStrategy.LEAST_FREQUENTLY_USED: Spread.LEAST_LOADED,
    RouteStrategy.BUSYOVER: Spread.LEAST_LOADED,
}


def spread_for(strategy: RouteStrategy) -> Spread:
    """How shards of a job with this routing strategy are spread."""
    return _SPREADS.get(strategy, Spread.ROUND_ROBIN)


def check_shard_total(total: int) -> int:
    """``total`` when it is a valid shard count, else ShardError naming ``shard_total``."""
    if not 1 <= total <= MAX_SHARDS:
        raise ShardError("shard_total", f"must be between 1 and {MAX_SHARDS}, not {total}")
    return total


def _executors(executors: Sequence[str]) -> list[str]:
    addresses = sorted(set(executors))
    if not addresses:
        raise ShardError("executors", "no executor to run the shards on")
    return addresses


class _Ring:
    """Executors on a hash ring (VIRTUAL_NODES points each), walked clockwise from a key."""

    def __init__(self, addresses: Sequence[str]) -> None:
        points = sorted((md5_hash(f"{a}#{v}"), a) for a in addresses for v in range(VIRTUAL_NODES))
        self._points = [p for p, _ in points]
        self._owners = [a for _, a in points]

    def first_below(self, key: str, load: Counter[str], cap: int) -> str:
        start = bisect.bisect_left(self._points, md5_hash(key))
        size = len(self._owners)
        for step in range(size):
            owner = self._owners[(start + step) % size]
            if load[owner] < cap:
                return owner
        raise RuntimeError("every executor is at the cap")  # the callers' caps make this unreachable


def _fill_least_loaded(shards: Sequence[int], addresses: Sequence[str], load: Counter[str]) -> dict[int, str]:
    heap = [(load[a], a) for a in addresses]
    heapq.heapify(heap)
    placed: dict[int, str] = {}
    for shard in shards:
        count, address = heapq.heappop(heap)
        placed[shard] = address
        load[address] = count + 1
        heapq.heappush(heap, (count + 1, address))
    return placed


def assign_shards(
    total: int,
    executors: Sequence[str],
    spread: Spread,
    *,
    job_key: str = "",
    loads: Mapping[str, int] | None = None,
) -> tuple[str, ...]:
    """The executor of each shard ``0..total-1``. ``job_key`` (e.g. the job id) picks the
    round-robin offset and the ring points; ``loads`` (runs already on each executor) is read
    by LEAST_LOADED only. Deterministic, and independent of the order of ``executors``."""
    check_shard_total(total)
    addresses = _executors(executors)
    if spread is Spread.ROUND_ROBIN:
        offset = md5_hash(job_key) % len(addresses)
        return tuple(addresses[(offset + i) % len(addresses)] for i in range(total))
    if spread is Spread.CONSISTENT_HASH:
        ring, load = _Ring(addresses), Counter[str]()
        cap = -(-total // len(addresses))
        out = []
        for i in range(total):
            owner = ring.first_below(f"{job_key}/{i}", load, cap)
            load[owner] += 1
            out.append(owner)
        return tuple(out)
    start = Counter({a: (loads or {}).get(a, 0) for a in addresses})
    placed = _fill_least_loaded(range(total), addresses, start)
    return tuple(placed[i] for i in range(total))


def reassign_shards(
    assignment: Sequence[str],
    live: Sequence[str],
    finished: Collection[int],
    spread: Spread,
    *,
    job_key: str = "",
    loads: Mapping[str, int] | None = None,
) -> dict[int, str]:
    """The moves (shard index -> live executor) for the unfinished shards whose executor is not
    in ``live``; every other shard stays where it is. The live executors' load is their
    unfinished shards (plus ``loads``, runs of other jobs, for LEAST_LOADED); the orphans
    fill the least loaded first (along the ring, under ``ceil(unfinished / live)`` each, for
    CONSISTENT_HASH). ShardError when no executor is live."""
    addresses = _executors(live)
    alive = set(addresses)
    unfinished = [i for i in range(len(assignment)) if i not in finished]
    orphans = [i for i in unfinished if assignment[i] not in alive]
    if not orphans:
        return {}
    load = Counter(dict.fromkeys(addresses, 0))
    load.update(assignment[i] for i in unfinished if assignment[i] in alive)
    if spread is Spread.CONSISTENT_HASH:
        ring = _Ring(addresses)
        cap = -(-len(unfinished) // len(addresses))
        moves: dict[int, str] = {}
        for shard in orphans:
            owner = ring.first_below(f"{job_key}/{shard}", load, cap)
            load[owner] += 1
            moves[shard] = owner
        return moves
    if spread is Spread.LEAST_LOADED and loads:
        load.update({a: loads.get(a, 0) for a in addresses})
    return _fill_least_loaded(orphans, addresses, load)
