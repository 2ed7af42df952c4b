"""Models of calendars, job timing rules, pauses and fire previews (issue 24)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool

from jobring.admin.api.management.models import (
    CalendarName,
    Id32,
    JobTiming,
    Line,
    SchedulePreviewIn,
    SchedulePreviewOut,
    Strict,
    Text,
)

# Formats of the document (described for schema readers; the server checks them with the
# calendar rules, which also refuse control characters): a date 1970-2099, a time of day, an
# ISO 8601 date-time 1970-2099. Plain strings: a pattern beside the format would be what
# schema readers generate from.
DateText = Annotated[str, Field(max_length=10, description="YYYY-MM-DD, 1970-2099",
                                 json_schema_extra={"format": "calendar-date"})]
TimeOfDay = Annotated[str, Field(max_length=8, description="HH:MM or HH:MM:SS (an end may be 24:00)",
                                  json_schema_extra={"format": "time-of-day"})]
Instant = Annotated[str, Field(max_length=40, description="ISO 8601 date-time, 1970-2099 (no offset: the "
                                "calendar's zone)", json_schema_extra={"format": "calendar-instant"})]
CalendarZone = Annotated[str, Field(max_length=64, json_schema_extra={"format": "iana-time-zone"})]
Weekday = Literal["MON", "TUE", "WED", "THU", "FRI", "SAT", "SUN"]
Workdays = Annotated[list[Weekday], Field(min_length=1, max_length=7,
                                          json_schema_extra={"uniqueItems": True})]


class DateRange(Strict):
    start: DateText
    end: DateText


class DayWindow(Strict):
    start: TimeOfDay
    end: TimeOfDay


class Period(Strict):
    start: Instant
    end: Instant


class CalendarParts(Strict):
    """The times a calendar names (their union), read in its zone; see docs/time.md."""

    zone: CalendarZone = "UTC"
    dates: Annotated[list[DateText], Field(max_length=20_000)] = Field(default_factory=list)
    date_ranges: Annotated[list[DateRange], Field(max_length=1_000)] = Field(default_factory=list)
    workdays: Workdays | None = Field(None, description="the workdays: every other day is named")
    day_windows: Annotated[list[DayWindow], Field(max_length=100)] = Field(default_factory=list)
    cron: Annotated[str, Field(max_length=256, json_schema_extra={"format": "quartz-cron"})] | None = Field(
        None, description="the seconds a cron expression selects (Quartz, or Unix 5 fields)")
    periods: Annotated[list[Period], Field(max_length=20_000)] = Field(default_factory=list)
    invert: StrictBool = Field(False, description="true: only the named times are allowed")


class CalendarIn(CalendarParts):
    model_config = ConfigDict(json_schema_extra={"examples": [{
        "name": "cn-2026", "job_group": None, "zone": "Asia/Shanghai",
        "dates": ["2026-10-01", "2026-10-02"], "date_ranges": [{"start": "2026-02-15", "end": "2026-02-21"}],
    }]})

    name: CalendarName
    job_group: Id32 | None = Field(None, description="null: a global calendar (admins only)")


class CalendarUpdate(CalendarParts):
    """A calendar's parts replaced whole (its name and group stay)."""


class CalendarImport(Strict):
    model_config = ConfigDict(json_schema_extra={"examples": [{
        "name": "holidays", "zone": "Europe/Berlin", "ics": "BEGIN:VCALENDAR\r\n...", "until": "2027-12-31",
    }]})

    name: CalendarName
    job_group: Id32 | None = None
    zone: CalendarZone = "UTC"
    ics: Annotated[Text, Field(max_length=5_000_000)] | None = Field(None, description="an .ics file's text")
    dates: Annotated[list[DateText], Field(max_length=20_000)] | None = Field(
        default=None, description="or a list of dates")
    until: DateText | None = Field(
        default=None, description="expand recurring events up to this date (default: 2 years)")
    invert: StrictBool = False
    replace: StrictBool = Field(
        False, description="replace the parts of the calendar of that name, if it exists")


class CalendarOut(BaseModel):
    id: int
    name: str
    job_group: int | None
    spec: dict[str, Any] = Field(description="the normalised calendar (name, zone, invert and its parts)")
    update_time: int = Field(description="epoch ms")
    updated_by: str | None
    used_by: list[int] = Field(default_factory=list,
                               description="ids of the jobs that use it (those the caller may read)")
    used_by_hidden: int = Field(0, description="jobs that use it in groups the caller may not read (no ids)")


class CalendarImportOut(CalendarOut):
    notes: list[str] = Field(default_factory=list, description="what the import left out or cut")


class StopIn(Strict):
    model_config = ConfigDict(json_schema_extra={"examples": [{"reason": "upstream data late, see INC-42"}]})

    reason: Annotated[Line, Field(max_length=500)] | None = Field(
        None, description="why the job is paused (shown with who and when)")


class PreviewFire(BaseModel):
    logical: int = Field(description="the schedule instant it stands for, epoch ms")
    fire_at: int = Field(description="when it starts (moved, plus jitter), epoch ms")
    fire_at_iso: str
    moved_by: str | None = Field(default=None, description="the calendar rule that moved it")


class PreviewExcluded(BaseModel):
    instant: int = Field(description="epoch ms")
    instant_iso: str
    reason: str
    calendar: str | None


class TimingPreview(BaseModel):
    fires: list[PreviewFire] = Field(default_factory=list)
    excluded: list[PreviewExcluded] = Field(default_factory=list, description="instants a calendar excluded")
    more_excluded: bool = False
    end: str | None = Field(
        default=None, description="why fewer fires than asked: end_at, max_runs, schedule_ended ...")


class TimedPreviewIn(SchedulePreviewIn):
    timing: JobTiming | None = Field(None, description="preview under these timing rules")
    job_group: Id32 | None = Field(None, description="the group whose calendars the timing may name")
    job_id: Id32 | None = Field(
        default=None, description="a saved job: its timing (unless given), group and run count")


class TimedPreviewOut(SchedulePreviewOut, TimingPreview):
    """``times``: when the fires start (after calendars and jitter); ``fires`` tell each one's
    logical instant; ``excluded`` the instants the calendars exclude on the way."""
