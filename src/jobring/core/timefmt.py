"""Instants as people read them: ISO 8601 UTC with milliseconds (logs, messages, the CLI)."""

from __future__ import annotations

from datetime import UTC, datetime

__all__ = ["iso_ms", "iso_utc"]


def iso_utc(value: datetime) -> str:
    """``2026-11-23T21:40:46.123Z``; a naive value is taken as UTC."""
    aware = value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)
    return aware.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def iso_ms(epoch_ms: int) -> str:
    """An epoch-millisecond instant as :func:`iso_utc` text."""
    return iso_utc(datetime.fromtimestamp(epoch_ms / 1000, tz=UTC))
