"""Job operations shared by the REST routers and the XXL-JOB 3.x aliases.

Callers check the caller's role and group with ``ensure_group_read``/``ensure_group_write``
(the ``*_for`` loaders do it: a job the caller may not see is not found); GLUE and child-job
permissions are checked here, from the principal every write takes. Everything is validated
first and then written, so a refused request leaves the database as it was.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from jobring.admin.alarms.outbound import HostUnresolved, RefusedAnswer, pinned_address
from jobring.admin.alarms.targets import TargetError, dump_targets, parse_targets, restore_masked
from jobring.admin.api.management import timing
from jobring.admin.api.management.deps import ensure_group_read, ensure_group_write
from jobring.admin.api.management.models import MAX_DELAY_MS
from jobring.admin.api.management.services import ManagementServices
from jobring.admin.security.principal import Principal
from jobring.admin.services.validation import (
    FieldError,
    check_address,
    check_job,
    check_job_references,
    check_no_cycle,
    missing_group,
)
from jobring.admin.store.delayed import DelayedFire
from jobring.admin.store.records import JobInfo
from jobring.admin.store.removal import remove_job_history
from jobring.admin.trigger.trigger import FireRequest, FireResult, TriggerRejected
from jobring.core.addresses import AddressRefused, target_urls
from jobring.core.enums import GlueType, ScheduleType, TriggerStatus, TriggerType
from jobring.core.schedule import parse_schedule
from jobring.errors import BadRequest, Conflict, Forbidden, Invalid, NotFound, Unavailable

GLUE_DISABLED = "GLUE is disabled on this admin (set JOBRING_GLUE_ENABLED=true to enable it)"
GLUE_NOT_PERMITTED = "you have no GLUE permission"


def ensure_glue_allowed(services: ManagementServices, principal: Principal) -> None:
    """403 unless GLUE is enabled and the caller may edit it."""
    if not services.settings.glue_enabled:
        raise Forbidden(GLUE_DISABLED)
    if not principal.can_edit_glue:
        raise Forbidden(GLUE_NOT_PERMITTED)


def alarm_targets_text(raw: list[dict[str, Any]] | None, old: JobInfo | None = None) -> str | None:
    """The stored JSON of a job's alarm target list, checked by each channel's rules (FieldError
    naming the bad part); a masked value sent back keeps ``old``'s real one."""
    try:
        stored = parse_targets(old.alarm_targets) if old is not None else []
        return dump_targets(restore_masked(parse_targets(raw or []), stored))
    except TargetError as exc:
        raise FieldError(exc.field, exc.message) from None


async def load_job(services: ManagementServices, job_id: int) -> JobInfo:
    job = await services.store.jobs.get(job_id)
    if job is None:
        raise NotFound(f"job {job_id} not found")
    return job


async def load_job_for_read(services: ManagementServices, principal: Principal, job_id: int) -> JobInfo:
    """The job, when the caller may see its group (404 when missing or hidden)."""
    job = await load_job(services, job_id)
    ensure_group_read(principal, job.job_group, NotFound(f"job {job_id} not found"))
    return job


async def load_job_for_write(services: ManagementServices, principal: Principal, job_id: int) -> JobInfo:
    """The job, when the caller may operate its group (404 when missing or hidden, 403 for a viewer)."""
    job = await load_job(services, job_id)
    ensure_group_write(principal, job.job_group, NotFound(f"job {job_id} not found"))
    return job


def _child_usable(principal: Principal, old: JobInfo | None) -> Callable[[JobInfo], bool]:
    kept = set(old.child_job_ids) if old is not None else set()

    def usable(child: JobInfo) -> bool:
        return child.id in kept or principal.can_write_group(child.job_group)

    return usable


async def validate_job(
    services: ManagementServices, job: JobInfo, principal: Principal, old: JobInfo | None = None
) -> None:
    """Fields, references, and the children the caller adds: each must be in a group the
    caller may operate; one it may not answers as a missing job does (no id probing).
    Children already on ``old`` stay (an admin may have chained across groups)."""
    check_job(job, services.settings.timezone or "UTC")
    await check_job_references(services.store, job, _child_usable(principal, old))
    await check_alarm_targets(services, job, old)


SAVE_RESOLVE_TIMEOUT_S = 2.0


