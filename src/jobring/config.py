"""Admin settings: defaults, then an optional TOML file, then ``JOBRING_*`` env vars.

The TOML file is named by ``JOBRING_CONFIG`` (or ``--config`` on the CLI); its keys are
the field names below, at top level or under an ``[admin]`` table.
"""

from __future__ import annotations

import json
import os
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any, get_type_hints

from jobring.core.addresses import AddressPolicy, policy_from_text

DEFAULT_DATABASE_URL = "sqlite+aiosqlite:///./jobring.db"
ENV_PREFIX = "JOBRING_"


class ConfigError(ValueError):
    """A setting that cannot be used; the message names it."""


@dataclass(frozen=True, slots=True)
class AdminSettings:
    database_url: str = DEFAULT_DATABASE_URL
    host: str = "127.0.0.1"
    port: int = 8080
    # Executors configured for XXL-JOB use ".../xxl-job-admin/"; "/" is served as well.
    base_path: str = "/xxl-job-admin"
    # The global executor token, valid for every group; None (the default): off, each
    # executor group has its own token. Set it to keep XXL-JOB executors that share one token.
    access_token: str | None = None
    admin_password: str | None = None
    # Zone of crons without their own; None: the adopted XXL-JOB deployment's zone, else UTC.
    timezone: str | None = None
    # Zone of the database's DATETIME columns; None: as stored in the database (UTC for new ones).
    database_timezone: str | None = None
    # Schedule even though XXL-JOB's admin seems alive on the database (see coexist.py).
    takeover: bool = False
    # Keep adopted users' XXL-JOB MD5 after they change password (a path back to the Java admin).
    keep_xxl_job_passwords: bool = False
    auto_upgrade: bool = True
    glue_enabled: bool = False
    log_retention_days: int = 30
    audit_retention_days: int = 180  # at least 7
    fast_pool_size: int = 200
    slow_pool_size: int = 100
    executor_connect_timeout: float = 3.0
    executor_read_timeout: float = 3.0
    pre_read_ms: int = 5000
    node_id: str | None = None
    # Database session locks prove nodes alive, so a dead node's jobs are taken over within
    # about a second (PostgreSQL, MariaDB/MySQL). Off: after its leases run out (~10 s). Turn
    # off where sessions are not one server's (pgbouncer transaction pooling, Galera).
    node_locks: bool = True
    secure_cookies: bool = False
    # Comma-separated IPs/CIDRs of reverse proxies whose X-Forwarded-For/-Proto are believed;
    # empty: forwarded headers are ignored and the TCP peer is the client.
    trusted_proxies: str = ""
    # Accept known-weak configured secrets (a loud warning is logged at every start).
    insecure: bool = False
    # Executor addresses the admin will not call (comma CIDR lists), on top of the
    # always-refused link-local/metadata/multicast ranges; an allow list admits only IPs in it.
    executor_address_deny: str | None = None
    executor_address_allow: str | None = None
    # Limits on a request head, checked before anything else (414 / 431 / 408 answers).
    max_request_line_bytes: int = 8 * 1024
    max_header_bytes: int = 64 * 1024
    header_timeout: float = 10.0
    # Alarms for failed runs (fail monitor): email through SMTP and/or a JSON webhook.
    smtp_host: str | None = None
    smtp_port: int = 25
    smtp_username: str | None = None
    smtp_password: str | None = None
    smtp_from: str | None = None
    smtp_starttls: bool = False
    smtp_ssl: bool = False
    alarm_webhook_url: str | None = None
    alarm_timeout: float = 10.0
    # Operations: /metrics needs "Authorization: Bearer <metrics_token>" when set; logs as
    # plain text or JSON lines; /ready's database check time limit (s).
    metrics_token: str | None = None
    log_format: str = "plain"
    log_level: str = "INFO"
    ready_timeout: float = 2.0
    alarm_retries: int = 2  # retries of a transient alarm delivery failure
    # Admin-wide alarm targets for every job (JSON list, or a TOML array of tables).
    alarm_default_targets: str | None = None
    public_url: str | None = None  # the console's base URL: alarms link to {public_url}/runs/{id}
    # Retries: a failed run older than this (seconds) is not retried (e.g. on adopting a database).
    retry_max_age: int = 3600
    # Executors: an address without heartbeat this long is dead; its running runs are lost.
    executor_dead_after_s: int = 90
    lost_run_check_s: float = 15.0
    # Retention: optionally keep at most this many runs per job (0: no limit); rows per delete.
    log_retention_max_runs_per_job: int = 0
    log_retention_batch: int = 2000
    # On a database with history beyond the retention, the first cleaning only reports what it
    # would delete and deletes a day later, unless this is true.
    log_retention_confirm: bool = False


