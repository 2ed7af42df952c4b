"""Daylight-saving transitions, derived by hand.

America/New_York 2021: 02:00 EST -> 03:00 EDT on Mar 14 (07:00Z); 02:00 EDT -> 01:00 EST on Nov 7 (06:00Z).
Europe/Berlin 2021: 02:00 CET -> 03:00 CEST on Mar 28 (01:00Z); 03:00 CEST -> 02:00 CET on Oct 31 (01:00Z).
Rules (as Quartz): a wall time in the gap never fires; a repeated wall time fires once, at its second
(standard-time) occurrence, because Quartz resolves ambiguous local times through java.util.Calendar,
which reads them as standard time. So the first pass of a repeated hour fires nothing.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest

from jobring.core.cron import CronExpression

NEW_YORK = "America/New_York"
BERLIN = "Europe/Berlin"


def at(offset_hours: int, *parts: int) -> datetime:
    """A wall time with an explicit UTC offset, so each case states which occurrence it means."""
    return datetime(*parts, tzinfo=timezone(timedelta(hours=offset_hours)))  # type: ignore[misc]


def fires(expression: str, tz: str, after: datetime, count: int) -> list[datetime]:
    cron = CronExpression(expression, tz)
    out: list[datetime] = []
    current = after
    for _ in range(count):
        nxt = cron.next_after(current)
        assert nxt is not None
        out.append(nxt)
        current = nxt
    return out


CASES = [
    # New York, spring forward: 02:30 does not exist on Mar 14 -> that day is skipped.
    (
        "0 30 2 * * ?",
        NEW_YORK,
        at(-5, 2021, 3, 13, 3),
        [at(-4, 2021, 3, 15, 2, 30), at(-4, 2021, 3, 16, 2, 30)],
    ),
    # Hourly at :30 goes 01:30 EST -> 03:30 EDT (one real hour later).
    (
        "0 30 * * * ?",
        NEW_YORK,
        at(-5, 2021, 3, 14, 1),
        [at(-5, 2021, 3, 14, 1, 30), at(-4, 2021, 3, 14, 3, 30)],
    ),
    ("0 0 * * * ?", NEW_YORK, at(-5, 2021, 3, 14, 1), [at(-4, 2021, 3, 14, 3), at(-4, 2021, 3, 14, 4)]),
    # Every second: 01:59:59 EST is followed by 03:00:00 EDT, one real second later.
    (
        "* * * * * ?",
        NEW_YORK,
        at(-5, 2021, 3, 14, 1, 59, 58),
        [at(-5, 2021, 3, 14, 1, 59, 59), at(-4, 2021, 3, 14, 3)],
    ),
    # Every minute of hour 2 only: nothing on Mar 14.
    (
        "0 * 2 * * ?",
        NEW_YORK,
        at(-5, 2021, 3, 14, 1, 59),
        [at(-4, 2021, 3, 15, 2, 0), at(-4, 2021, 3, 15, 2, 1)],
    ),
    # New York, fall back: 01:30 happens twice on Nov 7 and fires only at the second (EST) occurrence.
    (
        "0 30 1 * * ?",
        NEW_YORK,
        at(-4, 2021, 11, 7, 0),
        [at(-5, 2021, 11, 7, 1, 30), at(-5, 2021, 11, 8, 1, 30)],
    ),
    # Quarter-hourly: 00:45 EDT is followed by 01:00 EST (75 real minutes later); the first (EDT) pass
    # of the repeated hour fires nothing.
    (
        "0 */15 * * * ?",
        NEW_YORK,
        at(-4, 2021, 11, 7, 0, 40),
        [at(-4, 2021, 11, 7, 0, 45), at(-5, 2021, 11, 7, 1, 0), at(-5, 2021, 11, 7, 1, 15)],
    ),
    # Starting inside the first pass (01:40 EDT): the same wall times follow, in the second pass.
    (
        "0 */15 * * * ?",
        NEW_YORK,
        at(-4, 2021, 11, 7, 1, 40),
        [at(-5, 2021, 11, 7, 1, 45), at(-5, 2021, 11, 7, 2, 0), at(-5, 2021, 11, 7, 2, 15)],
    ),
    # Starting inside the second pass of the repeated hour (01:10 EST).
    ("0 */15 * * * ?", NEW_YORK, at(-5, 2021, 11, 7, 1, 10), [at(-5, 2021, 11, 7, 1, 15)]),
    ("0 30 1 * * ?", NEW_YORK, at(-5, 2021, 11, 7, 1, 10), [at(-5, 2021, 11, 7, 1, 30)]),
    ("0 0 3 * * ?", NEW_YORK, at(-5, 2021, 11, 7, 1, 10), [at(-5, 2021, 11, 7, 3, 0)]),
    # Every second: 00:59:59 EDT is followed by 01:00:00 EST, one real hour later.
    ("* * * * * ?", NEW_YORK, at(-4, 2021, 11, 7, 0, 59, 59), [at(-5, 2021, 11, 7, 1, 0, 0)]),
    # The instant right after 01:59:59 EDT is 01:00:00 EST (second pass), which fires.
    ("* * * * * ?", NEW_YORK, at(-4, 2021, 11, 7, 1, 59, 59), [at(-5, 2021, 11, 7, 1, 0, 0)]),
    # Berlin, spring forward on Sunday Mar 28 2021.
    ("0 30 2 * * ?", BERLIN, at(1, 2021, 3, 27, 3), [at(2, 2021, 3, 29, 2, 30)]),
    ("0 0 2 ? * SUN", BERLIN, at(1, 2021, 3, 21, 3), [at(2, 2021, 4, 4, 2, 0)]),
    (
        "0 0/30 * * * ?",
        BERLIN,
        at(1, 2021, 3, 28, 1, 15),
        [at(1, 2021, 3, 28, 1, 30), at(2, 2021, 3, 28, 3, 0)],
    ),
    # Berlin, fall back on Oct 31 2021: 02:00-02:59 repeats; only the CET pass fires.
    ("0 30 2 * * ?", BERLIN, at(2, 2021, 10, 31, 0), [at(1, 2021, 10, 31, 2, 30), at(1, 2021, 11, 1, 2, 30)]),
    (
        "0 0/30 * * * ?",
        BERLIN,
        at(2, 2021, 10, 31, 1, 15),
        [at(2, 2021, 10, 31, 1, 30), at(1, 2021, 10, 31, 2, 0), at(1, 2021, 10, 31, 2, 30)],
    ),
    ("0 0/30 * * * ?", BERLIN, at(2, 2021, 10, 31, 2, 45), [at(1, 2021, 10, 31, 3, 0)]),
    ("0 0/30 * * * ?", BERLIN, at(1, 2021, 10, 31, 2, 5), [at(1, 2021, 10, 31, 2, 30)]),
    # Sydney falls back on Sunday Apr 4 2021 (03:00 AEDT -> 02:00 AEST): 02:30 fires in AEST.
    (
        "0 30 2 * * ?",
        "Australia/Sydney",
        at(11, 2021, 4, 3, 12),
        [at(10, 2021, 4, 4, 2, 30), at(10, 2021, 4, 5, 2, 30)],
    ),
    # A daily job at a time untouched by the transition keeps its wall time across it.
    (
        "0 0 12 * * ?",
        BERLIN,
        at(1, 2021, 3, 27, 12),
        [at(2, 2021, 3, 28, 12), at(2, 2021, 3, 29, 12)],
    ),
]


@pytest.mark.parametrize(("expression", "tz", "after", "expected"), CASES)
def test_daylight_saving_transitions(
    expression: str, tz: str, after: datetime, expected: list[datetime]
) -> None:
    got = fires(expression, tz, after, len(expected))
    # Compare instants and offsets: PEP 495 makes == across zones False for ambiguous wall times.
    assert [(g.timestamp(), g.utcoffset()) for g in got] == [(e.timestamp(), e.utcoffset()) for e in expected]
    assert [g.isoformat() for g in got] == [e.isoformat() for e in expected]


@pytest.mark.parametrize("tz", [NEW_YORK, BERLIN, "Australia/Lord_Howe", "UTC"])
def test_fire_times_strictly_increase_through_a_year_of_transitions(tz: str) -> None:
    """Every 30 minutes through 2021: strictly increasing, each wall time at most once, never in a gap."""
    cron = CronExpression("0 */30 * * * ?", tz)
    current = datetime(2021, 1, 1, tzinfo=UTC)
    end = datetime(2022, 1, 1, tzinfo=UTC)
    seen_walls: set[datetime] = set()
    count = 0
    while current < end:
        nxt = cron.next_after(current)
        assert nxt is not None and nxt > current
        wall = nxt.replace(tzinfo=None)
        assert wall not in seen_walls
        seen_walls.add(wall)
        assert wall.minute % 30 == 0 and wall.second == 0
        # Round trip through UTC keeps the wall time: it exists.
        assert nxt.astimezone(UTC).astimezone(cron.zone).replace(tzinfo=None) == wall
        # 30 minutes apart, plus at most one skipped or repeated hour.
        assert nxt - current <= timedelta(minutes=90)
        current = nxt
        count += 1
    # 365 days * 48 slots, minus the slots in the spring gap: 02:00 and 02:30 (Lord Howe: 02:00 only).
    gap_slots = {NEW_YORK: 2, BERLIN: 2, "Australia/Lord_Howe": 1, "UTC": 0}[tz]
    assert count == 365 * 48 - gap_slots
