"""Admin settings: defaults, then an optional TOML file, then ``JOBRING_*`` env vars, then
command-line options (pydantic-settings, see :mod:`jobring.configbase`).

The TOML file is named by ``JOBRING_CONFIG`` (or ``--config`` on the CLI); its keys are
the field names below, at top level or under an ``[admin]`` table; the loop's tunables are
its ``[admin.loop]`` table (``[loop]`` in a file without ``[admin]``). Every setting is
listed in docs/configuration.md.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import Annotated, Any, ClassVar, Self

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from pydantic_settings import SettingsConfigDict

from jobring.admin.loop.config import LoopConfig
from jobring.configbase import (
    LOG_FORMATS,
    LOG_LEVELS,
    ConfigError,
    SettingsBase,
    check_known,
    read_toml_table,
)
from jobring.core.addresses import (
    AddressPolicy,
    AddressRefused,
    AlarmTargetPolicy,
    alarm_policy_from_text,
    check_alarm_url,
    policy_from_text,
    target_urls,
)

DEFAULT_DATABASE_URL = "sqlite+aiosqlite:///./jobring.db"
ENV_PREFIX = "JOBRING_"

DEFAULT_STALE_CLAIM_MS = 30_000
MIN_STALE_CLAIM_MS = 1_000
MAX_STALE_CLAIM_MS = 86_400_000

PositiveInt = Annotated[int, Field(gt=0)]
PositiveFloat = Annotated[float, Field(gt=0)]


class LoopSettings(BaseModel):
    """The scheduling loop's tunables (``[admin.loop]``); a field left unset (None) keeps
    :class:`jobring.admin.loop.loop.LoopConfig`'s default. The field names are
    LoopConfig's; ``pre_read_ms`` stays a top-level setting."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    cycle_ms: PositiveInt | None = None
    lease_ms: PositiveInt | None = None
    lease_guard_ms: PositiveInt | None = None
    prepare_ahead_ms: PositiveInt | None = None
    prepare_slice: PositiveInt | None = None
    advance_flush_ms: PositiveInt | None = None
    claim_limit: PositiveInt | None = None
    max_inflight_batches: PositiveInt | None = None
    max_coalesce_ms: Annotated[int, Field(ge=0)] | None = None
    misfire_threshold_ms: PositiveInt | None = None
    stop_timeout_s: PositiveFloat | None = None
    fence_ahead_ms: PositiveInt | None = None
    fence_every_ms: PositiveInt | None = None

    def given(self) -> dict[str, Any]:
        """The tunables set, by LoopConfig field name."""
        return self.model_dump(exclude_none=True)

    def check(self, pre_read_ms: int) -> None:
        """ValueError when the tunables (with LoopConfig's defaults for the others) break a
        rule the loop relies on (see the loop module's docstring)."""
        c = LoopConfig(**self.given())
        # A lease renewed every cycle must outlive the cycle plus the clock-skew guard, or
        # the node stops sending between two renewals.
        if c.lease_ms <= c.cycle_ms + c.lease_guard_ms:
            raise ValueError(f"loop.lease_ms ({c.lease_ms}) must exceed loop.cycle_ms + "
                             f"loop.lease_guard_ms ({c.cycle_ms} + {c.lease_guard_ms})")
        # Each cycle must prepare (and claim) every instant up to the next cycle.
        if c.prepare_ahead_ms <= c.cycle_ms:
            raise ValueError(f"loop.prepare_ahead_ms ({c.prepare_ahead_ms}) must exceed "
                             f"loop.cycle_ms ({c.cycle_ms})")
        if pre_read_ms <= c.cycle_ms:
            raise ValueError(f"pre_read_ms ({pre_read_ms}) must exceed loop.cycle_ms ({c.cycle_ms})")
        # The fence is raised before it runs out, or fires wait for it.
        if c.fence_every_ms >= c.fence_ahead_ms:
            raise ValueError(f"loop.fence_every_ms ({c.fence_every_ms}) must be below "
                             f"loop.fence_ahead_ms ({c.fence_ahead_ms})")


