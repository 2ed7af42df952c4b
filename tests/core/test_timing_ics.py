"""Importing calendars from iCalendar text (VEVENT, all-day and timed, RRULE, EXDATE, RDATE, overrides)."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jobring.core.timing.errors import TimingError
from jobring.core.timing.ics import calendar_from_ics


def ics(*events: str) -> str:
    body = "".join(f"BEGIN:VEVENT\r\n{event.strip()}\r\nEND:VEVENT\r\n" for event in events)
    return f"BEGIN:VCALENDAR\r\nVERSION:2.0\r\nPRODID:-//jobring tests//EN\r\n{body}END:VCALENDAR\r\n"


def lines(*items: str) -> str:
    return "\r\n".join(items)


def test_all_day_events_with_yearly_rule_exdate_and_multi_day_span() -> None:
    text = ics(
        lines("UID:new-year", "DTSTART;VALUE=DATE:20260101", "DTEND;VALUE=DATE:20260102",
              "RRULE:FREQ=YEARLY;COUNT=3", "EXDATE;VALUE=DATE:20270101"),
        lines("UID:golden-week", "DTSTART;VALUE=DATE:20261001", "DTEND;VALUE=DATE:20261004"),
        lines("UID:no-end", "DTSTART;VALUE=DATE:20260501"),
        lines("UID:two-days", "DTSTART;VALUE=DATE:20260601", "DURATION:P2D"),
    )  # fmt: skip
    result = calendar_from_ics("cn", text, until=date(2030, 12, 31), zone="Asia/Shanghai")
    assert result.calendar.to_spec()["dates"] == [
        "2026-01-01",
        "2026-05-01",
        "2026-06-01",
        "2026-06-02",
        "2026-10-01",
        "2026-10-02",
        "2026-10-03",
        "2028-01-01",
    ]
    assert result.notes == ()
    reason = result.calendar.is_excluded(int(datetime(2026, 10, 2, 12, tzinfo=UTC).timestamp() * 1000))
    assert reason is not None and reason.rule.startswith("dates[")


def test_timed_events_keep_wall_time_across_dst_and_honour_overrides() -> None:
    text = ics(
        lines("UID:standup", "DTSTART;TZID=Europe/Berlin:20260301T090000",
              "DTEND;TZID=Europe/Berlin:20260301T100000", "RRULE:FREQ=WEEKLY;UNTIL=20260405T000000Z"),
        lines("UID:standup", "RECURRENCE-ID;TZID=Europe/Berlin:20260315T090000",
              "DTSTART;TZID=Europe/Berlin:20260316T110000", "DTEND;TZID=Europe/Berlin:20260316T113000"),
        lines("UID:utc", "DTSTART:20260310T120000Z", "DURATION:PT90M"),
        lines("UID:floating", "DTSTART:20260311T080000", "DTEND:20260311T083000"),
    )  # fmt: skip
    result = calendar_from_ics("meetings", text, until=date(2026, 12, 31), zone="America/New_York")
    periods = result.calendar.to_spec()["periods"]
    assert periods == [
        {"start": "2026-03-01T08:00:00Z", "end": "2026-03-01T09:00:00Z"},
        {"start": "2026-03-08T08:00:00Z", "end": "2026-03-08T09:00:00Z"},
        # 03-15 moved to 03-16 11:00 by the override (below); 03-29 is CEST (UTC+2).
        {"start": "2026-03-22T08:00:00Z", "end": "2026-03-22T09:00:00Z"},
        {"start": "2026-03-29T07:00:00Z", "end": "2026-03-29T08:00:00Z"},
        {"start": "2026-03-16T10:00:00Z", "end": "2026-03-16T10:30:00Z"},
        {"start": "2026-03-10T12:00:00Z", "end": "2026-03-10T13:30:00Z"},
        # Floating: the calendar's zone (New York, EDT since 03-08).
        {"start": "2026-03-11T12:00:00Z", "end": "2026-03-11T12:30:00Z"},
    ]


def test_notes_for_what_is_left_out_or_cut() -> None:
    text = ics(
        lines("UID:yearly", "DTSTART;VALUE=DATE:20260501", "RRULE:FREQ=YEARLY"),
        lines("UID:gone", "STATUS:CANCELLED", "DTSTART;VALUE=DATE:20260502"),
        lines("UID:instant", "DTSTART:20260503T100000Z"),
    )
    result = calendar_from_ics("x", text, until=date(2027, 12, 31))
    assert result.calendar.to_spec()["dates"] == ["2026-05-01", "2027-05-01"]
    assert result.notes == (
        "VEVENT 1 (UID gone): cancelled, left out",
        "VEVENT 2 (UID instant): ends at or before its start, left out",
        "VEVENT 0 (UID yearly): occurrences after 2027-12-31 left out",
    )


def test_invert_imports_an_only_on_these_calendar() -> None:
    text = ics(lines("UID:window", "DTSTART;VALUE=DATE:20260704"))
    calendar = calendar_from_ics("only", text, until=date(2026, 12, 31), invert=True).calendar
    assert calendar.invert
    new_year = int(datetime(2026, 1, 1, tzinfo=UTC).timestamp() * 1000)
    assert calendar.next_allowed(new_year) == int(datetime(2026, 7, 4, tzinfo=UTC).timestamp() * 1000)
    # Nothing within the search horizon (3660 days) from 1970: no allowed time.
    assert calendar.next_allowed(0) is None


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("not a calendar", "not a valid iCalendar file"),
        (ics(lines("UID:x", "SUMMARY:no start")), "DTSTART missing"),
        (ics(lines("UID:x", "DTSTART;VALUE=DATE:20260101", "DTEND:20260102T100000Z")), "both be dates"),
        (ics(lines("UID:x", "DTSTART;VALUE=DATE:20260101", "RRULE:FREQ=DAILY")), "more than 20000"),
        (ics(lines("UID:x", "STATUS:CANCELLED", "DTSTART;VALUE=DATE:20260101")), "no events"),
    ],
)
def test_errors(text: str, fragment: str) -> None:
    with pytest.raises(TimingError) as error:
        calendar_from_ics("x", text, until=date(2099, 12, 31))
    assert error.value.field == "ics"
    assert fragment in str(error.value)


@settings(max_examples=40, deadline=None)
@given(
    st.dates(date(2025, 1, 1), date(2027, 12, 31)),
    st.sampled_from(["DAILY", "WEEKLY"]),
    st.integers(1, 5),
    st.one_of(
        st.integers(1, 30).map(lambda n: ("COUNT", n)), st.integers(0, 200).map(lambda n: ("UNTIL", n))
    ),
    st.integers(1, 3),
)
def test_daily_and_weekly_rules_expand_like_stepping(
    start: date, freq: str, interval: int, bound: tuple[str, int], length: int
) -> None:
    kind, amount = bound
    until_day = start + timedelta(days=amount)
    rule = f"COUNT={amount}" if kind == "COUNT" else f"UNTIL={until_day:%Y%m%d}"
    text = ics(
        lines(
            "UID:r",
            f"DTSTART;VALUE=DATE:{start:%Y%m%d}",
            f"DTEND;VALUE=DATE:{start + timedelta(days=length):%Y%m%d}",
            f"RRULE:FREQ={freq};INTERVAL={interval};{rule}",
        )
    )
    step = interval * (7 if freq == "WEEKLY" else 1)
    starts = [start + timedelta(days=step * i) for i in range(400)]
    starts = starts[:amount] if kind == "COUNT" else [d for d in starts if d <= until_day]
    expected = sorted({d + timedelta(days=k) for d in starts for k in range(length)})
    result = calendar_from_ics("r", text, until=date(2099, 12, 31))
    assert result.calendar.to_spec()["dates"] == [d.isoformat() for d in expected]


# Bounded work on untrusted files (security review finding 2).


def test_a_long_all_day_event_is_clipped_to_the_supported_range_before_expanding() -> None:
    text = ics(lines("UID:old", "DTSTART;VALUE=DATE:19000101", "DTEND;VALUE=DATE:19700105"))
    result = calendar_from_ics("c", text, until=date(2026, 12, 31))
    assert result.calendar.to_spec()["dates"] == ["1970-01-01", "1970-01-02", "1970-01-03", "1970-01-04"]


def test_an_all_day_event_ending_in_year_9999_is_cut_at_until_not_overflowing() -> None:
    text = ics(lines("UID:far", "DTSTART;VALUE=DATE:20260101", "DTEND;VALUE=DATE:99991231",
                     "RRULE:FREQ=DAILY;COUNT=3"))  # fmt: skip
    result = calendar_from_ics("c", text, until=date(2026, 1, 10))
    assert result.calendar.to_spec()["dates"][-1] == "2026-01-10"
    with pytest.raises(TimingError, match="more than 20000 days"):
        calendar_from_ics("c", text, until=date(9999, 12, 31))


def test_a_rule_matching_no_day_is_left_out_with_a_note_instead_of_searched() -> None:
    text = ics(
        lines("UID:never", "DTSTART:20260101T000000Z", "DTEND:20260101T000001Z",
              "RRULE:FREQ=MINUTELY;BYMONTHDAY=31;BYMONTH=4"),
        lines("UID:never-week", "DTSTART:20260101T000000Z", "DTEND:20260101T000001Z",
              "RRULE:FREQ=MINUTELY;BYWEEKNO=1;BYMONTH=6"),
        lines("UID:week", "DTSTART;VALUE=DATE:20260101", "RRULE:FREQ=DAILY;BYWEEKNO=-1;BYDAY=MO;COUNT=2"),
        lines("UID:leap", "DTSTART;VALUE=DATE:20260101", "RRULE:FREQ=DAILY;BYMONTH=2;BYMONTHDAY=29"),
    )  # fmt: skip
    result = calendar_from_ics("c", text, until=date(9999, 12, 31))
    assert any("never)" in n and "matches no day" in n for n in result.notes)
    assert any("never-week" in n and "matches no day" in n for n in result.notes)
    assert {"2026-12-28", "2027-12-27"} <= set(result.calendar.to_spec()["dates"])
    assert "2028-02-29" in result.calendar.to_spec()["dates"]


def test_a_sub_daily_rule_may_not_start_before_1970() -> None:
    text = ics(lines("UID:old", "DTSTART:19000101T000000Z", "DTEND:19000101T000001Z", "RRULE:FREQ=HOURLY"))
    with pytest.raises(TimingError, match="before 1970"):
        calendar_from_ics("c", text, until=date(2026, 12, 31))


def test_the_number_of_events_is_capped(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("jobring.core.timing.ics.MAX_EVENTS", 2)
    text = ics(*(lines(f"UID:e{i}", f"DTSTART;VALUE=DATE:2026010{i + 1}") for i in range(3)))
    with pytest.raises(TimingError, match="more than 2 events") as caught:
        calendar_from_ics("c", text, until=date(2026, 12, 31))
    assert caught.value.field == "ics"
