"""/calendars: named calendars (the times jobs must not fire): list, get, create, import from
an ``.ics`` file or a list of dates, update, delete (issue 24).

A calendar is global (``job_group`` null: admins write it, every job may use it, everyone may
read it) or a group's (its writers write it, its jobs may use it, its readers read it). A
calendar in use cannot be deleted; an edit makes the scheduling loop plan its jobs again.

Names are shared by all groups (a job's timing names its calendars). A calendar the caller may
not read answers as one that does not exist; a taken name answers "name not available" alike
whether the caller may see that calendar or not; ``used_by`` lists only jobs the caller may
read (the others are counted, without ids).
"""

from __future__ import annotations

import asyncio
from datetime import UTC, date, datetime, timedelta
from typing import Annotated, Any

import orjson
from fastapi import APIRouter, Path, Query, Response

from jobring.admin.api.management.deps import Reader, Services, Writer, ensure_group_read, ensure_group_write
from jobring.admin.api.management.errors import ERROR_RESPONSES, ApiError, not_found
from jobring.admin.api.management.models import MAX_INT32
from jobring.admin.api.management.services import ManagementServices
from jobring.admin.api.management.timemodels import (
    CalendarImport,
    CalendarImportOut,
    CalendarIn,
    CalendarOut,
    CalendarParts,
    CalendarUpdate,
)
from jobring.admin.loop.timed import calendar_names
from jobring.admin.security.principal import Principal
from jobring.admin.services.audit import AuditAction
from jobring.admin.services.validation import FieldError, missing_group
from jobring.admin.store.calendars import CalendarRow
from jobring.admin.store.errors import Conflict
from jobring.admin.store.records import JobInfo
from jobring.core.timing import Calendar, TimingError, calendar_from_ics, parse_calendar

router = APIRouter(tags=["calendars"], responses=ERROR_RESPONSES)

CalendarId = Annotated[int, Path(ge=1, le=MAX_INT32)]
IMPORT_YEARS = 2  # recurring .ics events are expanded this far by default


def _parsed(spec: dict[str, Any]) -> Calendar:
    try:
        return parse_calendar(spec)
    except TimingError as exc:
        raise FieldError(exc.field, exc.problem) from None


def _spec(name: str, parts: CalendarParts) -> dict[str, Any]:
    spec = parts.model_dump(exclude_none=True, exclude={"name", "job_group"})
    spec["name"] = name
    return {k: v for k, v in spec.items() if v != []}


async def _out(services: ManagementServices, principal: Principal, row: CalendarRow) -> CalendarOut:
    seen, hidden = _visible(principal, await _users(services, row.name))
    return CalendarOut(id=row.id, name=row.name, job_group=row.job_group, spec=orjson.loads(row.spec),
                       update_time=row.update_time, updated_by=row.updated_by,
                       used_by=seen, used_by_hidden=hidden)


async def _users(services: ManagementServices, name: str) -> list[JobInfo]:
    candidates = await services.store.calendars.jobs_using(name)
    jobs = await services.store.jobs.get_many(candidates)
    return sorted((j for j in jobs.values() if name in calendar_names(j.timing)), key=lambda j: j.id)


def _visible(principal: Principal, users: list[JobInfo]) -> tuple[list[int], int]:
    """The ids of the jobs the caller may read, and how many others (a global calendar's users
    are in every group: their ids are not another group's to learn)."""
    seen = [j.id for j in users if principal.can_read_group(j.job_group)]
    return seen, len(users) - len(seen)


def _name_taken(name: str) -> FieldError:
    """The same answer whether the caller may see the calendar holding the name or not."""
    return FieldError("name", f"name {name!r} is not available (calendar names are shared by all groups)")


def _ensure_write(principal: Principal, group_id: int | None) -> None:
    if group_id is None:
        if not principal.is_admin:
            raise ApiError(403, "only an admin may write a global calendar (give job_group)", "job_group")
    else:
        ensure_group_write(principal, group_id, missing_group("job_group", group_id))


