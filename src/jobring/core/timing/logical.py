"""Logical (business) time of a run and its data interval, as values for handlers and templates.

Every run stands for an instant of its job's timeline: a scheduled run for its planned instant
(also when a calendar moved it, jitter delayed it, or catch-up fired it late), a backfill run for
the instant it fills in. Its *data interval* is ``(previous instant of the timeline, this
instant)``, calendars notwithstanding (a run after a skipped holiday still covers one period;
the skipped instant keeps its own). A manual run stands for the moment it was triggered; its
interval starts at the latest instant at or before that moment.

Templating (``{{ logical_date | fmt("%Y%m%d") }}``) is the shared ``core/templating`` module's;
this module only provides the values: aware datetimes in the job's zone.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, tzinfo

from jobring.core.cron import resolve_zone
from jobring.core.timing.timeline import Timeline


@dataclass(frozen=True, slots=True)
class LogicalTime:
    logical_ms: int
    interval_start_ms: int | None  # None: the timeline has no earlier instant (within its lookback)
    interval_end_ms: int
    zone: tzinfo

    def _at(self, epoch_ms: int | None) -> datetime | None:
        return None if epoch_ms is None else datetime.fromtimestamp(epoch_ms / 1000, self.zone)

    @property
    def logical_date(self) -> datetime:
        return datetime.fromtimestamp(self.logical_ms / 1000, self.zone)

    def template_values(self) -> dict[str, datetime | None]:
        """``logical_date``, ``data_interval_start``, ``data_interval_end`` for the template context."""
        return {
            "logical_date": self.logical_date,
            "data_interval_start": self._at(self.interval_start_ms),
            "data_interval_end": self._at(self.interval_end_ms),
        }

    def executor_params(self) -> dict[str, str | None]:
        """The same as ISO 8601 text with the zone's offset, for executors that ask for them."""
        return {
            key: None if value is None else value.isoformat(timespec="milliseconds")
            for key, value in self.template_values().items()
        }


def logical_time(timeline: Timeline, logical_ms: int, zone: str | tzinfo) -> LogicalTime:
    """The logical time of a run standing for the timeline instant ``logical_ms``."""
    return LogicalTime(logical_ms, timeline.previous_before(logical_ms), logical_ms, resolve_zone(zone))


def manual_logical_time(timeline: Timeline, triggered_ms: int, zone: str | tzinfo) -> LogicalTime:
    """The logical time of a run triggered by hand (or by API, or as a child job)."""
    start = timeline.previous_before(triggered_ms + 1)
    return LogicalTime(triggered_ms, start, triggered_ms, resolve_zone(zone))
