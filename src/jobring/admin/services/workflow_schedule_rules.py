"""What a workflow schedule may be (docs/workflows.md#scheduling): the checks shared by
``PUT /workflows/{id}/schedule`` and a schedule declared in an executor's code.

Refusals are :class:`FieldError` naming the API's field (``schedule_conf``,
``schedule_timezone``, ``enabled``, ``params``); a declaration prefixes it with ``schedule.``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson

from jobring.admin.services.validation import (
    FieldError,
    check_json_value,
    check_schedule,
    check_text,
    check_timezone,
    quartz_conf,
)
from jobring.admin.store.workflow_schedules import WorkflowSchedule
from jobring.core.oneshot import ONCE, canonical_once, workflow_schedule
from jobring.core.schedule import ScheduleError

__all__ = [
    "MISFIRES",
    "OVERLAPS",
    "PARAMS_MAX_BYTES",
    "SCHEDULE_TYPES",
    "ScheduleSpec",
    "audit_view",
    "checked",
    "planned",
    "spec_of",
]

PARAMS_MAX_BYTES = 64 * 1024
SCHEDULE_TYPES = ("NONE", "CRON", "FIX_RATE", "ONCE")
MISFIRES = ("DO_NOTHING", "FIRE_ONCE_NOW")
OVERLAPS = ("skip", "queue_one", "allow")


@dataclass(frozen=True)
class ScheduleSpec:
    """A schedule as asked for (the API's body, or a declaration's ``schedule``)."""

    schedule_type: str
    schedule_conf: str = ""
    time_zone: str | None = None
    misfire_strategy: str = "DO_NOTHING"
    overlap: str = "skip"
    params: Mapping[str, Any] = field(default_factory=dict)
    enabled: bool = False


def _once_conf(conf: str, zone: str) -> str:
    """A ONCE schedule's conf as stored (FieldError naming the field when it does not parse)."""
    try:
        workflow_schedule(ONCE, conf, zone)
    except ScheduleError as exc:
        name, _, _ = str(exc).partition(": ")
        raise FieldError("schedule_timezone" if name == "time_zone" else "schedule_conf", str(exc)) from None
    return canonical_once(conf)


def checked(spec: ScheduleSpec, default_zone: str) -> ScheduleSpec:
    """``spec`` with its conf in stored form (Quartz cron, canonical one-shot time), or
    FieldError naming the field."""
    # Stored, echoed and audited whatever the type: one line of plain text, a real zone.
    check_text("schedule_conf", spec.schedule_conf, 128, one_line=True)
    check_text("schedule_timezone", spec.time_zone, 64, one_line=True)
    check_timezone("schedule_timezone", spec.time_zone)
    zone = spec.time_zone or default_zone
    conf = quartz_conf(spec.schedule_type, spec.schedule_conf.strip()) or ""
    if spec.schedule_type == ONCE:
        conf = _once_conf(conf, zone)
    elif spec.schedule_type != "NONE":
        check_schedule(spec.schedule_type, conf, zone)
    elif spec.enabled:
        raise FieldError("enabled", "a workflow without a schedule (NONE) cannot be started")
    check_json_value("params", spec.params)
    if len(orjson.dumps(dict(spec.params))) > PARAMS_MAX_BYTES:  # the store's serializer
        raise FieldError("params", f"at most {PARAMS_MAX_BYTES // 1024} KiB")
    return ScheduleSpec(
        spec.schedule_type,
        conf,
        spec.time_zone,
        spec.misfire_strategy,
        spec.overlap,
        dict(spec.params),
        spec.enabled,
    )


def planned(
    workflow_id: int,
    spec: ScheduleSpec,
    default_zone: str,
    now: int,
    before: WorkflowSchedule | None,
    updated_by: str,
    managed_by: str | None = None,
) -> WorkflowSchedule:
    """The row to store for a :func:`checked` ``spec``, its next instant planned from ``now``
    (FieldError: a started schedule that never fires again, e.g. a one-shot whose time is over);
    the last fire is kept from ``before``."""
    zone = spec.time_zone or default_zone
    next_ms = (
        workflow_schedule(spec.schedule_type, spec.schedule_conf, zone).next_fire_ms(now)
        if spec.enabled
        else None
    )
    if spec.enabled and next_ms is None:
        if spec.schedule_type == ONCE:
            past = f"{spec.schedule_conf} is in the past: a one-shot schedule starts only before it"
            raise FieldError("schedule_conf", past)
        # As a job's: started, it would be stored as running and never start a run.
        raise FieldError("schedule_conf", f"{spec.schedule_conf} never fires again: it cannot be started")
    return WorkflowSchedule(
        workflow_id=workflow_id,
        schedule_type=spec.schedule_type,
        schedule_conf=spec.schedule_conf,
        time_zone=spec.time_zone,
        misfire_strategy=spec.misfire_strategy,
        overlap=spec.overlap,
        enabled=spec.enabled,
        updated_at=now,
        params=dict(spec.params),
        next_fire_at=next_ms or 0,
        last_fire_at=before.last_fire_at if before else 0,
        last_result=before.last_result if before else "",
        updated_by=updated_by,
        managed_by=managed_by,
    )


AUDITED = ("schedule_type", "schedule_conf", "time_zone", "misfire_strategy", "overlap", "enabled")


def audit_view(schedule: WorkflowSchedule | None) -> dict[str, Any] | None:
    """A schedule in the audit log: its fields, and its params as their sha256 and size (they
    may carry secrets, and a change of them alone must still show)."""
    if schedule is None:
        return None
    data = orjson.dumps(dict(schedule.params), option=orjson.OPT_SORT_KEYS)
    return {
        **{f: getattr(schedule, f) for f in AUDITED},
        "params": {"sha256": hashlib.sha256(data).hexdigest(), "size": len(data)},
    }


def spec_of(schedule: WorkflowSchedule) -> ScheduleSpec:
    """What a stored schedule was asked to be (to compare a declaration with it)."""
    return ScheduleSpec(
        schedule.schedule_type,
        schedule.schedule_conf,
        schedule.time_zone,
        schedule.misfire_strategy,
        schedule.overlap,
        dict(schedule.params),
        schedule.enabled,
    )
