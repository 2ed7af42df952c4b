"""Scopes and the global token bucket: exact refill, the rate bound, a CAS-safe state order."""

from __future__ import annotations

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from jobring.core.flow.ratelimit import (
    TOKEN_UNITS,
    BucketState,
    RateLimit,
    bucket_now,
    full_bucket,
    ready_at,
    supersedes,
    take,
)
from jobring.core.flow.scopes import (
    MAX_KEY_LENGTH,
    ConcurrencyLimit,
    FlowError,
    Scope,
    ScopeKind,
    fair_key,
    group_scope,
    job_scope,
    key_scope,
    run_scopes,
)

T0 = 1_700_000_000_000


def test_scope_text_round_trips_and_keys_belong_to_their_owner() -> None:
    scopes = run_scopes(7, 2, job_key="acme", group_key="acme")
    assert [str(s) for s in scopes] == ["job:7", "group:2", "key:job:7/acme", "key:group:2/acme"]
    assert all(Scope.parse(str(s)) == s for s in scopes)
    # The same rendered key under two jobs is two counters; under their group, one.
    assert key_scope(job_scope(1), "acme") != key_scope(job_scope(2), "acme")
    assert run_scopes(1, 9, group_key="acme")[-1] == run_scopes(2, 9, group_key="acme")[-1]


def test_fair_key_is_the_first_concurrency_key_else_the_job() -> None:
    assert fair_key(run_scopes(7, 2, group_key="t1")) == "key:group:2/t1"
    assert fair_key(run_scopes(7, 2, job_key="a", group_key="b")) == "key:job:7/a"
    assert fair_key(run_scopes(7, 2)) == "job:7"
    assert fair_key((group_scope(3),)) == "group:3"
    with pytest.raises(FlowError):
        fair_key(())


@pytest.mark.parametrize(("text", "field"), [
    ("", "concurrency_key"), ("x" * (MAX_KEY_LENGTH + 1), "concurrency_key"), ("a\nb", "concurrency_key"),
])
def test_bad_rendered_keys_name_the_field(text: str, field: str) -> None:
    with pytest.raises(FlowError) as err:
        key_scope(job_scope(1), text)
    assert err.value.field == field and str(err.value).startswith(field)


def test_bad_scope_text_and_limits_are_refused() -> None:
    for text in ("job", "nope:1", "job:", ":1"):
        with pytest.raises(FlowError):
            Scope.parse(text)
    with pytest.raises(FlowError, match="key belongs"):
        key_scope(Scope(ScopeKind.KEY, "job:1/a"), "b")
    with pytest.raises(FlowError) as err:
        ConcurrencyLimit(0)
    assert err.value.field == "max_concurrent_runs"
    for limit, period_ms, burst in ((0, 1000, None), (1, 0, None), (1, 1000, 0)):
        with pytest.raises(FlowError):
            RateLimit(limit, period_ms, burst)


def test_refill_is_exact_integer_arithmetic() -> None:
    rate = RateLimit(limit=3, period_ms=1000)  # one token every 333.3 ms
    empty = BucketState(0, T0)
    assert bucket_now(rate, empty, T0 + 333).level == 333 * 3 * TOKEN_UNITS // 1000
    assert take(rate, empty, T0 + 333) is None
    assert take(rate, empty, T0 + 334) == BucketState(1_002_000 - TOKEN_UNITS, T0 + 334)
    # Refill stops at the capacity; a missing row is a full bucket.
    assert bucket_now(rate, empty, T0 + 60_000) == BucketState(3 * TOKEN_UNITS, T0 + 60_000)
    assert bucket_now(rate, None, T0) == full_bucket(rate, T0) == BucketState(3 * TOKEN_UNITS, T0)


def test_a_clock_behind_the_stamp_refills_nothing_and_keeps_the_stamp() -> None:
    rate = RateLimit(limit=10, period_ms=1000)
    state = BucketState(2 * TOKEN_UNITS, T0)
    assert bucket_now(rate, state, T0 - 500) == state
    assert take(rate, state, T0 - 500) == BucketState(TOKEN_UNITS, T0)


def test_a_smaller_burst_clamps_the_stored_level() -> None:
    state = BucketState(50 * TOKEN_UNITS, T0)
    assert bucket_now(RateLimit(limit=100, period_ms=1000, burst=5), state, T0).level == 5 * TOKEN_UNITS


def test_state_row_round_trip() -> None:
    state = BucketState(123, T0)
    assert BucketState.from_row(state.to_row()) == state


def test_ready_at_is_the_first_instant_with_a_token() -> None:
    rate = RateLimit(limit=7, period_ms=60_000)
    state = BucketState(TOKEN_UNITS // 2, T0)
    at = ready_at(rate, state, T0)
    assert at is not None and take(rate, state, at) is not None and take(rate, state, at - 1) is None
    assert ready_at(rate, None, T0) == T0
    assert ready_at(rate, state, T0, tokens=8) is None


rates = st.builds(RateLimit, limit=st.integers(1, 50), period_ms=st.sampled_from([1, 7, 100, 1000, 60_000]),
                  burst=st.none() | st.integers(1, 20))


@settings(max_examples=150, deadline=None)
@given(rate=rates, gaps=st.lists(st.integers(0, 3_000), min_size=1, max_size=120))
def test_admissions_never_exceed_burst_plus_rate_in_any_window(rate: RateLimit, gaps: list[int]) -> None:
    state: BucketState | None = None
    now, admitted = T0, []
    for gap in gaps:
        now += gap
        after = take(rate, state, now)
        if after is not None:
            state = after
            admitted.append(now)
    burst = rate.capacity // TOKEN_UNITS
    for i, start in enumerate(admitted):
        for j in range(i, len(admitted)):
            span = admitted[j] - start
            assert j - i + 1 <= burst + span * rate.limit // rate.period_ms


@settings(max_examples=60, deadline=None)
@given(rate=rates, span=st.integers(0, 5_000))
def test_a_busy_caller_gets_the_full_rate(rate: RateLimit, span: int) -> None:
    # Taking every token there is, every ms, the bucket admits its burst plus the refill,
    # short of at most one token lost to the flooring (when one ms of refill fits in the
    # bucket next to a partial token: otherwise a full bucket rightly drops the excess).
    burst = rate.capacity // TOKEN_UNITS
    assume(rate.limit <= (burst - 1) * rate.period_ms)
    state: BucketState | None = None
    admitted = 0
    for now in range(T0, T0 + span + 1):
        while (after := take(rate, state, now)) is not None:
            state, admitted = after, admitted + 1
    assert admitted >= burst + span * rate.limit // rate.period_ms - 1


@settings(max_examples=150, deadline=None)
@given(rate=rates, steps=st.lists(st.tuples(st.integers(-2_000, 2_000), st.booleans()), max_size=60))
def test_every_changed_state_supersedes_the_one_before(
    rate: RateLimit, steps: list[tuple[int, bool]]
) -> None:
    # The conditional UPDATE on (level, stamp) is safe only if a state never comes back.
    history = [full_bucket(rate, T0)]
    now = T0
    for shift, consume in steps:
        now += shift  # clocks of different nodes: time may appear to go back
        current = history[-1]
        new = take(rate, current, now) if consume else bucket_now(rate, current, now)
        if new is not None and new != current:
            assert supersedes(new, current)
            history.append(new)
    assert len(set(history)) == len(history)
