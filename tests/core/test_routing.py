from __future__ import annotations

import random
from collections import Counter

import pytest

from jobring.core.enums import RouteStrategy
from jobring.core.routing import DAY_MS, Router, consistent_hash, declaring, md5_hash
from jobring.protocol.models import ReturnT

ADDRS = ["http://10.0.0.1:9999/", "http://10.0.0.2:9999/", "http://10.0.0.3:9999/"]
T0 = 1_700_000_000_000


def pick(router: Router, strategy: RouteStrategy, job_id: int, addrs: list[str], now: int = T0) -> str:
    result = router.route_now(strategy, job_id, addrs, now)
    assert result.address is not None
    return result.address


def test_first_and_last() -> None:
    router = Router(rng=random.Random(1))
    assert pick(router, RouteStrategy.FIRST, 1, ADDRS) == ADDRS[0]
    assert pick(router, RouteStrategy.LAST, 1, ADDRS) == ADDRS[-1]


async def test_empty_address_list_fails_with_message() -> None:
    router = Router()
    for strategy in RouteStrategy:
        result = await router.route(strategy, 1, [], T0)
        assert not result.ok and result.msg == "registry address is empty"


def test_round_cycles_through_addresses_from_a_random_start() -> None:
    router = Router(rng=random.Random(7))
    seq = [pick(router, RouteStrategy.ROUND, 5, ADDRS) for _ in range(9)]
    start = ADDRS.index(seq[0])
    assert seq == [ADDRS[(start + i) % 3] for i in range(9)]


def test_round_counters_are_per_job_and_reset_daily() -> None:
    rng = random.Random(3)
    router = Router(rng=rng)
    a = [pick(router, RouteStrategy.ROUND, 1, ADDRS) for _ in range(3)]
    assert sorted(a) == sorted(ADDRS)
    # Another job has its own counter: its first pick draws a new random start.
    state = rng.getstate()
    first_other = pick(router, RouteStrategy.ROUND, 2, ADDRS)
    rng.setstate(state)
    assert first_other == ADDRS[rng.randrange(100) % 3]
    # After a day the counters restart from a random value again.
    state = rng.getstate()
    after_day = pick(router, RouteStrategy.ROUND, 1, ADDRS, T0 + DAY_MS + 1)
    rng.setstate(state)
    assert after_day == ADDRS[rng.randrange(100) % 3]


def test_round_balances_over_many_jobs_within_5_percent() -> None:
    router = Router(rng=random.Random(11))
    counts: Counter[str] = Counter()
    for job in range(300):
        for _ in range(20):
            counts[pick(router, RouteStrategy.ROUND, job, ADDRS)] += 1
    total = sum(counts.values())
    for address in ADDRS:
        assert abs(counts[address] / total - 1 / 3) < 0.05, counts


def test_random_uses_injected_rng_and_covers_all() -> None:
    router = Router(rng=random.Random(5))
    picks = [pick(router, RouteStrategy.RANDOM, 1, ADDRS) for _ in range(300)]
    rng = random.Random(5)
    assert picks == [ADDRS[rng.randrange(3)] for _ in range(300)]
    assert set(picks) == set(ADDRS)


def test_md5_hash_matches_reference_definition() -> None:
    # Java: digest bytes 3..0 as an unsigned 32-bit big-endian number.
    import hashlib

    digest = hashlib.md5(b"42").digest()
    java = ((digest[3] << 24) | (digest[2] << 16) | (digest[1] << 8) | digest[0]) & 0xFFFFFFFF
    assert md5_hash("42") == java


def test_consistent_hash_is_stable_and_order_independent() -> None:
    for job in range(50):
        a = consistent_hash(job, ADDRS)
        assert a == consistent_hash(job, list(reversed(ADDRS)))
        assert a in ADDRS


def test_consistent_hash_balances_jobs_within_tolerance() -> None:
    addrs = [f"http://10.0.0.{i}:9999/" for i in range(1, 5)]
    counts = Counter(consistent_hash(job, addrs) for job in range(1, 8001))
    for address in addrs:
        # 100 virtual nodes per address: each gets its quarter within +-40 %.
        assert 0.6 * 2000 < counts[address] < 1.4 * 2000, counts


def test_consistent_hash_moves_few_jobs_when_an_address_joins() -> None:
    before = {job: consistent_hash(job, ADDRS) for job in range(1, 4001)}
    joined = [*ADDRS, "http://10.0.0.9:9999/"]
    after = {job: consistent_hash(job, joined) for job in range(1, 4001)}
    moved = [job for job in before if before[job] != after[job]]
    # Only jobs taken by the new address move (ideal: 1/4 of them).
    assert all(after[job] == joined[-1] for job in moved)
    assert len(moved) / len(before) < 0.4


def test_lfu_picks_least_used_and_forgets_departed_addresses() -> None:
    router = Router(rng=random.Random(2))
    counts = Counter(pick(router, RouteStrategy.LEAST_FREQUENTLY_USED, 1, ADDRS) for _ in range(30))
    assert max(counts.values()) - min(counts.values()) <= 2
    # An address that leaves and comes back starts with a low count again and is preferred.
    for _ in range(10):
        pick(router, RouteStrategy.LEAST_FREQUENTLY_USED, 1, ADDRS[:2])
    returned = [pick(router, RouteStrategy.LEAST_FREQUENTLY_USED, 1, ADDRS) for _ in range(3)]
    assert returned.count(ADDRS[2]) >= 2


