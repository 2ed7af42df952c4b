"""Daylight-saving rules per job (gap: skip / next_valid; repeat: first / second / both).

2026 transitions used below (derived by hand from the zones' rules, checked against zoneinfo):
New York 03-08 02:00 EST -> 03:00 EDT, 11-01 02:00 EDT -> 01:00 EST; Lord Howe 04-05 02:00
(+11) -> 01:30 (+10:30), 10-04 02:00 (+10:30) -> 02:30 (+11); Santiago 04-05 00:00 (-03) ->
04-04 23:00 (-04), 09-06 00:00 (-04) -> 01:00 (-03).
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from zoneinfo import ZoneInfo

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jobring.core.cron import CronExpression
from jobring.core.timing.dst import DstCron, DstGap, DstRepeat, DstRules, parse_dst_rules
from jobring.core.timing.errors import TimingError
from tests.core.timing_reference import (
    ZONES,
    SimpleCron,
    dst_fires,
    first_minute,
    instants_ms,
    occurrence,
    offset,
    simple_crons,
    transitions,
)

NEW_YORK, LORD_HOWE, SANTIAGO = "America/New_York", "Australia/Lord_Howe", "America/Santiago"


def at(offset_minutes: int, *parts: int) -> int:
    """Epoch ms of a wall time at an explicit UTC offset (so each case says which occurrence)."""
    zone = timezone(timedelta(minutes=offset_minutes))
    return int(datetime(*parts, tzinfo=zone).timestamp() * 1000)  # type: ignore[misc, arg-type]


def fires(expression: str, zone: str, rules: DstRules, after_ms: int, count: int) -> list[int]:
    cron = DstCron(CronExpression(expression, zone), rules, quartz_compatible=False)
    out: list[int] = []
    for _ in range(count):
        found = cron.next_fire_ms(after_ms)
        assert found is not None
        out.append(found)
        after_ms = found
    return out


SKIP, NEXT = DstGap.SKIP, DstGap.NEXT_VALID
FIRST, SECOND, BOTH = DstRepeat.FIRST, DstRepeat.SECOND, DstRepeat.BOTH
NEXT_SECOND = DstRules(NEXT, SECOND)
EDT, EST = -240, -300

TABLE = [
    # New York spring forward: 02:30 does not exist on 03-08.
    ("0 30 2 * * ?", NEW_YORK, DstRules(SKIP, SECOND), at(EST, 2026, 3, 7, 3), [at(EDT, 2026, 3, 9, 2, 30)]),
    (
        "0 30 2 * * ?",
        NEW_YORK,
        DstRules(NEXT, SECOND),
        at(EST, 2026, 3, 7, 3),
        [at(EDT, 2026, 3, 8, 3), at(EDT, 2026, 3, 9, 2, 30)],
    ),
    # Every 15 minutes: the four missing times of the gap fire once at 03:00, which is also a fire.
    (
        "0 */15 * * * ?",
        NEW_YORK,
        DstRules(NEXT, SECOND),
        at(EST, 2026, 3, 8, 1, 40),
        [at(EST, 2026, 3, 8, 1, 45), at(EDT, 2026, 3, 8, 3), at(EDT, 2026, 3, 8, 3, 15)],
    ),
    # New York fall back: 01:30 is shown twice on 11-01.
    (
        "0 30 1 * * ?",
        NEW_YORK,
        DstRules(SKIP, FIRST),
        at(EDT, 2026, 11, 1, 0),
        [at(EDT, 2026, 11, 1, 1, 30), at(EST, 2026, 11, 2, 1, 30)],
    ),
    (
        "0 30 1 * * ?",
        NEW_YORK,
        DstRules(SKIP, SECOND),
        at(EDT, 2026, 11, 1, 0),
        [at(EST, 2026, 11, 1, 1, 30), at(EST, 2026, 11, 2, 1, 30)],
    ),
    (
        "0 30 1 * * ?",
        NEW_YORK,
        DstRules(SKIP, BOTH),
        at(EDT, 2026, 11, 1, 0),
        [at(EDT, 2026, 11, 1, 1, 30), at(EST, 2026, 11, 1, 1, 30), at(EST, 2026, 11, 2, 1, 30)],
    ),
    (
        "0 0/30 * * * ?",
        NEW_YORK,
        DstRules(SKIP, BOTH),
        at(EDT, 2026, 11, 1, 0, 40),
        [
            at(EDT, 2026, 11, 1, 1),
            at(EDT, 2026, 11, 1, 1, 30),
            at(EST, 2026, 11, 1, 1),
            at(EST, 2026, 11, 1, 1, 30),
        ],
    ),
    (
        "0 0/30 * * * ?",
        NEW_YORK,
        DstRules(SKIP, FIRST),
        at(EDT, 2026, 11, 1, 1, 10),
        [at(EDT, 2026, 11, 1, 1, 30), at(EST, 2026, 11, 1, 2)],
    ),
    # Starting inside the first pass, "second" fires the second showing of 01:00 (Quartz would not).
    (
        "0 0/30 * * * ?",
        NEW_YORK,
        DstRules(SKIP, SECOND),
        at(EDT, 2026, 11, 1, 1, 40),
        [at(EST, 2026, 11, 1, 1), at(EST, 2026, 11, 1, 1, 30)],
    ),
    # Lord Howe: a 30-minute overlap (01:30-01:59) and a 30-minute gap (02:00-02:29).
    ("0 45 1 * * ?", LORD_HOWE, DstRules(SKIP, FIRST), at(660, 2026, 4, 5, 0), [at(660, 2026, 4, 5, 1, 45)]),
    ("0 45 1 * * ?", LORD_HOWE, DstRules(SKIP, SECOND), at(660, 2026, 4, 5, 0), [at(630, 2026, 4, 5, 1, 45)]),
    (
        "0 15 2 * * ?",
        LORD_HOWE,
        DstRules(SKIP, SECOND),
        at(630, 2026, 10, 4, 0),
        [at(660, 2026, 10, 5, 2, 15)],
    ),
    (
        "0 15 2 * * ?",
        LORD_HOWE,
        DstRules(NEXT, SECOND),
        at(630, 2026, 10, 4, 0),
        [at(660, 2026, 10, 4, 2, 30)],
    ),
    # Santiago: the transitions are at midnight, so the day itself loses or repeats a late hour.
    (
        "0 30 0 * * ?",
        SANTIAGO,
        DstRules(SKIP, SECOND),
        at(-240, 2026, 9, 5, 12),
        [at(-180, 2026, 9, 7, 0, 30)],
    ),
    ("0 30 0 * * ?", SANTIAGO, DstRules(NEXT, SECOND), at(-240, 2026, 9, 5, 12), [at(-180, 2026, 9, 6, 1)]),
    # A search from the last second (or millisecond) before a gap still fires at its transition.
    (
        "0 */4 * * * ?",
        LORD_HOWE,
        DstRules(NEXT, FIRST),
        at(630, 2026, 10, 4, 1, 59, 59),
        [at(660, 2026, 10, 4, 2, 30), at(660, 2026, 10, 4, 2, 32)],
    ),
    ("0 30 0 * * ?", SANTIAGO, NEXT_SECOND, at(-240, 2026, 9, 5, 23, 59, 59), [at(-180, 2026, 9, 6, 1)]),
    ("0 30 0 * * ?", SANTIAGO, NEXT_SECOND, at(-180, 2026, 9, 6, 1) - 1, [at(-180, 2026, 9, 6, 1)]),
    (
        "0 30 23 * * ?",
        SANTIAGO,
        DstRules(SKIP, BOTH),
        at(-180, 2026, 4, 4, 12),
        [at(-180, 2026, 4, 4, 23, 30), at(-240, 2026, 4, 4, 23, 30), at(-240, 2026, 4, 5, 23, 30)],
    ),
]


@pytest.mark.parametrize(("expression", "zone", "rules", "after", "expected"), TABLE)
def test_dst_rules_table(
    expression: str, zone: str, rules: DstRules, after: int, expected: list[int]
) -> None:
    assert fires(expression, zone, rules, after, len(expected)) == expected


def test_default_rules_delegate_to_quartz_and_keep_its_quirk() -> None:
    """Quartz, from inside the first pass (01:40 EDT), goes on to 02:00 EST: the second showing of
    01:00 and 01:30 does not fire. The default rules reproduce that exactly."""
    cron = CronExpression("0 0/30 * * * ?", NEW_YORK)
    start = at(EDT, 2026, 11, 1, 1, 40)
    assert (
        DstCron(cron, DstRules()).next_fire_ms(start) == cron.next_after_ms(start) == at(EST, 2026, 11, 1, 2)
    )


def test_parse_dst_rules() -> None:
    assert parse_dst_rules(None) == DstRules()
    assert parse_dst_rules({"gap": "NEXT_VALID", "repeat": "both"}) == DstRules(NEXT, BOTH)
    with pytest.raises(TimingError) as bad:
        parse_dst_rules({"repeat": "twice"})
    assert bad.value.field == "dst.repeat"
    with pytest.raises(TimingError) as unknown:
        parse_dst_rules({"gaps": "skip"})
    assert unknown.value.field == "dst.gaps"


def selected(cron: SimpleCron, zone: ZoneInfo, rules: DstRules, second: int) -> bool:
    return dst_fires(cron, zone, rules.gap.value, rules.repeat.value, second)


RULES = st.builds(DstRules, st.sampled_from(list(DstGap)), st.sampled_from(list(DstRepeat)))


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data(), simple_crons(), st.sampled_from(ZONES), RULES)
def test_every_rule_pair_matches_a_minute_walk(
    data: st.DataObject, cron: SimpleCron, zone_name: str, rules: DstRules
) -> None:
    after_ms = data.draw(instants_ms(zone_name))
    zone = ZoneInfo(zone_name)
    engine = DstCron(CronExpression(cron.text, zone), rules, quartz_compatible=False)
    found = engine.next_fire_ms(after_ms)
    expected, scanned_to = first_minute(lambda s: selected(cron, zone, rules, s), after_ms, 8 * 86_400)
    if expected is not None:
        assert found == expected, (cron, zone_name, rules, after_ms)
    else:
        assert found is None or found >= scanned_to


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data(), simple_crons(), st.sampled_from(ZONES))
def test_exact_walk_equals_quartz_unless_starting_in_a_first_pass(
    data: st.DataObject, cron: SimpleCron, zone_name: str
) -> None:
    after_ms = data.draw(instants_ms(zone_name))
    zone = ZoneInfo(zone_name)
    expression = CronExpression(cron.text, zone)
    exact = DstCron(expression, DstRules(), quartz_compatible=False).next_fire_ms(after_ms)
    quartz = DstCron(expression, DstRules()).next_fire_ms(after_ms)
    shown_twice, fold = occurrence(zone, after_ms // 1000 + 1)
    if shown_twice and fold == 0:
        # Quartz skips second showings of wall times it has passed: it may only be later.
        assert exact is not None and quartz is not None and exact <= quartz
    else:
        assert exact == quartz


@pytest.mark.parametrize("zone_name", ZONES[1:])
@pytest.mark.parametrize("rules", [DstRules(NEXT, BOTH), DstRules(NEXT, FIRST), DstRules(SKIP, SECOND)])
def test_fire_counts_across_each_transition(zone_name: str, rules: DstRules) -> None:
    """Every 10 minutes, for 24 h either side of each 2024-2027 transition: fires strictly increase,
    and there are 288 (a gap removes wall times from the span as it skips them) except that an
    overlap's repeated wall times fire twice only under "both"."""
    zone = ZoneInfo(zone_name)
    engine = DstCron(CronExpression("0 */10 * * * ?", zone_name), rules, quartz_compatible=False)
    for moment in transitions(zone_name):
        repeated = max(0, offset(zone, moment - 1) - offset(zone, moment)) // 600
        current, end = (moment - 86_400) * 1000, (moment + 86_400) * 1000
        count = 0
        while True:
            following = engine.next_fire_ms(current)
            assert following is not None and following > current
            if following > end:
                break
            current, count = following, count + 1
        assert count == 288 - (0 if rules.repeat is BOTH else repeated), (zone_name, moment)
