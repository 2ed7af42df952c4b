"""Calendars (``/calendars``): the times jobs must not fire (see docs/time.md)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from jobring.client.call import (
    ApiGroup,
    Call,
    Endpoint,
    JsonObject,
    M,
    as_list,
    as_nothing,
    as_object,
    compact,
    delete,
    get,
    post,
    put,
)
from jobring.client.core import path_part


def _calendar(calendar_id: int) -> str:
    return f"/calendars/{path_part(calendar_id)}"


def list_calendars(*, group: int | None = None) -> Call[list[JsonObject]]:
    """The calendars the caller may see (global ones and its groups'), or a group's and the
    global ones."""
    return get("/calendars", as_list, job_group=group)


def get_calendar(calendar_id: int) -> Call[JsonObject]:
    """One calendar (``spec``: its normalised parts; ``used_by``: the jobs using it)."""
    return get(_calendar(calendar_id), as_object)


def create_calendar(fields: Mapping[str, Any]) -> Call[JsonObject]:
    """A new calendar: ``name``, ``job_group`` (None: global, admins only), ``zone`` and its
    parts (``dates``, ``date_ranges``, ``workdays``, ``day_windows``, ``cron``, ``periods``,
    ``invert``)."""
    return post("/calendars", as_object, dict(fields))


def update_calendar(calendar_id: int, parts: Mapping[str, Any]) -> Call[JsonObject]:
    """Replace a calendar's zone and parts (its name and group stay); its jobs are planned again."""
    return put(_calendar(calendar_id), as_object, dict(parts))


def delete_calendar(calendar_id: int) -> Call[None]:
    """Delete a calendar that no job uses."""
    return delete(_calendar(calendar_id), as_nothing)


def import_calendar(
    name: str,
    *,
    group: int | None = None,
    zone: str | None = None,
    ics: str | None = None,
    dates: Sequence[str] | None = None,
    until: str | None = None,
    invert: bool = False,
    replace: bool = False,
) -> Call[JsonObject]:
    """A calendar from an ``.ics`` file's text (recurrences expanded up to ``until``) or a list
    of dates; ``replace`` replaces the parts of the calendar of that name. ``notes`` in the
    answer say what the import left out."""
    body = compact({"name": name, "job_group": group, "zone": zone, "ics": ics,
                    "dates": None if dates is None else list(dates), "until": until})
    body.update(invert=invert, replace=replace)
    return post("/calendars/import", as_object, body)


class CalendarsApi(ApiGroup[M]):
    """Named calendars."""

    list = Endpoint(list_calendars)
    get = Endpoint(get_calendar)
    create = Endpoint(create_calendar)
    update = Endpoint(update_calendar)
    delete = Endpoint(delete_calendar)
    import_ = Endpoint(import_calendar)
