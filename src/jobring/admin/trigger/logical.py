"""A fire's logical (business) time and its params template (issue 24).

A run stands for an instant: a backfill run for the instant it fills in (given with the
request), a scheduled run for its planned instant, a manual run for the moment it was
triggered. Its data interval starts at the previous instant of the job's timeline. Jobs whose
timing says ``"params_template": true`` have their executor params rendered with
``logical_date``, ``data_interval_start`` and ``data_interval_end`` (aware datetimes in the job's
zone) before the run is recorded; the others are not touched (nothing of this is on their path
but a look at ``job.timing``).
"""

from __future__ import annotations

import orjson

from jobring.admin.loop.timed import timeline_of
from jobring.admin.store.records import JobInfo
from jobring.core.cron import resolve_zone
from jobring.core.enums import TriggerType
from jobring.core.expression import ExpressionError
from jobring.core.schedule import ScheduleError, parse_schedule
from jobring.core.templating import parse_template
from jobring.core.timing import (
    DstRules,
    LogicalTime,
    TimingError,
    logical_time,
    manual_logical_time,
    parse_dst_rules,
)
from jobring.core.timing.timeline import EmptyTimeline, Timeline

_SCHEDULED = (TriggerType.CRON, TriggerType.FIX_RATE, TriggerType.MISFIRE)
MAX_PARAM_CHARS = 512  # the run log's executor_param column


def params_templated(job: JobInfo) -> bool:
    """Does the job's timing ask for its params to be rendered as a template?"""
    text = job.timing
    if not text or '"params_template"' not in text:
        return False
    try:
        return orjson.loads(text).get("params_template") is True
    except (ValueError, AttributeError):
        return False


def check_params_template(param: str | None) -> str | None:
    """Why ``param`` is not a valid template (None: it is)."""
    try:
        parse_template(param or "")
    except ExpressionError as exc:
        return str(exc)
    return None


def default_logical_ms(trigger_type: TriggerType, planned_time: int | None) -> int | None:
    """A fire's logical instant when the request gives none: a scheduled fire's planned instant."""
    if trigger_type in _SCHEDULED and planned_time is not None and planned_time >= 0:
        return planned_time
    return None


def _dst(job: JobInfo) -> DstRules | None:
    """The job's daylight-saving rules (None: Quartz's, or unreadable timing)."""
    text = job.timing
    if not text or '"dst"' not in text:
        return None
    try:
        return parse_dst_rules(orjson.loads(text).get("dst"))
    except (ValueError, AttributeError, TimingError):
        return None


def _timeline(job: JobInfo, zone: str) -> Timeline:
    try:
        return timeline_of(parse_schedule(job.schedule_type or "NONE", job.schedule_conf, zone), _dst(job))
    except (ScheduleError, ValueError):
        return EmptyTimeline()


def logical_of(job: JobInfo, logical_ms: int | None, interval_start_ms: int | None, now_ms: int,
               admin_zone: str) -> LogicalTime:
    """The logical time of a fire of ``job`` (``logical_ms`` None: a manual run, now)."""
    zone = job.schedule_timezone or admin_zone
    if logical_ms is not None and interval_start_ms is not None:
        return LogicalTime(logical_ms, interval_start_ms, logical_ms, resolve_zone(zone))
    timeline = _timeline(job, zone)
    if logical_ms is None:
        return manual_logical_time(timeline, now_ms, zone)
    return logical_time(timeline, logical_ms, zone)


def render_params(param: str, when: LogicalTime) -> str:
    """``param`` rendered with the logical time; ExpressionError (TemplateError) naming the
    position when it does not render."""
    values = when.template_values()
    return parse_template(param).render(dict(values), max_chars=MAX_PARAM_CHARS)
