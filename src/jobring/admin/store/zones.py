"""The database's DATETIME zone: every reference DATETIME column is read and written here.

XXL-JOB writes its DATETIME columns in the server's local zone (its default JDBC URL says
``serverTimezone=Asia/Shanghai``); jobring's records always carry naive UTC. The zone is
kept per engine (on its dialect, which each engine owns), so two stores in one process may
use different zones. New databases use UTC.
"""

from __future__ import annotations

from datetime import UTC, datetime, tzinfo
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from sqlalchemy import DateTime
from sqlalchemy.engine import Dialect
from sqlalchemy.ext.asyncio import AsyncEngine
from sqlalchemy.types import TypeDecorator

DATABASE_TIMEZONE_SETTING = "database_timezone"
_ATTR = "jobring_database_zone"


def zone_named(name: str) -> tzinfo:
    """The zone for an IANA name ("UTC" included); ValueError naming it when unknown."""
    if name.strip().upper() == "UTC":
        return UTC
    try:
        return ZoneInfo(name.strip())
    except (ZoneInfoNotFoundError, ValueError):
        raise ValueError(f"unknown time zone {name!r} (use an IANA name such as Asia/Shanghai)") from None


def set_database_zone(engine: AsyncEngine, zone: tzinfo) -> None:
    """Make ``engine`` read and write DATETIME columns in ``zone``."""
    setattr(engine.sync_engine.dialect, _ATTR, zone)


def database_zone(engine: AsyncEngine) -> tzinfo:
    """The zone ``engine`` uses for DATETIME columns (UTC unless set)."""
    zone: tzinfo = getattr(engine.sync_engine.dialect, _ATTR, UTC)
    return zone


def to_database(value: datetime, zone: tzinfo) -> datetime:
    """Naive UTC (or aware) -> naive wall time in ``zone``, whole seconds."""
    aware = value.replace(tzinfo=UTC) if value.tzinfo is None else value
    return aware.astimezone(zone).replace(tzinfo=None, microsecond=0)


def from_database(value: datetime, zone: tzinfo) -> datetime:
    """Naive wall time in ``zone`` -> naive UTC. An ambiguous wall time (DST fold) reads as
    its first occurrence, as the reference's JDBC driver does."""
    return value.replace(tzinfo=zone).astimezone(UTC).replace(tzinfo=None)


class ZonedDateTime(TypeDecorator[datetime]):
    """A DATETIME column stored in the database's zone and seen as naive UTC."""

    impl = DateTime
    cache_ok = True

    def process_bind_param(self, value: Any, dialect: Dialect) -> Any:
        if not isinstance(value, datetime):
            return value
        zone = getattr(dialect, _ATTR, UTC)
        if zone is UTC:
            return value.astimezone(UTC).replace(tzinfo=None) if value.tzinfo is not None else value
        return to_database(value, zone)

    def process_result_value(self, value: Any, dialect: Dialect) -> Any:
        if not isinstance(value, datetime):
            return value
        zone = getattr(dialect, _ATTR, UTC)
        return value if zone is UTC else from_database(value, zone)