def _target_urls(targets: str | list[Any] | None) -> list[tuple[str, str]]:
    """(field, URL) of every URL of a job's alarm targets; FieldError when they do not parse."""
    try:
        parsed = parse_targets(targets)
    except TargetError as exc:
        raise FieldError(exc.field, exc.message) from None
    return [(f"alarm_targets.{i}.{key}", url)
            for i, target in enumerate(parsed) for key, url in target_urls(target.config)]


async def check_alarm_targets(services: ManagementServices, job: JobInfo, old: JobInfo | None = None) -> None:
    """Every alarm URL the job adds passes the alarm address policy; a host name is also
    resolved now and refused when an address it resolves to is (one that does not resolve
    now is checked at each send, like every name). URLs already stored are not re-checked
    here (they are at each send)."""
    kept = {url for _, url in _target_urls(old.alarm_targets)} if old is not None else set()
    for field, url in _target_urls(job.alarm_targets):
        if url in kept:
            continue
        try:
            await pinned_address(url, services.alarm_policy, services.alarm_resolve, SAVE_RESOLVE_TIMEOUT_S)
        except RefusedAnswer as exc:
            raise FieldError(field, f"not an allowed alarm target: {exc.public}") from None
        except AddressRefused as exc:
            raise FieldError(field, f"not an allowed alarm target: {exc}") from None
        except HostUnresolved:
            continue


# Valid stand-ins for stored values checked only when a request changes them, so the check
# of an update can go on past a legacy value (one XXL-JOB accepted) the request did not touch.
_STAND_INS: dict[str, Any] = {
    "job_desc": "job", "author": None, "alarm_email": None, "executor_handler": "handler",
    "executor_param": None, "glue_remark": None, "child_jobid": None, "schedule_timezone": None,
    "misfire_strategy": "DO_NOTHING", "executor_route_strategy": "FIRST",
    "executor_block_strategy": "SERIAL_EXECUTION", "glue_type": "BEAN", "executor_timeout": 0,
    "executor_fail_retry_count": 0, "schedule_type": "NONE", "schedule_conf": None,
}
# Fields whose rules involve each other: changing one re-checks the others strictly.
_RELATED = (
    frozenset({"schedule_type", "schedule_conf", "schedule_timezone"}),
    frozenset({"glue_type", "executor_handler"}),
)


def _strict_fields(old: JobInfo, new: JobInfo) -> set[str]:
    changed = {name for name in _STAND_INS if getattr(old, name) != getattr(new, name)}
    if new.job_group != old.job_group:
        changed.add("job_group")
    for related in _RELATED:
        if changed & related:
            changed |= related
    return changed


async def validate_job_update(
    services: ManagementServices, old: JobInfo, new: JobInfo, principal: Principal
) -> list[str]:
    """Check what the update changes (and the rules those fields take part in); stored values
    it leaves alone are kept even when a new job could not have them. Returns one warning per
    such legacy value; FieldError for a changed field."""
    await check_alarm_targets(services, new, old)
    strict = _strict_fields(old, new)
    warnings: list[str] = []
    candidate = new
    zone = services.settings.timezone or "UTC"
    for _ in range(len(_STAND_INS) + 2):
        try:
            check_job(candidate, zone)
            await check_job_references(services.store, candidate, _child_usable(principal, old))
            return warnings
        except FieldError as exc:
            if exc.field in strict or exc.field not in _STAND_INS:
                raise
            warnings.append(f"kept the stored value of {exc}: a new job could not have it")
            candidate = replace(candidate, **{exc.field: _STAND_INS[exc.field]})
    raise Invalid("too many invalid stored values to check this update")


async def next_fire_after(services: ManagementServices, job: JobInfo, after_ms: int) -> int:
    """The job's next fire strictly after ``after_ms`` under its timing rules (as the loop
    plans it: an instant a calendar excludes counts, it is recorded as skipped); BadRequest
    when it never fires."""
    zone = job.schedule_timezone or services.settings.timezone or "UTC"
    try:
        schedule = parse_schedule(job.schedule_type, job.schedule_conf, zone)
    except ValueError as exc:
        raise FieldError("schedule_conf", str(exc)) from None
    timed = await timing.timed_schedule(services, job, schedule, after_ms)
    following = timed.next_fire_ms(after_ms)
    if following is None:
        field = "timing" if job.timing else "schedule_conf"
        raise BadRequest(f"the schedule of job {job.id} never fires again", field)
    return following