async def _load(services: ManagementServices, principal: Principal, calendar_id: int) -> CalendarRow:
    row = await services.store.calendars.get(calendar_id)
    if row is None:
        raise not_found("calendar", calendar_id)
    if row.job_group is not None:
        ensure_group_read(principal, row.job_group, not_found("calendar", calendar_id))
    return row


async def _touch_users(services: ManagementServices, name: str) -> None:
    """Jobs using the calendar get a new update time: the loop plans them again."""
    await services.store.calendars.touch_jobs([j.id for j in await _users(services, name)],
                                              services.now_naive_utc())


async def _audit(services: ManagementServices, principal: Principal, action: AuditAction, row: CalendarRow,
                 **details: Any) -> None:
    await services.audit.record(principal, action, target_type="calendar", target_id=row.id,
                                group_id=row.job_group, details={"name": row.name, **details})


@router.get("/calendars", response_model=list[CalendarOut],
            summary="List calendars (global and the caller's groups')")
async def list_calendars(
    services: Services, principal: Reader,
    job_group: Annotated[int | None, Query(ge=1, le=MAX_INT32, description="global and this group's")] = None,
) -> list[CalendarOut]:
    if job_group is not None:
        ensure_group_read(principal, job_group)
        groups: list[int] | None = [job_group]
    else:
        groups = principal.readable_group_ids()
    rows = await services.store.calendars.list(groups)
    if job_group is not None:
        rows = [r for r in rows if r.job_group in (None, job_group)]
    return [await _out(services, principal, r) for r in rows]


@router.get("/calendars/{calendar_id}", response_model=CalendarOut, summary="Get a calendar")
async def get_calendar(calendar_id: CalendarId, services: Services, principal: Reader) -> CalendarOut:
    return await _out(services, principal, await _load(services, principal, calendar_id))


@router.post("/calendars", response_model=CalendarOut, status_code=201, summary="Create a calendar")
async def create_calendar(body: CalendarIn, services: Services, principal: Writer) -> CalendarOut:
    _ensure_write(principal, body.job_group)
    if body.job_group is not None and await services.store.groups.get(body.job_group) is None:
        raise missing_group("job_group", body.job_group)
    calendar = _parsed(_spec(body.name, body))
    row = await _create(services, principal, calendar, body.job_group)
    await _audit(services, principal, AuditAction.CALENDAR_CREATE, row)
    return await _out(services, principal, row)


async def _create(services: ManagementServices, principal: Principal, calendar: Calendar,
                  group_id: int | None) -> CalendarRow:
    text = orjson.dumps(calendar.to_spec()).decode()
    try:
        new_id = await services.store.calendars.create(calendar.name, group_id, text, services.now_ms(),
                                                       principal.user.username)
    except Conflict:
        raise _name_taken(calendar.name) from None
    row = await services.store.calendars.get(new_id)
    assert row is not None
    return row


@router.put("/calendars/{calendar_id}", response_model=CalendarOut,
            summary="Replace a calendar's parts (its jobs are planned again)")
async def update_calendar(
    calendar_id: CalendarId, body: CalendarUpdate, services: Services, principal: Writer
) -> CalendarOut:
    row = await _load(services, principal, calendar_id)
    _ensure_write(principal, row.job_group)
    return await _replace(services, principal, row, _parsed(_spec(row.name, body)))


async def _replace(services: ManagementServices, principal: Principal, row: CalendarRow, calendar: Calendar,
                   **details: Any) -> CalendarOut:
    text = orjson.dumps(calendar.to_spec()).decode()
    if not await services.store.calendars.update(row.id, text, services.now_ms(), principal.user.username):
        raise not_found("calendar", row.id)
    await _touch_users(services, row.name)
    before, after = _changed(orjson.loads(row.spec), calendar.to_spec())
    fresh = await services.store.calendars.get(row.id)
    assert fresh is not None
    await services.audit.record(principal, AuditAction.CALENDAR_UPDATE, target_type="calendar",
                                target_id=fresh.id, group_id=fresh.job_group, before=before, after=after,
                                details={"name": fresh.name, **details})
    return await _out(services, principal, fresh)


