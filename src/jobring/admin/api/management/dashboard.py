"""/dashboard (counts, runs per day, recent failures, admin nodes), /settings (admin),
/settings/console (what every user's console needs) and /settings/access-token (admin).

Every count is limited to the executor groups the caller may read."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta, tzinfo
from typing import Annotated, Any

from fastapi import APIRouter, Query

from jobring.admin.api.management.deps import Admin, Reader, Services
from jobring.admin.api.management.errors import ERROR_RESPONSES, ApiError
from jobring.admin.api.management.models import (
    AccessTokenOut,
    ConsoleSettingsOut,
    DashboardOut,
    DayCountOut,
    NodeOut,
    RunOut,
    SettingsOut,
)
from jobring.admin.api.management.services import ManagementServices
from jobring.admin.security.principal import Principal
from jobring.admin.services.audit import AuditAction
from jobring.admin.store.records import DayCount, LogStatus
from jobring.admin.store.zones import zone_named
from jobring.version import jobring_version

router = APIRouter(tags=["dashboard"], responses=ERROR_RESPONSES)

MAX_CHART_DAYS = 90
# The days a chart may show: run times are stored from the epoch on, and a day past the last
# one would have no end to count to.
FIRST_CHART_DAY = date(1970, 1, 1)
LAST_CHART_DAY = date(9999, 12, 30)
# The chart days told to schema readers: years 1970-9998 (a little narrower than the server).
_DAY: dict[str, Any] = {
    "pattern": "^(?:19[7-9][0-9]|[2-8][0-9]{3}|9[0-8][0-9]{2}|99[0-8][0-9]|999[0-8])-[0-9]{2}-[0-9]{2}$"
}
LATENESS_WINDOW_MS = 3_600_000
RECENT_FAILURES = 8


def _range(
    today: datetime, days: int, from_day: date | None, to_day: date | None
) -> tuple[datetime, datetime]:
    """The chart's first and last day (midnights, UTC)."""
    midnight = datetime.min.time()
    last = today if to_day is None else datetime.combine(to_day, midnight)
    if from_day is None:  # the days before the first chart day are not shown
        first = max(datetime.combine(FIRST_CHART_DAY, midnight), last - timedelta(days=days - 1))
    else:
        first = datetime.combine(from_day, midnight)
    if first > last:
        raise ApiError(422, "from_day must not be after to_day", "from_day")
    if (last - first).days + 1 > MAX_CHART_DAYS:
        raise ApiError(422, f"the chart spans at most {MAX_CHART_DAYS} days", "from_day")
    return first, last


async def _day_counts(
    services: ManagementServices, principal: Principal, first: datetime, last: datetime, today: datetime,
    zone: tzinfo,
) -> dict[date, DayCount]:
    group_ids = principal.readable_group_ids()
    if group_ids is not None:  # the report table is for every group: count this user's own runs
        now_ms = services.now_ms()
        counts = await services.store.logs.counts_by_day(first, last, group_ids, zone=zone, now_ms=now_ms)
        return {c.day.date(): c for c in counts}
    # The report table is refreshed every minute by the admin; today's row comes from the
    # logs themselves so the numbers are current.
    stored = {c.day.date(): c for c in await services.store.reports.range(first, last)}
    if first <= today <= last:
        (current,) = await services.store.logs.counts_by_day(
            today, today, zone=zone, now_ms=services.now_ms()
        )
        stored[today.date()] = current
    return stored


async def _executor_count(services: ManagementServices, principal: Principal, now: datetime) -> int:
    alive_since = now - timedelta(seconds=services.settings.executor_dead_after_s)
    live = await services.store.registry.live(alive_since)
    group_ids = principal.readable_group_ids()
    if group_ids is not None:
        names = {g.app_name for g in await services.store.groups.all() if g.id in set(group_ids)}
        live = {name: addresses for name, addresses in live.items() if name in names}
    return len({address for addresses in live.values() for address in addresses})