async def create_job(services: ManagementServices, job: JobInfo, principal: Principal) -> JobInfo:
    ensure_group_write(principal, job.job_group, missing_group("job_group", job.job_group))
    if job.glue_type != GlueType.BEAN:
        ensure_glue_allowed(services, principal)
    now = services.now_naive_utc()
    job = replace(
        job,
        id=0,
        trigger_status=int(TriggerStatus.STOPPED),
        trigger_last_time=0,
        trigger_next_time=0,
        add_time=now,
        update_time=now,
        glue_updatetime=now if job.glue_type != GlueType.BEAN else None,
    )
    await validate_job(services, job, principal)
    new_id = await services.store.jobs.create(job)
    if job.child_job_ids:
        try:
            # A stored child list may name an id not used yet (an adopted XXL-JOB database).
            await check_no_cycle(services.store, new_id, job.child_job_ids)
        except FieldError:
            await services.store.jobs.delete(new_id)
            raise
    return await load_job(services, new_id)


async def update_job(
    services: ManagementServices, old: JobInfo, new: JobInfo, principal: Principal,
    warnings: list[str] | None = None, *, expect: Mapping[str, Any] | None = None,
) -> JobInfo:
    """Write ``new`` over ``old``; a running job gets its next fire time recomputed when its
    schedule changed (as the reference does). Legacy values the update does not change are
    kept, with a line in ``warnings`` (when given; else they are refused like new values).
    ``expect``: stored values checked in the write itself (store Conflict when changed)."""
    ensure_group_write(principal, old.job_group, NotFound(f"job {old.id} not found"))
    if new.job_group != old.job_group:
        ensure_group_write(principal, new.job_group, missing_group("job_group", new.job_group))
    if new.glue_type != GlueType.BEAN and (
        new.glue_type != old.glue_type or new.glue_source != old.glue_source
    ):
        ensure_glue_allowed(services, principal)
    new = replace(
        new,
        id=old.id,
        add_time=old.add_time,
        update_time=services.now_naive_utc(),
        trigger_status=old.trigger_status,
        trigger_last_time=old.trigger_last_time,
        trigger_next_time=old.trigger_next_time,
    )
    if new.timing and (new.job_group, new.timing) != (old.job_group, old.timing):
        # Every update path (REST, XXL-JOB 2.x/3.x): a moved job may not keep another group's calendar.
        await timing.check_stored_timing(services, new)
    if warnings is None:
        await validate_job(services, new, principal, old)
    else:
        warnings.extend(await validate_job_update(services, old, new, principal))
    schedule_changed = (new.schedule_type, new.schedule_conf, new.schedule_timezone, new.timing) != (
        old.schedule_type,
        old.schedule_conf,
        old.schedule_timezone,
        old.timing,
    )
    if old.trigger_status == TriggerStatus.RUNNING and schedule_changed:
        if new.schedule_type == ScheduleType.NONE:
            new = replace(new, trigger_status=int(TriggerStatus.STOPPED), trigger_next_time=0)
        else:
            new = replace(new, trigger_next_time=await next_fire_after(services, new, services.now_ms()))
    await services.store.jobs.update(new, expect=expect)
    if new.child_jobid != old.child_jobid and new.child_job_ids:
        await _refuse_cycle_made_meanwhile(services, old, new)
    return await load_job(services, old.id)


async def _refuse_cycle_made_meanwhile(services: ManagementServices, old: JobInfo, new: JobInfo) -> None:
    """Checked again once written: two updates validated at once could close a cycle together
    (A -> B while B -> A). The child list then goes back to what it was, and the update is
    refused (both may be: a cycle is worse than a refused edit)."""
    try:
        await check_no_cycle(services.store, new.id, new.child_job_ids)
    except FieldError:
        current = await load_job(services, old.id)
        await services.store.jobs.update(replace(current, child_jobid=old.child_jobid))
        raise


async def delete_job(services: ManagementServices, job: JobInfo) -> None:
    """Delete the job, its runs, delayed runs and GLUE history (as the reference does), and
    drop it from its parents' child lists."""
    await services.store.delayed.remove_for_job(job.id)  # none fires while the rest goes
    await services.store.jobs.delete(job.id)
    await remove_job_history(services.store, job.id, services.now_naive_utc())


