"""/dashboard (counts and per-day chart data), /settings and /settings/access-token (admin)."""

from __future__ import annotations

from datetime import UTC, timedelta
from typing import Annotated

from fastapi import APIRouter, Query

from jobring.admin.api.management.deps import Admin, Reader, Services
from jobring.admin.api.management.errors import ERROR_RESPONSES
from jobring.admin.api.management.models import AccessTokenOut, DashboardOut, DayCountOut, SettingsOut
from jobring.admin.audit import AuditAction
from jobring.admin.store.records import DayCount
from jobring.admin.store.zones import zone_named

router = APIRouter(tags=["dashboard"], responses=ERROR_RESPONSES)

HEARTBEAT_ALIVE = timedelta(seconds=90)


@router.get("/dashboard", response_model=DashboardOut, summary="Counts and runs per day")
async def dashboard(
    services: Services,
    principal: Reader,
    days: Annotated[int, Query(ge=1, le=90, description="chart length in days")] = 7,
) -> DashboardOut:
    now = services.now_naive_utc()
    # Days are calendar days of the scheduling zone (XXL-JOB's report rows count them so).
    zone = zone_named(services.settings.timezone or "UTC")
    local_now = now.replace(tzinfo=UTC).astimezone(zone)
    today = local_now.replace(tzinfo=None, hour=0, minute=0, second=0, microsecond=0)
    first = today - timedelta(days=days - 1)
    group_ids = principal.readable_group_ids()  # None: every group (admins)
    jobs = await services.store.jobs.list(group_ids=group_ids, limit=1)
    live = await services.store.registry.live(now - HEARTBEAT_ALIVE)
    if group_ids is not None:
        # A group-limited user sees the counts of its groups only, never the whole admin's.
        groups = await services.store.groups.list(group_ids=group_ids, limit=max(len(group_ids), 1))
        app_names = {group.app_name for group in groups.items}
        live = {app: addresses for app, addresses in live.items() if app in app_names}
        stored = {c.day.date(): c for c in await services.store.logs.counts_by_day(
            first, today, group_ids, zone=zone, now_ms=services.now_ms())}
    else:
        # The report table is refreshed every minute by the admin; today's row comes from
        # the logs themselves so the numbers are current.
        stored = {c.day.date(): c for c in await services.store.reports.range(first, today)}
        (stored[today.date()],) = await services.store.logs.counts_by_day(
            today, today, zone=zone, now_ms=services.now_ms())
    executor_count = len({address for addresses in live.values() for address in addresses})
    current = stored[today.date()]
    chart: list[DayCountOut] = []
    for offset in range(days):
        day = (first + timedelta(days=offset)).date()
        count = stored.get(day) or DayCount(first + timedelta(days=offset), 0, 0, 0)
        chart.append(
            DayCountOut(day=day.isoformat(), running=count.running, success=count.success, fail=count.fail)
        )
    return DashboardOut(
        job_count=jobs.total,
        executor_count=executor_count,
        runs_today=current.running + current.success + current.fail,
        runs_today_success=current.success,
        runs_today_fail=current.fail,
        runs_today_running=current.running,
        chart=chart,
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
    from jobring.admin.app import jobring_version  # the app module imports this one

    configured = services.settings
    return SettingsOut(
        version=jobring_version(),
        database_backend=services.store.backend,
        timezone=configured.timezone or "UTC",
        base_path=configured.base_path,
        glue_enabled=configured.glue_enabled,
        global_access_token=services.secrets.access_token is not None,
    )