def _changed(old: dict[str, Any], new: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """The parts an update changed, as they were and as they are (a large list is summarised)."""
    keys = sorted(k for k in old.keys() | new.keys() if old.get(k) != new.get(k))
    return {k: _brief(old.get(k)) for k in keys}, {k: _brief(new.get(k)) for k in keys}


def _brief(value: Any) -> Any:
    if isinstance(value, list) and len(value) > 50:
        return {"count": len(value), "first": value[:50]}
    return value


@router.delete("/calendars/{calendar_id}", status_code=204, response_class=Response,
               summary="Delete a calendar no job uses")
async def delete_calendar(calendar_id: CalendarId, services: Services, principal: Writer) -> Response:
    row = await _load(services, principal, calendar_id)
    _ensure_write(principal, row.job_group)
    seen, hidden = _visible(principal, await _users(services, row.name))
    if seen or hidden:
        which = f"jobs {seen[:20]}" + (f" and {hidden} more in groups you may not read" if hidden else "")
        if not seen:
            which = f"{hidden} jobs in groups you may not read"
        raise ApiError(409, f"calendar {row.name!r} is used by {which}; take it off them first")
    await services.store.calendars.delete(row.id)
    await _audit(services, principal, AuditAction.CALENDAR_DELETE, row)
    return Response(status_code=204)


@router.post("/calendars/import", response_model=CalendarImportOut, status_code=201,
             summary="Create (or replace) a calendar from an .ics file's text or a list of dates")
async def import_calendar(body: CalendarImport, services: Services, principal: Writer) -> CalendarImportOut:
    if (body.ics is None) == (body.dates is None):
        raise FieldError("ics", "give either ics (an .ics file's text) or dates")
    notes: list[str] = []
    if body.ics is not None:
        today = datetime.fromtimestamp(services.now_ms() / 1000, UTC).date()
        until = today + timedelta(days=366 * IMPORT_YEARS)
        if body.until is not None:
            try:
                until = date.fromisoformat(body.until)
            except ValueError:
                raise FieldError("until", f"must be a date as YYYY-MM-DD, got {body.until!r}") from None
        try:
            # Bounded, but still up to ~0.1 s of CPU: parsed off the event loop.
            imported = await asyncio.to_thread(calendar_from_ics, body.name, body.ics, until=until,
                                               zone=body.zone, invert=body.invert)
        except TimingError as exc:
            field = exc.field if exc.field in ("zone", "name") else "ics"
            raise FieldError(field, exc.problem if field != "ics" else str(exc)) from None
        calendar, notes = imported.calendar, list(imported.notes)
    else:
        calendar = _parsed({"name": body.name, "zone": body.zone, "dates": body.dates or [],
                            "invert": body.invert})
    existing = await services.store.calendars.by_names([body.name])
    if existing and body.replace:
        row = existing[0]
        if row.job_group is not None and not principal.can_read_group(row.job_group):
            raise _name_taken(body.name)
        _ensure_write(principal, row.job_group)
        out = await _replace(services, principal, row, calendar, imported=True)
        return CalendarImportOut(**out.model_dump(), notes=notes)
    _ensure_write(principal, body.job_group)
    if body.job_group is not None and await services.store.groups.get(body.job_group) is None:
        raise missing_group("job_group", body.job_group)
    row = await _create(services, principal, calendar, body.job_group)
    await _audit(services, principal, AuditAction.CALENDAR_CREATE, row, imported=True)
    out = await _out(services, principal, row)
    return CalendarImportOut(**out.model_dump(), notes=notes)