async def start_job(services: ManagementServices, job: JobInfo) -> JobInfo:
    if job.schedule_type == ScheduleType.NONE:
        raise Conflict("a job with schedule_type NONE cannot be started; trigger it instead",
                       "schedule_type")
    now = services.now_ms()
    # A job with a catch-up window resumes at its first instant since the pause (within the
    # window): the loop finds it late and catches up (docs/time.md, Catch-up).
    after = timing.catch_up_from(job, now) or now
    next_ms = await next_fire_after(services, job, after)
    await services.store.jobs.set_status(job.id, int(TriggerStatus.RUNNING), next_ms, clear_note=True)
    return await load_job(services, job.id)


async def stop_job(services: ManagementServices, job: JobInfo, *, pause_note: str | None = None) -> JobInfo:
    """Stop scheduling the job; ``pause_note`` (JSON: who, why, when) is kept until it starts."""
    await services.store.jobs.set_status(job.id, int(TriggerStatus.STOPPED), 0, last_time=0,
                                         pause_note=pause_note)
    return await load_job(services, job.id)


async def trigger_job(
    services: ManagementServices,
    job: JobInfo,
    executor_param: str | None,
    addresses: list[str] | None,
    trigger_type: TriggerType = TriggerType.MANUAL,
) -> FireResult:
    if services.trigger is None:
        raise Unavailable("triggering is not available on this node")
    override: list[str] | None = None
    if addresses:
        override = [check_address(f"addresses.{i}", a, services.address_policy)
                    for i, a in enumerate(addresses)]
        await _check_override(services, job, override)
    request = FireRequest(
        job=job, trigger_type=trigger_type, executor_param=executor_param, address_override=override
    )
    try:
        return await services.trigger.fire(request)
    except TriggerRejected as exc:  # an address disabled, not live, without the handler: as stored
        raise Conflict(str(exc), "addresses") from None


MAX_PENDING_DELAYED = 1_000  # per job: a runaway script cannot fill the table


def parse_instant(field: str, value: int | str) -> int:
    """Epoch ms, or an ISO 8601 text (without an offset: UTC), as epoch ms."""
    if isinstance(value, int):
        return value
    if value.strip().isdigit():
        return int(value.strip())
    try:
        parsed = datetime.fromisoformat(value.strip().replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        raise FieldError(field, "must be epoch milliseconds or an ISO 8601 date-time") from None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    return int(parsed.timestamp() * 1000)


async def trigger_at(
    services: ManagementServices,
    job: JobInfo,
    fire_at: int,
    executor_param: str | None,
    addresses: list[str] | None,
    created_by: str | None,
    *,
    field: str = "at",
    now: int | None = None,
) -> DelayedFire:
    """Record a run of ``job`` at ``fire_at`` (epoch ms, after ``now``, at most a year ahead)."""
    now = services.now_ms() if now is None else now
    if fire_at <= now:
        raise FieldError(field, "must be in the future")
    if fire_at > now + MAX_DELAY_MS:
        raise FieldError(field, f"must be at most {MAX_DELAY_MS // 86_400_000} days ahead")
    override: list[str] | None = None
    if addresses:
        override = [check_address(f"addresses.{i}", a) for i, a in enumerate(addresses)]
        await _check_override(services, job, override)
    if await services.store.delayed.count_for_job(job.id) >= MAX_PENDING_DELAYED:
        raise Conflict(f"job {job.id} already has {MAX_PENDING_DELAYED} delayed runs pending")
    fire_id = await services.store.delayed.add(
        job.id, job.job_group, fire_at, executor_param, override, created_by, now)
    if services.delayed is not None:
        services.delayed.wake()
    fire = await services.store.delayed.get(fire_id)
    if fire is None:  # fired already (a delay of a few ms) by another node's poll
        return DelayedFire(fire_id, job.id, job.job_group, fire_at, executor_param, override, created_by, now)
    return fire


async def _check_override(services: ManagementServices, job: JobInfo, override: list[str]) -> None:
    group = await services.store.groups.get(job.job_group)
    known = set(group.addresses if group else [])
    if group is not None and group.address_type == 0:
        live = await services.store.registry.entries(group.app_name)
        known.update(e.registry_value for e in live)
    normalized = {a.rstrip("/") for a in known}
    for i, address in enumerate(override):
        if address.rstrip("/") not in normalized:
            raise Conflict(  # the group as it is now, not the request: 409
                f"address {address!r} is not registered in executor group {job.job_group}",
                f"addresses.{i}",
            )
