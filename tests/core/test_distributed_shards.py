"""Shard assignment over any number of executors, and minimal-movement reassignment."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jobring.core.distributed.shards import (
    MAX_SHARDS,
    ShardError,
    Spread,
    assign_shards,
    check_shard_total,
    reassign_shards,
    spread_for,
)
from jobring.core.enums import RouteStrategy

EXECUTORS = [f"http://10.0.0.{i}:9999/" for i in range(1, 6)]


def test_64_shards_over_5_executors_round_robin() -> None:
    shards = assign_shards(64, EXECUTORS, Spread.ROUND_ROBIN, job_key="42")
    assert sorted(Counter(shards).values()) == [12, 13, 13, 13, 13]
    # Consecutive shards go to consecutive executors (address order), from a per-job offset.
    order = sorted(EXECUTORS)
    start = order.index(shards[0])
    assert list(shards) == [order[(start + i) % 5] for i in range(64)]
    offsets = {assign_shards(1, EXECUTORS, Spread.ROUND_ROBIN, job_key=str(job))[0] for job in range(40)}
    assert offsets == set(EXECUTORS)  # different jobs put their extra shards on different executors


def test_least_loaded_fills_the_idle_executors_first() -> None:
    loads = {EXECUTORS[0]: 5, EXECUTORS[1]: 2}
    shards = assign_shards(8, EXECUTORS, Spread.LEAST_LOADED, loads=loads)
    final = Counter(shards) + Counter(loads)
    # The busiest gets nothing; the other four end with 2 or 3 runs each.
    assert final[EXECUTORS[0]] == 5
    assert sorted(final[e] for e in EXECUTORS[1:]) == [2, 2, 3, 3]


def test_consistent_hash_keeps_most_shards_when_an_executor_joins() -> None:
    before = assign_shards(200, EXECUTORS[:4], Spread.CONSISTENT_HASH, job_key="7")
    after = assign_shards(200, EXECUTORS, Spread.CONSISTENT_HASH, job_key="7")
    kept = sum(a == b for a, b in zip(before, after, strict=True))
    # Round-robin would keep about a fifth; the ring keeps most (the newcomer takes about 40).
    assert kept >= 120, kept
    assert max(Counter(after).values()) <= 40


def test_spread_of_each_routing_strategy() -> None:
    assert spread_for(RouteStrategy.CONSISTENT_HASH) is Spread.CONSISTENT_HASH
    assert spread_for(RouteStrategy.BUSYOVER) is Spread.LEAST_LOADED
    assert spread_for(RouteStrategy.LEAST_FREQUENTLY_USED) is Spread.LEAST_LOADED
    for strategy in (RouteStrategy.FIRST, RouteStrategy.ROUND, RouteStrategy.RANDOM,
                     RouteStrategy.SHARDING_BROADCAST, RouteStrategy.FAILOVER):
        assert spread_for(strategy) is Spread.ROUND_ROBIN


def test_bad_counts_and_no_executor_are_refused() -> None:
    for total in (0, MAX_SHARDS + 1):
        with pytest.raises(ShardError) as err:
            assign_shards(total, EXECUTORS, Spread.ROUND_ROBIN)
        assert err.value.field == "shard_total"
    assert check_shard_total(MAX_SHARDS) == MAX_SHARDS
    with pytest.raises(ShardError) as err:
        assign_shards(3, [], Spread.ROUND_ROBIN)
    assert err.value.field == "executors"
    with pytest.raises(ShardError):
        reassign_shards(["a"], [], (), Spread.ROUND_ROBIN)


def test_reassignment_moves_only_the_dead_executors_unfinished_shards() -> None:
    shards = assign_shards(10, EXECUTORS[:3], Spread.ROUND_ROBIN, job_key="1")
    dead = shards[0]
    live = [e for e in EXECUTORS[:3] if e != dead]
    finished = {0}
    moves = reassign_shards(shards, live, finished, Spread.ROUND_ROBIN)
    assert set(moves) == {i for i, e in enumerate(shards) if e == dead and i not in finished}
    assert set(moves.values()) <= set(live)
    assert reassign_shards(shards, EXECUTORS[:3], (), Spread.ROUND_ROBIN) == {}


spreads = st.sampled_from(list(Spread))
addresses = st.lists(st.sampled_from(EXECUTORS + ["http://b:1/", "http://c:1/"]), min_size=1, max_size=7)


@settings(max_examples=150, deadline=None)
@given(total=st.integers(1, 300), executors=addresses, spread=spreads, job=st.integers(0, 10**6),
       loads=st.dictionaries(st.sampled_from(EXECUTORS), st.integers(0, 20)))
def test_assignment_is_stable_and_balanced(
    total: int, executors: list[str], spread: Spread, job: int, loads: dict[str, int]
) -> None:
    shards = assign_shards(total, executors, spread, job_key=str(job), loads=loads)
    assert len(shards) == total and set(shards) <= set(executors)
    assert shards == assign_shards(total, list(reversed(executors)), spread, job_key=str(job), loads=loads)
    distinct = sorted(set(executors))
    counts = Counter(shards)
    counts.update(dict.fromkeys(distinct, 0))  # executors with no shard count as 0
    if spread is Spread.ROUND_ROBIN:
        assert max(counts.values()) - min(counts.values()) <= 1
    elif spread is Spread.CONSISTENT_HASH:
        assert max(counts.values()) <= -(-total // len(distinct))
    else:
        final = {e: counts[e] + loads.get(e, 0) for e in distinct}
        lowest = min(final.values())
        assert all(final[e] <= lowest + 1 for e in distinct if counts[e] > 0)


@settings(max_examples=200, deadline=None)
@given(total=st.integers(1, 200), executors=st.lists(st.sampled_from(EXECUTORS), min_size=2, unique=True),
       spread=spreads, data=st.data())
def test_reassignment_moves_exactly_the_orphans_and_keeps_the_balance(
    total: int, executors: list[str], spread: Spread, data: st.DataObject
) -> None:
    shards = assign_shards(total, executors, spread, job_key="9")
    dead = data.draw(st.lists(st.sampled_from(executors), min_size=1, max_size=len(executors) - 1,
                              unique=True))
    live = [e for e in executors if e not in dead]
    finished = data.draw(st.sets(st.integers(0, total - 1)))
    moves = reassign_shards(shards, live, finished, spread, job_key="9")
    orphans = {i for i, e in enumerate(shards) if e in dead and i not in finished}
    assert set(moves) == orphans  # minimal movement: nothing else moves
    assert set(moves.values()) <= set(live)
    after = [moves.get(i, e) for i, e in enumerate(shards)]
    unfinished = [i for i in range(total) if i not in finished]
    before_load = Counter(shards[i] for i in unfinished if shards[i] in live)
    load = Counter(dict.fromkeys(live, 0))
    load.update(after[i] for i in unfinished)
    bound = max(max(before_load.values(), default=0), -(-len(unfinished) // len(live)))
    assert max(load.values()) <= bound
    if spread is not Spread.CONSISTENT_HASH:
        receivers = set(moves.values())
        assert all(load[e] <= min(load.values()) + 1 for e in receivers)
