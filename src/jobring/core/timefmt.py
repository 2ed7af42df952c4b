"""Instants as people read them: ISO 8601 UTC with milliseconds (logs, messages, the CLI)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

__all__ = ["iso_ms", "iso_utc", "naive_utc_ms"]

_EPOCH = datetime(1970, 1, 1)


def iso_utc(value: datetime) -> str:
    """``2026-11-23T21:40:46.123Z``; a naive value is taken as UTC."""
    aware = value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)
    return aware.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def naive_utc_ms(epoch_ms: int) -> datetime:
    """An epoch-millisecond instant as a naive UTC datetime, milliseconds kept (how run-log
    rows store their trigger time)."""
    return _EPOCH + timedelta(milliseconds=epoch_ms)


def iso_ms(epoch_ms: int) -> str:
    """An epoch-millisecond instant as :func:`iso_utc` text."""
    return iso_utc(datetime.fromtimestamp(epoch_ms / 1000, tz=UTC))