@router.get("/dashboard", response_model=DashboardOut, summary="Counts, runs per day, failures, nodes")
async def dashboard(
    services: Services,
    principal: Reader,
    days: Annotated[int, Query(ge=1, le=MAX_CHART_DAYS, description="chart length in days")] = 7,
    from_day: Annotated[date | None, Query(ge=FIRST_CHART_DAY, le=LAST_CHART_DAY, json_schema_extra=_DAY,
                                           description="first chart day (UTC); overrides days")] = None,
    to_day: Annotated[date | None, Query(ge=FIRST_CHART_DAY, le=LAST_CHART_DAY, json_schema_extra=_DAY,
                                         description="last chart day (UTC); default today")] = None,
) -> DashboardOut:
    now = services.now_naive_utc()
    # Days are calendar days of the scheduling zone (XXL-JOB's report rows count them so).
    zone = zone_named(services.settings.timezone or "UTC")
    local_now = now.replace(tzinfo=UTC).astimezone(zone)
    today = local_now.replace(tzinfo=None, hour=0, minute=0, second=0, microsecond=0)
    first, last = _range(today, days, from_day, to_day)
    group_ids = principal.readable_group_ids()
    jobs = await services.store.jobs.list(group_ids=group_ids, limit=1)
    stored = await _day_counts(services, principal, first, last, today, zone)
    if today.date() in stored:
        current = stored[today.date()]
    else:
        (current,) = await services.store.logs.counts_by_day(
            today, today, group_ids, zone=zone, now_ms=services.now_ms()
        )
    chart: list[DayCountOut] = []
    for offset in range((last - first).days + 1):
        day = first + timedelta(days=offset)
        count = stored.get(day.date()) or DayCount(day, 0, 0, 0)
        chart.append(DayCountOut(
            day=day.date().isoformat(), running=count.running, success=count.success, fail=count.fail
        ))
    failures = await services.store.logs.list(
        group_ids=group_ids, status=LogStatus.FAIL, limit=RECENT_FAILURES, count_cap=0
    )
    now_ms = services.now_ms()
    scheduled = await services.store.insights.scheduled_count(today, group_ids, now_ms, zone=zone)
    nodes = await services.store.insights.node_activity(now_ms, now_ms - LATENESS_WINDOW_MS, group_ids)
    return DashboardOut(
        job_count=jobs.total,
        executor_count=await _executor_count(services, principal, now),
        runs_today=current.running + current.success + current.fail,
        runs_today_success=current.success,
        runs_today_fail=current.fail,
        runs_today_running=current.running,
        runs_today_scheduled=scheduled,
        chart=chart,
        recent_failures=[RunOut.of(e, now_ms) for e in failures.items],
        nodes=[
            NodeOut(
                node_id=n.node_id,
                alive=n.alive_until >= now_ms,
                held_jobs=n.held_jobs,
                fires_last_hour=n.fires,
                lateness_avg_ms=n.lateness_avg_ms,
                lateness_max_ms=n.lateness_max_ms,
            )
            for n in nodes
        ],
    )


@router.get(
    "/settings/console",
    response_model=ConsoleSettingsOut,
    tags=["settings"],
    summary="What every signed-in user's console needs: GLUE on or off, the default zone, e-mail alarms",
)
async def console_settings(services: Services, principal: Reader) -> ConsoleSettingsOut:
    return ConsoleSettingsOut(
        glue_enabled=services.settings.glue_enabled, timezone=services.settings.timezone or "UTC",
        email_alarms=bool(services.settings.smtp_host),
    )


@router.get(
    "/settings/access-token",
    response_model=AccessTokenOut,
    tags=["settings"],
    summary="The global executor access token, if enabled (admin)",
)
async def access_token(services: Services, principal: Admin) -> AccessTokenOut:
    await services.audit.record(
        principal, AuditAction.SECRET_READ, target_type="setting", target_id="access_token"
    )
    token = services.secrets.access_token
    return AccessTokenOut(enabled=token is not None, access_token=token)


@router.get(
    "/settings", response_model=SettingsOut, tags=["settings"], summary="The admin's settings (admin)"
)
async def settings(services: Services, principal: Admin) -> SettingsOut:
    configured = services.settings
    return SettingsOut(
        version=jobring_version(),
        database_backend=services.store.backend,
        timezone=configured.timezone or "UTC",
        base_path=configured.base_path,
        glue_enabled=configured.glue_enabled,
        email_alarms=bool(configured.smtp_host),
        global_access_token=services.secrets.access_token is not None,
    )