def test_lfu_resets_daily() -> None:
    router = Router(rng=random.Random(2))
    for _ in range(50):
        pick(router, RouteStrategy.LEAST_FREQUENTLY_USED, 1, ADDRS[:1])
    # Next day, counts restart: a fresh address competes on equal terms with the old one.
    next_day = T0 + DAY_MS + 5
    nxt = [pick(router, RouteStrategy.LEAST_FREQUENTLY_USED, 1, ADDRS[:2], next_day) for _ in range(10)]
    assert nxt.count(ADDRS[0]) >= 4


def test_lru_picks_least_recently_used() -> None:
    router = Router()
    seq = [pick(router, RouteStrategy.LEAST_RECENTLY_USED, 1, ADDRS) for _ in range(6)]
    assert seq == ADDRS + ADDRS
    # A newly joined address is appended: used after the ones not used for longer.
    joined = [*ADDRS, "http://10.0.0.4:9999/"]
    assert pick(router, RouteStrategy.LEAST_RECENTLY_USED, 1, joined) == ADDRS[0]
    assert [pick(router, RouteStrategy.LEAST_RECENTLY_USED, 1, joined) for _ in range(3)] == [
        ADDRS[1], ADDRS[2], joined[3]]


def test_broadcast_returns_all() -> None:
    result = Router().route_now(RouteStrategy.SHARDING_BROADCAST, 1, ADDRS, T0)
    assert result.addresses == tuple(ADDRS)


async def test_failover_takes_first_address_whose_beat_succeeds() -> None:
    asked: list[tuple[str, int]] = []

    async def beat(address: str, job_id: int) -> ReturnT:
        asked.append((address, job_id))
        return ReturnT.success() if address == ADDRS[1] else ReturnT.fail("connection refused")

    router = Router(beat=beat)
    result = await router.route(RouteStrategy.FAILOVER, 9, ADDRS, T0)
    assert result.address == ADDRS[1]
    assert asked == [(ADDRS[0], 9), (ADDRS[1], 9)]
    assert result.msg is not None and "connection refused" in result.msg and ADDRS[1] in result.msg


async def test_failover_fails_when_no_beat_succeeds() -> None:
    async def beat(address: str, job_id: int) -> ReturnT:
        return ReturnT.fail("down")

    result = await Router(beat=beat).route(RouteStrategy.FAILOVER, 1, ADDRS, T0)
    assert not result.ok and result.msg is not None and result.msg.count("down") == 3


async def test_busyover_uses_idle_beat() -> None:
    async def idle(address: str, job_id: int) -> ReturnT:
        if address == ADDRS[2]:
            return ReturnT.success()
        return ReturnT.fail("job thread is running or has trigger queue.")

    async def beat(address: str, job_id: int) -> ReturnT:
        raise AssertionError("BUSYOVER must not use /beat")

    result = await Router(beat=beat, idle_beat=idle).route(RouteStrategy.BUSYOVER, 3, ADDRS, T0)
    assert result.address == ADDRS[2]


def test_probe_strategies_need_route() -> None:
    with pytest.raises(ValueError, match="probe"):
        Router().route_now(RouteStrategy.FAILOVER, 1, ADDRS, T0)


# -- declared handlers (issue 25 item 23) ---------------------------------------------------

# ADDRS[0] declared "a" only, ADDRS[1] declared "b" only, ADDRS[2] declared nothing (XXL-JOB).
DECLARED = {ADDRS[0]: frozenset({"a"}), ADDRS[1]: frozenset({"b", "c"})}


def test_declaring_keeps_declarers_of_the_handler_and_executors_that_declared_nothing() -> None:
    assert declaring("b", ADDRS, DECLARED) == ([ADDRS[1], ADDRS[2]], [ADDRS[0]])
    assert declaring("a", ADDRS, DECLARED) == ([ADDRS[0], ADDRS[2]], [ADDRS[1]])
    assert declaring("z", ADDRS, DECLARED) == ([ADDRS[2]], ADDRS[:2])
    assert declaring("z", ADDRS[:2], DECLARED) == ([], ADDRS[:2])
    # An executor that declared an empty set gets no BEAN job at all.
    assert declaring("a", ADDRS[:1], {ADDRS[0]: frozenset()}) == ([], ADDRS[:1])


def test_declaring_passes_every_address_for_glue_jobs_and_groups_without_declarations() -> None:
    assert declaring(None, ADDRS, DECLARED) == (ADDRS, [])
    assert declaring("a", ADDRS, {}) == (ADDRS, [])


async def test_every_strategy_routes_among_the_declarers_only() -> None:
    able, _ = declaring("b", ADDRS, {ADDRS[0]: frozenset({"a"}), ADDRS[2]: frozenset({"a"})})
    assert able == [ADDRS[1]]

    async def up(address: str, job_id: int) -> ReturnT:
        return ReturnT.success()

    router = Router(rng=random.Random(3), beat=up, idle_beat=up)
    for strategy in RouteStrategy:
        for job_id in range(5):
            result = await router.route(strategy, job_id, able, T0)
            assert result.addresses == (ADDRS[1],), strategy
