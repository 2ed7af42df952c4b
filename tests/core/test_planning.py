"""Pure scheduling decisions: due, late, missed (both misfire strategies), unplanned."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from jobring.core.enums import TriggerType
from jobring.core.planning import MISFIRE_THRESHOLD_MS, decide_fire, first_after


def every(seconds: int):  # type: ignore[no-untyped-def]
    return lambda after: after + seconds * 1_000


def test_on_time_fire_continues_from_the_planned_instant() -> None:
    d = decide_fire(10_000, 10_000, "DO_NOTHING", every(1))
    assert (d.planned_ms, d.trigger_type, d.next_ms) == (10_000, TriggerType.CRON, 11_000)


def test_late_under_threshold_fires_and_catches_up_instant_by_instant() -> None:
    """A short outage: the instants due meanwhile are all sent late, none passed over."""
    d = decide_fire(10_000, 13_500, "DO_NOTHING", every(1))
    assert (d.planned_ms, d.trigger_type, d.next_ms) == (10_000, TriggerType.CRON, 11_000)
    fired = []
    planned: int | None = 10_000
    while planned is not None and planned <= 13_500:
        d = decide_fire(planned, 13_500, "DO_NOTHING", every(1))
        fired.append((d.planned_ms, d.trigger_type))
        planned = d.next_ms
    assert fired == [(t, TriggerType.CRON) for t in (10_000, 11_000, 12_000, 13_000)]
    assert planned == 14_000


def test_exactly_at_threshold_still_fires() -> None:
    d = decide_fire(10_000, 10_000 + MISFIRE_THRESHOLD_MS, "DO_NOTHING", every(1))
    assert d.trigger_type is TriggerType.CRON


@pytest.mark.parametrize("strategy, fired", [("DO_NOTHING", None), ("FIRE_ONCE_NOW", TriggerType.MISFIRE)])
def test_missed_applies_the_misfire_strategy(strategy: str, fired: TriggerType | None) -> None:
    d = decide_fire(10_000, 10_000 + MISFIRE_THRESHOLD_MS + 1, strategy, every(1))
    assert d.trigger_type is fired
    assert d.planned_ms == 10_000  # the missed instant stays the fire's identity
    assert d.next_ms == 11_000  # late by less than the threshold: it fires, late
    far = decide_fire(10_000, 30_500, strategy, every(1))
    assert far.trigger_type is fired and far.planned_ms == 10_000
    assert far.next_ms == 26_000  # the instants over 5 s late go with the first; from 25.5 s on they fire


def test_unplanned_job_gets_a_next_instant_and_does_not_fire() -> None:
    d = decide_fire(0, 50_000, "FIRE_ONCE_NOW", every(5))
    assert not d.fires and d.next_ms == 55_000


def test_ended_schedule_has_no_next() -> None:
    d = decide_fire(10_000, 10_000, "DO_NOTHING", lambda after: None)
    assert d.fires and d.next_ms is None


def test_future_instant_is_refused() -> None:
    with pytest.raises(ValueError):
        decide_fire(10_001, 10_000, "DO_NOTHING", every(1))


def test_far_behind_falls_back_to_the_schedule_from_now() -> None:
    # More than the stepping bound behind: asks the schedule directly.
    assert first_after(every(1), 0, 10_000_000) == 10_000_999


def test_a_schedule_that_goes_backwards_is_an_error() -> None:
    with pytest.raises(ValueError):
        first_after(lambda after: after - 1, 1_000, 5_000)


@given(planned=st.integers(1, 10**12), late=st.integers(0, 20_000), period=st.integers(1, 90))
def test_only_instants_beyond_the_threshold_are_passed_over(planned: int, late: int, period: int) -> None:
    now = planned + late
    d = decide_fire(planned, now, "FIRE_ONCE_NOW", every(period))
    assert d.next_ms is not None and d.next_ms > planned
    assert (d.next_ms - planned) % (period * 1_000) == 0  # on the job's grid
    # Every instant passed over (strictly between the two) is beyond the threshold.
    assert d.next_ms - period * 1_000 == planned or d.next_ms - period * 1_000 < now - MISFIRE_THRESHOLD_MS
    assert d.next_ms >= now - MISFIRE_THRESHOLD_MS
