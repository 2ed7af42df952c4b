"""Time done right for jobs: calendars, validity windows, jitter, DST rules, overlap, catch-up,
backfill and logical (business) time. Pure code: no I/O, no clock reads; times are epoch ms.

How the parts fit (what the scheduling loop calls):

- :func:`timeline_for` (schedule + :class:`DstRules`) gives the job's instants both ways.
- :func:`parse_timing_rules` validates a job's timing spec into :class:`TimingRules`
  (``start_at``/``end_at``, ``max_runs``, jitter, calendars + ``skip``/``move``, DST rules,
  catch-up, overlap policy); calendars come from :func:`parse_calendar` /
  :func:`calendar_from_ics` / :func:`calendar_from_dates`.
- :func:`plan_next` gives the next fire (logical instant, fire time after move and jitter) and
  the instants skipped on the way (to record as ``skipped`` runs); :func:`preview` the next N.
- :func:`catch_up` after downtime or a pause (jobs with a catch-up window; the others keep the
  misfire rules of :mod:`jobring.core.planning`).
- :func:`decide_due` / :func:`decide_finished` / :func:`drain`: the overlap policy.
- :func:`parse_backfill_request` + :func:`plan_backfill`: the runs of a backfill.
- :func:`logical_time` / :func:`manual_logical_time`: a run's logical date and data interval.
"""

from jobring.core.timing.backfill import (
    MAX_BACKFILL_PARALLELISM,
    MAX_BACKFILL_RUNS,
    BackfillOrder,
    BackfillPlan,
    BackfillRequest,
    BackfillRun,
    parse_backfill_request,
    plan_backfill,
)
from jobring.core.timing.calendars import (
    SEARCH_HORIZON_DAYS,
    Calendar,
    CalendarSet,
    Exclusion,
    calendar_from_dates,
    parse_calendar,
)
from jobring.core.timing.catchup import CatchUp, catch_up
from jobring.core.timing.dst import DstCron, DstGap, DstRepeat, DstRules, parse_dst_rules
from jobring.core.timing.errors import TimingError
from jobring.core.timing.ics import IcsImport, calendar_from_ics
from jobring.core.timing.logical import LogicalTime, logical_time, manual_logical_time
from jobring.core.timing.overlap import (
    MAX_BUFFERED,
    OverlapAction,
    OverlapDecision,
    OverlapPolicy,
    OverlapState,
    decide_due,
    decide_finished,
    drain,
)
from jobring.core.timing.plan import (
    MAX_SKIPPED_LISTED,
    Plan,
    PlanEnd,
    PlannedFire,
    Preview,
    SkipKind,
    SkippedFire,
    SkipReason,
    jitter_delay,
    plan_next,
    preview,
)
from jobring.core.timing.rules import (
    CalendarAction,
    CatchUpMode,
    CatchUpRules,
    PauseNote,
    TimingRules,
    parse_pause_note,
    parse_timing_rules,
)
from jobring.core.timing.timeline import Timeline, timeline_for

__all__ = [
    "MAX_BACKFILL_PARALLELISM",
    "MAX_BACKFILL_RUNS",
    "MAX_BUFFERED",
    "MAX_SKIPPED_LISTED",
    "SEARCH_HORIZON_DAYS",
    "BackfillOrder",
    "BackfillPlan",
    "BackfillRequest",
    "BackfillRun",
    "Calendar",
    "CalendarAction",
    "CalendarSet",
    "CatchUp",
    "CatchUpMode",
    "CatchUpRules",
    "DstCron",
    "DstGap",
    "DstRepeat",
    "DstRules",
    "Exclusion",
    "IcsImport",
    "LogicalTime",
    "OverlapAction",
    "OverlapDecision",
    "OverlapPolicy",
    "OverlapState",
    "PauseNote",
    "Plan",
    "PlanEnd",
    "PlannedFire",
    "Preview",
    "SkipKind",
    "SkipReason",
    "SkippedFire",
    "Timeline",
    "TimingError",
    "TimingRules",
    "calendar_from_dates",
    "calendar_from_ics",
    "catch_up",
    "decide_due",
    "decide_finished",
    "drain",
    "jitter_delay",
    "logical_time",
    "manual_logical_time",
    "parse_backfill_request",
    "parse_calendar",
    "parse_dst_rules",
    "parse_pause_note",
    "parse_timing_rules",
    "plan_backfill",
    "plan_next",
    "preview",
    "timeline_for",
]
