"""Executor settings: explicit arguments, then ``JOBRING_EXECUTOR_*`` env vars, then defaults."""

from __future__ import annotations

import ipaddress
import os
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any, get_type_hints
from urllib.parse import urlsplit

from jobring.config import ConfigError, check_metrics_token
from jobring.protocol.models import PROTOCOLS

ENV_PREFIX = "JOBRING_EXECUTOR_"
DEFAULT_LOG_PATH = "./jobring-executor-logs"
DECLARE_MODES = ("auto", "always", "never")


@dataclass(frozen=True, slots=True)
class ExecutorSettings:
    app_name: str = ""
    # Admin base URLs, e.g. "http://admin:8080/xxl-job-admin/"; env: comma separated.
    admin_addresses: tuple[str, ...] = ()
    access_token: str | None = None
    # Address registered with the admin (for NAT/containers); None: detected.
    address: str | None = None
    # IP used for the detected address; None: first non-loopback IPv4.
    ip: str | None = None
    host: str = "0.0.0.0"
    port: int = 9999
    log_path: str = DEFAULT_LOG_PATH
    # Below 3 (e.g. -1) run logs are kept forever, as in the reference.
    log_retention_days: int = 30
    glue_enabled: bool = False
    # Without a token the executor starts only with allow_open and a loopback bind.
    allow_open: bool = False
    beat_interval_s: float = 30.0
    admin_timeout_s: float = 3.0
    # The reference sends all queued results in one request; this caps one at ~100 KB.
    callback_batch_size: int = 1000
    callback_max_backoff_s: float = 30.0
    idle_timeout_s: float = 90.0
    max_handle_msg: int = 15000
    # GET /metrics needs "Authorization: Bearer <metrics_token>" when set (open otherwise).
    metrics_token: str | None = None
    # Send the jobs declared in code (@executor.job(..., cron=...)) to the admin: "auto" when
    # a handler declares one, "always" (also an empty list: every declared job is stopped),
    # "never".
    declare_jobs: str = "auto"
    # Limits on a request head (414 / 431 answers) and the time to receive it (408).
    max_request_line_bytes: int = 8 * 1024
    max_header_bytes: int = 64 * 1024
    header_timeout_s: float = 10.0
    # XXL-JOB protocol of the admin: "auto" (found out from its answers), "2", "3" (3.0-3.4)
    # or "3.5". Only callback bodies differ; the server answers every dialect.
    protocol: str = "auto"

    def base_address(self, detected_ip: str) -> str:
        """The executor address to register: configured, or built from an IP and the port."""
        if self.address:
            return self.address if self.address.endswith("/") else self.address + "/"
        ip = self.ip or detected_ip
        host = f"[{ip}]" if ":" in ip else ip
        return f"http://{host}:{self.port}/"

    def admin_urls(self) -> list[str]:
        return [a if a.endswith("/") else a + "/" for a in self.admin_addresses]


def is_loopback_host(host: str) -> bool:
    """True for ``localhost`` and loopback IP addresses."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def check_security(settings: ExecutorSettings, *, binds: bool = True) -> None:
    """Refuse an executor without a token unless it is explicitly open and loopback only."""
    if settings.access_token:
        return
    if not settings.allow_open:
        raise ConfigError(
            "executor access token is missing: set access_token (JOBRING_EXECUTOR_ACCESS_TOKEN) "
            "to the admin's token, or allow_open=True for a loopback-only executor without one"
        )
    if binds and not is_loopback_host(settings.host):
        raise ConfigError(
            f"executor without access token must bind to loopback only, not host {settings.host!r}; "
            "set host='127.0.0.1' or configure an access token"
        )
    if settings.address:
        addr_host = urlsplit(settings.address).hostname or ""
        if not is_loopback_host(addr_host):
            raise ConfigError(
                f"executor without access token must advertise a loopback address, not {settings.address!r}"
            )


def _coerce(name: str, raw: Any, target: Any) -> Any:
    if target == tuple[str, ...]:
        items = raw.split(",") if isinstance(raw, str) else list(raw)
        return tuple(str(i).strip() for i in items if str(i).strip())
    if target is bool:
        if isinstance(raw, bool):
            return raw
        text = str(raw).strip().lower()
        if text in ("1", "true", "yes", "on"):
            return True
        if text in ("0", "false", "no", "off"):
            return False
        raise ConfigError(f"{name}: expected true/false, got {raw!r}")
    if target in (int, float):
        if isinstance(raw, bool):
            raise ConfigError(f"{name}: expected a number, got {raw!r}")
        try:
            return target(raw)
        except (TypeError, ValueError) as exc:
            raise ConfigError(f"{name}: expected a number, got {raw!r}") from exc
    if raw is None or (target == (str | None) and str(raw).strip() == ""):
        return None
    return str(raw)


def _validate(s: ExecutorSettings) -> None:
    if not s.app_name or not s.app_name.strip():
        raise ConfigError("executor app_name is required (JOBRING_EXECUTOR_APP_NAME)")
    if not 0 <= s.port <= 65535:
        raise ConfigError(f"port must be within 0..65535, got {s.port}")
    for url in s.admin_addresses:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise ConfigError(f"admin address must be an http(s) URL, got {url!r}")
    if s.address is not None:
        parts = urlsplit(s.address)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise ConfigError(f"executor address must be an http(s) URL, got {s.address!r}")
    if s.protocol not in PROTOCOLS:
        raise ConfigError(f"protocol must be one of {', '.join(PROTOCOLS)}, got {s.protocol!r}")
    if s.declare_jobs not in DECLARE_MODES:
        raise ConfigError(f"declare_jobs must be one of {', '.join(DECLARE_MODES)}, got {s.declare_jobs!r}")
    positive = {
        "beat_interval_s": s.beat_interval_s,
        "admin_timeout_s": s.admin_timeout_s,
        "callback_batch_size": s.callback_batch_size,
        "callback_max_backoff_s": s.callback_max_backoff_s,
        "idle_timeout_s": s.idle_timeout_s,
        "max_handle_msg": s.max_handle_msg,
        "max_request_line_bytes": s.max_request_line_bytes,
        "max_header_bytes": s.max_header_bytes,
        "header_timeout_s": s.header_timeout_s,
    }
    for name, value in positive.items():
        if value <= 0:
            raise ConfigError(f"{name} must be positive, got {value}")


def load_executor_settings(
    environ: Mapping[str, str] | None = None, **explicit: Any
) -> ExecutorSettings:
    """Build settings; explicit (non-None) arguments win over ``JOBRING_EXECUTOR_*`` env vars."""
    env = os.environ if environ is None else environ
    hints = get_type_hints(ExecutorSettings)
    known = {f.name for f in fields(ExecutorSettings)}
    unknown = set(explicit) - known
    if unknown:
        raise TypeError(f"unknown executor setting(s): {', '.join(sorted(unknown))}")
    values: dict[str, Any] = {}
    for name in known:
        env_value = env.get(ENV_PREFIX + name.upper())
        if env_value is not None:
            values[name] = _coerce(f"{ENV_PREFIX}{name.upper()}", env_value, hints[name])
    for name, value in explicit.items():
        if value is not None:
            values[name] = _coerce(name, value, hints[name])
    settings = ExecutorSettings(**values)
    _validate(settings)
    check_metrics_token(settings.metrics_token)
    return settings