def _coerce(name: str, raw: Any, target: Any) -> Any:
    text = str(raw).strip()
    if target is bool or target == (bool | None):
        if isinstance(raw, bool):
            return raw
        if text.lower() in ("1", "true", "yes", "on"):
            return True
        if text.lower() in ("0", "false", "no", "off"):
            return False
        raise ConfigError(f"{name}: expected true/false, got {raw!r}")
    if target is int:
        try:
            return int(raw)
        except (TypeError, ValueError) as exc:
            raise ConfigError(f"{name}: expected an integer, got {raw!r}") from exc
    if target is float:
        try:
            return float(raw)
        except (TypeError, ValueError) as exc:
            raise ConfigError(f"{name}: expected a number, got {raw!r}") from exc
    if raw is None or (target == (str | None) and text == ""):
        return None
    if isinstance(raw, list):  # a TOML array for a comma-list setting (trusted_proxies)
        return ",".join(str(item) for item in raw)
    return str(raw)


def _apply(settings: AdminSettings, values: Mapping[str, Any], source: str) -> AdminSettings:
    hints = get_type_hints(AdminSettings)
    known = {f.name for f in fields(AdminSettings)}
    changes: dict[str, Any] = {}
    for key, raw in values.items():
        if key not in known:
            raise ConfigError(f"{source}: unknown setting {key!r}")
        if key == "alarm_default_targets" and isinstance(raw, list):
            raw = json.dumps(raw)  # a TOML array of tables
        changes[key] = _coerce(f"{source}:{key}", raw, hints[key])
    if changes.get("alarm_default_targets"):
        from jobring.admin.alarms.targets import TargetError, parse_targets

        try:
            parse_targets(changes["alarm_default_targets"], "alarm_default_targets")
        except TargetError as exc:
            raise ConfigError(f"{source}: {exc}") from None
    return replace(settings, **changes)


def load_settings(
    config_file: str | os.PathLike[str] | None = None,
    environ: Mapping[str, str] | None = None,
    **overrides: Any,
) -> AdminSettings:
    """Build the admin settings from defaults, a TOML file, the environment and overrides."""
    env = os.environ if environ is None else environ
    settings = AdminSettings()
    path = config_file or env.get(ENV_PREFIX + "CONFIG")
    if path:
        try:
            data = tomllib.loads(Path(path).read_text(encoding="utf-8"))
        except (OSError, tomllib.TOMLDecodeError) as exc:
            raise ConfigError(f"config file {path}: {exc}") from exc
        section = data.get("admin", data)
        settings = _apply(settings, {k: v for k, v in section.items() if k != "executor"}, str(path))
    known = {f.name for f in fields(AdminSettings)}
    from_env = {
        key[len(ENV_PREFIX):].lower(): value
        for key, value in env.items()
        if key.startswith(ENV_PREFIX) and key[len(ENV_PREFIX):].lower() in known
    }
    settings = _apply(settings, from_env, "environment")
    settings = _apply(settings, {k: v for k, v in overrides.items() if v is not None}, "option")
    address_policy(settings)  # a bad CIDR stops the start here
    check_log_settings(settings.log_format, settings.log_level)
    if settings.ready_timeout <= 0:
        raise ConfigError(f"ready_timeout: expected seconds above 0, got {settings.ready_timeout!r}")
    for name in _POSITIVE:
        if getattr(settings, name) <= 0:
            raise ConfigError(f"{name}: must be positive, got {getattr(settings, name)}")
    return settings


_POSITIVE = ("max_request_line_bytes", "max_header_bytes", "header_timeout")


def address_policy(settings: AdminSettings) -> AddressPolicy:
    """The executor address policy of ``settings``; ConfigError names a bad network."""
    try:
        return policy_from_text(settings.executor_address_deny, settings.executor_address_allow)
    except ValueError as exc:
        raise ConfigError(f"executor_address_deny/_allow: {exc}") from None


LOG_FORMATS = ("plain", "json")
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")


def check_log_settings(log_format: str, log_level: str) -> None:
    """Raise ConfigError for an unknown log format or level."""
    if log_format not in LOG_FORMATS:
        raise ConfigError(f"log_format: expected plain or json, got {log_format!r}")
    if log_level.upper() not in LOG_LEVELS:
        raise ConfigError(f"log_level: expected one of {', '.join(LOG_LEVELS)}, got {log_level!r}")


MIN_METRICS_TOKEN = 16


def check_metrics_token(token: str | None) -> None:
    """A metrics token, when set, must be at least 16 characters (a guessable one is refused).
    The executor's check; the admin's is in its secret policy (``--insecure`` applies)."""
    if token is not None and len(token.strip()) < MIN_METRICS_TOKEN:
        raise ConfigError(f"metrics_token: use at least {MIN_METRICS_TOKEN} random characters")