class AdminSettings(SettingsBase):
    """The admin's settings; every field is ``JOBRING_<NAME>`` in the environment and a key
    of the TOML file (see docs/configuration.md). ``AdminSettings(...)`` uses only its
    arguments and the defaults; :func:`load_settings` reads the file and the environment."""

    model_config = SettingsConfigDict(
        frozen=True, extra="forbid", case_sensitive=False, env_prefix=ENV_PREFIX, env_nested_delimiter="__"
    )
    _json_fields: ClassVar[frozenset[str]] = frozenset({"alarm_default_targets"})

    database_url: str = DEFAULT_DATABASE_URL
    # The most connections to PostgreSQL/MySQL/MariaDB, each kept once opened (a burst waits
    # for one): 20 per admin node, 60 for three (PostgreSQL allows 100 by default).
    database_pool_size: PositiveInt = 20
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
    log_retention_days: PositiveInt = 30
    audit_retention_days: int = 180  # at least 7
    # Concurrent /run calls of fast jobs. A slot is a coroutine, not a thread: 1,000 fires due
    # at one instant all go out in that step (with 200, 800 waited for a slot, p99 ~80 ms).
    fast_pool_size: PositiveInt = 1000
    slow_pool_size: PositiveInt = 100
    executor_connect_timeout: PositiveFloat = 3.0
    executor_read_timeout: PositiveFloat = 3.0
    # amqp://user:password@host:port/vhost: runs for broker executors (broker:// addresses)
    # are published there (docs/dispatch.md, "Broker mode"). Unset: such runs fail their trigger.
    dispatch_broker: str | None = None
    pre_read_ms: PositiveInt = 5000
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
    max_request_line_bytes: PositiveInt = 8 * 1024
    max_header_bytes: PositiveInt = 64 * 1024
    header_timeout: PositiveFloat = 10.0
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
    # Alarm targets (webhook, chat) never reach internal addresses (loopback, RFC 1918, CGNAT,
    # ULA, internal names) unless listed here: a comma list of CIDRs, IPs and host names of
    # internal chat gateways. Metadata and other always-refused ranges stay refused.
    alarm_target_allow: str | None = None
    # Operations: /metrics needs "Authorization: Bearer <metrics_token>" when set; logs as
    # plain text or JSON lines; /ready's database check time limit (s).
    metrics_token: str | None = None
    log_format: str = "plain"
    log_level: str = "INFO"
    ready_timeout: PositiveFloat = 2.0
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
    # Jobs declared in executor code: at most this many jobs managed by code per executor group
    # (retired ones count until deleted), deleted this many days after the code stopped
    # declaring them (0: at the next cleaning, about every 10 minutes).
    declared_jobs_max_per_group: Annotated[int, Field(ge=1, le=100_000)] = 500
    declared_jobs_retired_grace_days: Annotated[int, Field(ge=0, le=3650)] = 7
    # Child jobs: at most this many child fires descend from one root trigger (a chain or
    # tree of children fired on success); beyond it children are not fired.
    child_fire_budget: Annotated[int, Field(ge=1, le=1_000_000)] = 100
    # Workflows: a node attempt an admin claimed and did not report fired this long after its
    # claim is taken over by another admin (its admin may have died in between).
    workflow_stale_claim_ms: int = DEFAULT_STALE_CLAIM_MS
    # The scheduling loop's tunables: the [admin.loop] table, JOBRING_LOOP__<NAME>.
    loop: LoopSettings = Field(default_factory=LoopSettings)

    @field_validator("dispatch_broker")
    @classmethod
    def _dispatch_broker(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith(("amqp://", "amqps://")):
            raise ValueError("must be an amqp:// or amqps:// URL")
        return value or None

    @field_validator("log_format")
    @classmethod
    def _log_format(cls, value: str) -> str:
        if value not in LOG_FORMATS:
            raise ValueError(f"expected plain or json, got {value!r}")
        return value

    @field_validator("log_level")
    @classmethod
    def _log_level(cls, value: str) -> str:
        if value.upper() not in LOG_LEVELS:
            raise ValueError(f"expected one of {', '.join(LOG_LEVELS)}, got {value!r}")
        return value

    @field_validator("alarm_default_targets")
    @classmethod
    def _alarm_targets(cls, value: str | None) -> str | None:
        if value:
            # Loaded only for a default target: the channel modules bring httpx and the
            # store's records (SQLAlchemy), which settings alone do not need.
            from jobring.admin.alarms.targets import TargetError, parse_targets

            try:
                parse_targets(value, "alarm_default_targets")
            except TargetError as exc:
                raise ValueError(str(exc)) from None  # names the bad part: alarm_default_targets.0.url
        return value

    @field_validator("workflow_stale_claim_ms")
    @classmethod
    def _stale_claim(cls, value: int) -> int:
        if not MIN_STALE_CLAIM_MS <= value <= MAX_STALE_CLAIM_MS:
            raise ValueError(f"must be between {MIN_STALE_CLAIM_MS} and {MAX_STALE_CLAIM_MS} "
                             f"(milliseconds), got {value}")
        return value

    @model_validator(mode="after")
    def _loop_fits(self) -> Self:
        self.loop.check(self.pre_read_ms)
        return self

    @model_validator(mode="after")
    def _stale_claim_outlasts_a_fire(self) -> Self:
        # An admin still waiting for the executor's answer to a node's /run must not be taken
        # over: the taker would find the job run unconfirmed and could send it again (an
        # XXL-JOB executor does not recognise the run id, and would run it twice).
        limit_ms = (self.executor_connect_timeout + self.executor_read_timeout) * 1000
        if self.workflow_stale_claim_ms <= limit_ms:
            raise ValueError(
                f"workflow_stale_claim_ms ({self.workflow_stale_claim_ms}) must exceed "
                f"executor_connect_timeout + executor_read_timeout ({limit_ms:g} ms): an admin "
                "still waiting for an executor's answer would be taken over")
        return self


def load_settings(
    config_file: str | os.PathLike[str] | None = None,
    environ: Mapping[str, str] | None = None,
    **overrides: Any,
) -> AdminSettings:
    """Build the admin settings from defaults, a TOML file, the environment and overrides
    (None: not given), highest last; ConfigError names an invalid or unknown setting."""
    env = os.environ if environ is None else environ
    path = config_file or env.get(ENV_PREFIX + "CONFIG")
    file_values: dict[str, Any] = {}
    if path:
        file_values = read_toml_table(path, "admin", skip=frozenset({"executor"}))
        check_known(AdminSettings, file_values, str(path))
        if isinstance(file_values.get("loop"), dict):
            check_known(LoopSettings, file_values["loop"], f"{path}: [loop]")
    unknown = set(overrides) - set(AdminSettings.model_fields)
    if unknown:
        raise TypeError(f"unknown admin setting(s): {', '.join(sorted(unknown))}")
    settings = AdminSettings.load(
        environ=env, file_values=file_values, file_name=str(path), explicit=overrides
    )
    address_policy(settings)  # a bad CIDR stops the start here
    check_alarm_settings(settings)
    return settings


def address_policy(settings: AdminSettings) -> AddressPolicy:
    """The executor address policy of ``settings``; ConfigError names a bad network."""
    try:
        return policy_from_text(settings.executor_address_deny, settings.executor_address_allow)
    except ValueError as exc:
        raise ConfigError(f"executor_address_deny/_allow: {exc}") from None


def alarm_policy(settings: AdminSettings) -> AlarmTargetPolicy:
    """The alarm target policy of ``settings``; ConfigError names a bad entry."""
    try:
        return alarm_policy_from_text(settings.executor_address_deny, settings.alarm_target_allow)
    except ValueError as exc:
        raise ConfigError(f"alarm_target_allow: {exc}") from None


def check_alarm_settings(settings: AdminSettings) -> None:
    """The admin-wide alarm URLs (``alarm_webhook_url``, ``alarm_default_targets``) pass the
    alarm target policy like an operator's; ConfigError names the one that does not."""
    policy = alarm_policy(settings)
    urls = [("alarm_webhook_url", settings.alarm_webhook_url)] if settings.alarm_webhook_url else []
    defaults = json.loads(settings.alarm_default_targets) if settings.alarm_default_targets else []
    for i, target in enumerate(defaults if isinstance(defaults, list) else []):
        if isinstance(target, dict):
            urls += [(f"alarm_default_targets.{i}.{key}", url) for key, url in target_urls(target)]
    for where, url in urls:
        try:
            check_alarm_url(url, policy)
        except AddressRefused as exc:
            raise ConfigError(f"{where}: {exc}") from None
