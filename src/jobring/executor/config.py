"""Executor settings: explicit arguments, then ``JOBRING_EXECUTOR_*`` env vars, then the
``JOBRING_EXECUTOR_CONFIG`` TOML file, then defaults (pydantic-settings, see
:mod:`jobring.configbase`)."""

from __future__ import annotations

import importlib.util
import ipaddress
import os
from collections.abc import Mapping
from typing import Annotated, Any
from urllib.parse import urlsplit

from pydantic import Field, field_validator
from pydantic_settings import NoDecode, SettingsConfigDict

from jobring.configbase import ConfigError, SettingsBase, check_known, check_metrics_token, read_toml_table
from jobring.protocol.models import PROTOCOLS

ENV_PREFIX = "JOBRING_EXECUTOR_"
DEFAULT_LOG_PATH = "./jobring-executor-logs"
DECLARE_MODES = ("auto", "always", "never")
DISPATCH_MODES = ("push", "pull", "broker")
CONFIG_ENV = "JOBRING_EXECUTOR_CONFIG"

PositiveInt = Annotated[int, Field(gt=0)]
PositiveFloat = Annotated[float, Field(gt=0)]


class ExecutorSettings(SettingsBase):
    """The executor's settings; every field is ``JOBRING_EXECUTOR_<NAME>`` in the environment
    and a key of the file named by ``JOBRING_EXECUTOR_CONFIG`` (see docs/configuration.md)."""

    model_config = SettingsConfigDict(
        frozen=True, extra="forbid", case_sensitive=False, env_prefix=ENV_PREFIX
    )

    app_name: str = ""
    # Admin base URLs, e.g. "http://admin:8080/xxl-job-admin/"; env: comma separated.
    admin_addresses: Annotated[tuple[str, ...], NoDecode] = ()
    access_token: str | None = None
    # Address registered with the admin (for NAT/containers); None: detected.
    address: str | None = None
    # IP used for the detected address; None: first non-loopback IPv4.
    ip: str | None = None
    host: str = "0.0.0.0"
    port: Annotated[int, Field(ge=0, le=65535)] = 9999
    log_path: str = DEFAULT_LOG_PATH
    # Below 3 (e.g. -1) run logs are kept forever, as in the reference.
    log_retention_days: int = 30
    glue_enabled: bool = False
    # Without a token the executor starts only with allow_open and a loopback bind.
    allow_open: bool = False
    beat_interval_s: PositiveFloat = 30.0
    admin_timeout_s: PositiveFloat = 3.0
    # The reference sends all queued results in one request; this caps one at ~100 KB.
    callback_batch_size: PositiveInt = 1000
    callback_max_backoff_s: PositiveFloat = 30.0
    idle_timeout_s: PositiveFloat = 90.0
    # Runs that may wait in one job's queue behind its running run (SERIAL_EXECUTION); past
    # it /run is refused "job queue full". 0: no cap (as XXL-JOB).
    max_queued_per_job: Annotated[int, Field(ge=0)] = 1000
    max_handle_msg: PositiveInt = 15000
    # GET /metrics needs "Authorization: Bearer <metrics_token>" when set (open otherwise).
    metrics_token: str | None = None
    # Send the jobs declared in code (@executor.job(..., cron=...)) to the admin: "auto" when
    # a handler declares one, "always" (also an empty list: every declared job is stopped),
    # "never".
    declare_jobs: str = "auto"
    # Limits on a request head (414 / 431 answers) and the time to receive it (408).
    max_request_line_bytes: PositiveInt = 8 * 1024
    max_header_bytes: PositiveInt = 64 * 1024
    header_timeout_s: PositiveFloat = 10.0
    # Connections of the standalone server. Those that have not presented the access token yet
    # are capped in total and per client address (the oldest is closed for a newcomer) and
    # closed after unauthenticated_idle_timeout_s idle; the admin's (with the token) are not.
    max_connections: PositiveInt = 1024
    max_unauthenticated_connections: PositiveInt = 256
    max_unauthenticated_per_address: PositiveInt = 32
    unauthenticated_idle_timeout_s: PositiveFloat = 5.0
    # XXL-JOB protocol of the admin: "auto" (found out from its answers), "2", "3" (3.0-3.4)
    # or "3.5". Only callback bodies differ; the server answers every dialect.
    protocol: str = "auto"
    # "push": the admin calls this executor's HTTP port (XXL-JOB's way); "pull": no port is
    # opened, the executor long-polls the admin for its calls (docs/dispatch.md, "Pull mode").
    # "broker": runs come from RabbitMQ (dispatch_broker, the admin's JOBRING_DISPATCH_BROKER),
    # the other calls over the poll of "pull" (docs/dispatch.md, "Broker mode").
    dispatch: str = "push"
    dispatch_broker: str | None = None
    # A broker executor's runs taken from the broker and not finished yet, at most; as many
    # more wait unacknowledged for a slot (the prefetch).
    broker_slots: PositiveInt = 200

    @field_validator("admin_addresses", mode="before")
    @classmethod
    def _address_list(cls, value: Any) -> Any:
        items = value.split(",") if isinstance(value, str) else value
        if isinstance(items, list | tuple):
            return tuple(str(i).strip() for i in items if str(i).strip())
        return value

    @field_validator("admin_addresses")
    @classmethod
    def _admin_urls(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for url in value:
            parts = urlsplit(url)
            if parts.scheme not in ("http", "https") or not parts.netloc:
                raise ValueError(f"admin address must be an http(s) URL, got {url!r}")
        return value

    @field_validator("address")
    @classmethod
    def _address(cls, value: str | None) -> str | None:
        if value is not None:
            parts = urlsplit(value)
            if parts.scheme not in ("http", "https", "pull", "broker") or not parts.netloc:
                raise ValueError("executor address must be an http(s) URL, pull://<name>/ or "
                                 f"broker://<name>/, got {value!r}")
        return value

    @field_validator("dispatch")
    @classmethod
    def _dispatch(cls, value: str) -> str:
        if value not in DISPATCH_MODES:
            raise ValueError(f"must be one of {', '.join(DISPATCH_MODES)}, got {value!r}")
        return value

    @field_validator("protocol")
    @classmethod
    def _protocol(cls, value: str) -> str:
        if value not in PROTOCOLS:
            raise ValueError(f"must be one of {', '.join(PROTOCOLS)}, got {value!r}")
        return value

    @field_validator("declare_jobs")
    @classmethod
    def _declare_jobs(cls, value: str) -> str:
        if value not in DECLARE_MODES:
            raise ValueError(f"must be one of {', '.join(DECLARE_MODES)}, got {value!r}")
        return value

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
    if settings.address and settings.dispatch == "push":
        addr_host = urlsplit(settings.address).hostname or ""
        if not is_loopback_host(addr_host):
            raise ConfigError(
                f"executor without access token must advertise a loopback address, not {settings.address!r}"
            )


def load_executor_settings(
    environ: Mapping[str, str] | None = None, **explicit: Any
) -> ExecutorSettings:
    """Build settings: explicit (non-None) arguments > ``JOBRING_EXECUTOR_*`` env vars > the
    TOML file named by ``JOBRING_EXECUTOR_CONFIG`` (its ``[executor]`` table, else its top
    level) > defaults. ConfigError names an invalid setting; TypeError an unknown argument."""
    env = os.environ if environ is None else environ
    unknown = set(explicit) - set(ExecutorSettings.model_fields)
    if unknown:
        raise TypeError(f"unknown executor setting(s): {', '.join(sorted(unknown))}")
    path = env.get(CONFIG_ENV)
    file_values: dict[str, Any] = {}
    if path:
        file_values = read_toml_table(path, "executor", skip=frozenset({"admin"}))
        check_known(ExecutorSettings, file_values, path)
    settings = ExecutorSettings.load(environ=env, file_values=file_values, file_name=str(path),
                                     explicit=explicit, explicit_name="argument")
    if not settings.app_name.strip():
        raise ConfigError("executor app_name is required (JOBRING_EXECUTOR_APP_NAME)")
    scheme = (settings.address or "").partition("://")[0]
    if settings.address and scheme != settings.dispatch and not (settings.dispatch == "push" and scheme
                                                                  in ("http", "https")):
        raise ConfigError(f"address {settings.address!r} does not fit dispatch={settings.dispatch!r}: "
                          "a pull executor's address is pull://<name>/, a broker executor's "
                          "broker://<name>/, a push executor's an http(s) URL")
    if settings.dispatch == "broker":
        if not (settings.dispatch_broker or "").startswith(("amqp://", "amqps://")):
            raise ConfigError("dispatch=broker needs dispatch_broker (JOBRING_EXECUTOR_DISPATCH_BROKER): the "
                              "amqp:// URL the admin publishes to (its JOBRING_DISPATCH_BROKER)")
        if importlib.util.find_spec("aio_pika") is None:
            raise ConfigError("dispatch=broker needs the AMQP client: pip install 'jobring[amqp]'")
    check_metrics_token(settings.metrics_token)
    if settings.max_unauthenticated_connections >= settings.max_connections:
        # Else nothing would be left for the admin's connections once others fill the budget.
        raise ConfigError(
            f"max_unauthenticated_connections ({settings.max_unauthenticated_connections}) must be "
            f"below max_connections ({settings.max_connections})")
    return settings
