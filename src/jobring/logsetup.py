"""Process logging for ``jobring admin|run|executor``: plain text or JSON lines.

Every line has an ISO 8601 UTC instant. Scheduling and dispatch lines carry the fields
``job_id``, ``run_id``, ``node`` and ``address`` when they concern one (passed with
``extra=``): JSON lines have them as keys, plain lines append them as ``key=value``.

    JOBRING_LOG_FORMAT=json   {"ts": "2026-11-23T21:40:46.123Z", "level": "WARNING",
                               "logger": "jobring.admin.trigger.trigger", "msg": "...",
                               "job_id": 12, "run_id": 3051, "address": "http://10.0.0.7:9999/"}
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import TextIO

import orjson

from jobring.configbase import LOG_FORMATS, LOG_LEVELS, ConfigError, check_log_settings

__all__ = [
    "CONTEXT_FIELDS",
    "JsonFormatter",
    "PlainFormatter",
    "log_settings_from_env",
    "set_log_node",
    "setup_logging",
]

CONTEXT_FIELDS = ("job_id", "run_id", "node", "address")
# Values for records that do not carry the field themselves (the admin's node id).
_defaults: dict[str, object] = {}


def set_log_node(node_id: str | None) -> None:
    """Name this process's admin node on every line that does not name one."""
    if node_id is None:
        _defaults.pop("node", None)
    else:
        _defaults["node"] = node_id


def _field(record: logging.LogRecord, name: str) -> object:
    value = record.__dict__.get(name)
    return _defaults.get(name) if value is None else value


def _instant(record: logging.LogRecord) -> str:
    moment = datetime.fromtimestamp(record.created, tz=UTC)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


class JsonFormatter(logging.Formatter):
    """One JSON object per line: ts, level, logger, msg, the context fields, exc."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, object] = {
            "ts": _instant(record), "level": record.levelname, "logger": record.name,
            "msg": record.getMessage(),
        }
        for name in CONTEXT_FIELDS:
            value = _field(record, name)
            if value is not None:
                line[name] = value
        if record.exc_info:
            line["exc"] = self.formatException(record.exc_info)
        elif record.exc_text:
            line["exc"] = record.exc_text
        return orjson.dumps(line, default=str).decode()


class PlainFormatter(logging.Formatter):
    """``<ISO instant> LEVEL logger: message key=value ...`` (the context fields present)."""

    def format(self, record: logging.LogRecord) -> str:
        values = [(n, _field(record, n)) for n in CONTEXT_FIELDS]
        fields = " ".join(f"{n}={v}" for n, v in values if v is not None)
        text = f"{_instant(record)} {record.levelname} {record.name}: {record.getMessage()}"
        if fields:
            text += " " + fields
        if record.exc_info:
            text += "\n" + self.formatException(record.exc_info)
        return text


def log_settings_from_env(environ: Mapping[str, str] | None = None) -> tuple[str, str]:
    """(format, level) from ``JOBRING_LOG_FORMAT`` / ``JOBRING_LOG_LEVEL`` (plain, INFO)."""
    env = os.environ if environ is None else environ
    fmt = env.get("JOBRING_LOG_FORMAT", "plain").strip().lower() or "plain"
    level = env.get("JOBRING_LOG_LEVEL", "INFO").strip().upper() or "INFO"
    check_log_settings(fmt, level)
    return fmt, level


def setup_logging(log_format: str = "plain", level: str = "INFO", stream: TextIO | None = None) -> None:
    """Send every logger's records to ``stream`` (stderr) in ``log_format`` from ``level`` on.

    Replaces the root logger's handlers; httpx's one line per request and Alembic's lines per
    migration check are kept at WARNING.
    """
    if log_format not in LOG_FORMATS or level.upper() not in LOG_LEVELS:
        raise ConfigError(f"log format {log_format!r} / level {level!r} unknown")
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(JsonFormatter() if log_format == "json" else PlainFormatter())
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level.upper())
    quiet = max(logging.WARNING, logging.getLevelName(level.upper()))
    logging.getLogger("httpx").setLevel(quiet)
    # Alembic's two lines per migration check, and a start checks several times: the store
    # logs one line itself when the schema changes (jobring.admin.store.migrate).
    logging.getLogger("alembic").setLevel(quiet)
