"""The parent's join against a brute-force reference, the rounding rule, the reduce gate."""

from __future__ import annotations

from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jobring.core.distributed.join import (
    FailureTolerance,
    JoinError,
    JoinOutcome,
    JoinVerdict,
    ParentPhase,
    Progress,
    after_join,
    after_reduce,
    join,
    reduce_due,
    reduce_key,
)


@pytest.mark.parametrize(("text", "total", "allowed"), [
    ("1%", 150, 1), ("1%", 99, 0), ("1%", 100, 1), ("2.5%", 200, 5), ("2.5 %", 199, 4), ("0.5%", 1000, 5),
    ("100%", 7, 7), ("0%", 10, 0), ("3", 10, 3), ("3", 2, 3), ("0", 5, 0),
    ("3,10%", 10, 1), ("3, 10%", 1000, 3), ("10%,3", 1000, 3),
])
def test_allowed_failures_rounding(text: str, total: int, allowed: int) -> None:
    assert FailureTolerance.parse(text).allowed(total) == allowed


def test_both_limits_take_the_smaller_and_none_allows_no_failure() -> None:
    both = FailureTolerance(max_failed=3, max_failed_percent=Fraction(10))
    assert both.allowed(10) == 1 and both.allowed(1000) == 3
    assert FailureTolerance().allowed(10**6) == 0


@pytest.mark.parametrize("text", ["", "x", "1.5", "-1", "-1%", "101%", "1/0%", "%", "1,2", "1%,2%", "3,"])
def test_bad_tolerances_name_the_field(text: str) -> None:
    with pytest.raises(JoinError) as err:
        FailureTolerance.parse(text)
    assert err.value.field in ("failure_tolerance", "max_failed", "max_failed_percent")


def test_bad_progress_is_refused() -> None:
    with pytest.raises(JoinError):
        Progress(3, succeeded=2, failed=2)
    with pytest.raises(JoinError):
        Progress(3, running=-1)
    progress = Progress(10, succeeded=3, failed=2, running=4)
    assert (progress.done, progress.pending, progress.remaining) == (5, 1, 5)


def test_fail_fast_ends_the_parent_and_cancels_the_rest() -> None:
    tolerance = FailureTolerance(max_failed=1)
    progress = Progress(10, succeeded=3, failed=2, running=4)
    assert join(progress, tolerance) == JoinVerdict(JoinOutcome.FAILED, False, False, 1)
    assert join(progress, tolerance, fail_fast=True) == JoinVerdict(JoinOutcome.FAILED, True, True, 1)


def test_certain_success_waits_for_every_result() -> None:
    verdict = join(Progress(1000, succeeded=990, running=10), FailureTolerance.parse("1%"))
    assert verdict.outcome is JoinOutcome.SUCCESS and not verdict.finished
    assert join(Progress(0), FailureTolerance()).finished  # an empty map succeeds at once


def brute_allowed(total: int, tolerance: FailureTolerance) -> int:
    best = 0
    for k in range(0, total + (tolerance.max_failed or 0) + 2):
        if tolerance.max_failed is not None and k > tolerance.max_failed:
            continue
        if tolerance.max_failed_percent is not None and k * 100 > total * tolerance.max_failed_percent:
            continue
        if tolerance.max_failed is None and tolerance.max_failed_percent is None and k > 0:
            continue
        best = k
    return best


def brute_verdict(progress: Progress, tolerance: FailureTolerance, fail_fast: bool) -> JoinVerdict:
    """Every way the remaining children can end: the outcome is certain when all agree."""
    allowed = brute_allowed(progress.total, tolerance)
    endings = {progress.failed + extra <= allowed for extra in range(progress.remaining + 1)}
    if endings == {False}:
        finished = fail_fast or progress.remaining == 0
        return JoinVerdict(JoinOutcome.FAILED, finished, finished and progress.remaining > 0, allowed)
    if endings == {True}:
        return JoinVerdict(JoinOutcome.SUCCESS, progress.remaining == 0, False, allowed)
    return JoinVerdict(JoinOutcome.UNDECIDED, False, False, allowed)


tolerances = st.builds(
    FailureTolerance,
    max_failed=st.none() | st.integers(0, 30),
    max_failed_percent=st.none() | st.fractions(min_value=0, max_value=100, max_denominator=1000),
)


@settings(max_examples=400, deadline=None)
@given(data=st.data(), tolerance=tolerances, fail_fast=st.booleans())
def test_join_matches_the_brute_force_reference(data: st.DataObject, tolerance: FailureTolerance,
                                                fail_fast: bool) -> None:
    total = data.draw(st.integers(0, 120))
    succeeded = data.draw(st.integers(0, total))
    failed = data.draw(st.integers(0, total - succeeded))
    running = data.draw(st.integers(0, total - succeeded - failed))
    progress = Progress(total, succeeded, failed, running)
    verdict = join(progress, tolerance, fail_fast=fail_fast)
    assert verdict == brute_verdict(progress, tolerance, fail_fast)
    assert verdict.allowed_failures == tolerance.allowed(total)


def test_phase_moves_only_from_mapping_and_reduce_is_due_once() -> None:
    done_ok = join(Progress(2, succeeded=2), FailureTolerance())
    done_bad = join(Progress(2, succeeded=1, failed=1), FailureTolerance())
    waiting = join(Progress(2, succeeded=1, running=1), FailureTolerance())
    mapping = ParentPhase.MAPPING
    assert after_join(mapping, done_ok, has_reduce=True) is ParentPhase.REDUCING
    assert after_join(mapping, done_ok, has_reduce=False) is ParentPhase.SUCCEEDED
    assert after_join(mapping, done_bad, has_reduce=True) is ParentPhase.FAILED
    assert after_join(mapping, waiting, has_reduce=True) is mapping
    assert reduce_due(mapping, done_ok, has_reduce=True)
    for phase in (ParentPhase.REDUCING, ParentPhase.SUCCEEDED, ParentPhase.FAILED):
        assert after_join(phase, done_bad, has_reduce=True) is phase
        assert not reduce_due(phase, done_ok, has_reduce=True)
    assert not reduce_due(mapping, done_ok, has_reduce=False)
    assert after_reduce(ParentPhase.REDUCING, True) is ParentPhase.SUCCEEDED
    assert after_reduce(ParentPhase.REDUCING, False) is ParentPhase.FAILED
    assert after_reduce(ParentPhase.SUCCEEDED, False) is ParentPhase.SUCCEEDED
    assert reduce_key(5, 1) != reduce_key(5, 2) != reduce_key(6, 2)
