"""What the management API needs from the rest of the admin, wired by ``admin/runtime/app.py``."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime

from jobring.admin.alarms.outbound import Resolver, system_resolve
from jobring.admin.dispatch.client import ExecutorClient
from jobring.admin.distributed.service import DistributedService
from jobring.admin.loop.delayed import DelayedFireRunner
from jobring.admin.monitors.backfills import BackfillRunner
from jobring.admin.security.passwords import PasswordWorkers, shared_password_workers
from jobring.admin.security.ratelimit import LoginRateLimiter
from jobring.admin.security.sessions import DEFAULT_SESSION_MAX_AGE_S
from jobring.admin.services.audit import AuditLog
from jobring.admin.services.bootstrap import Secrets
from jobring.admin.services.executor_tokens import ExecutorTokens
from jobring.admin.services.settings import AdminSettings, address_policy, alarm_policy
from jobring.admin.services.workflows import WorkflowDriver
from jobring.admin.store import Store
from jobring.admin.trigger.trigger import TriggerService
from jobring.core.addresses import AddressPolicy, AlarmTargetPolicy
from jobring.core.clock import Clock, SystemClock

DEFAULT_MAX_BODY_BYTES = 1024 * 1024


@dataclass
class ManagementServices:
    """The store, settings and secrets, plus the trigger service and the executor client.

    ``trigger``/``executors`` may be None (e.g. an API-only test); the endpoints that need
    them then answer 503.
    """

    store: Store
    settings: AdminSettings
    secrets: Secrets
    trigger: TriggerService | None = None
    executors: ExecutorClient | None = None
    clock: Clock = field(default_factory=SystemClock)
    login_limiter: LoginRateLimiter | None = None
    session_max_age_s: int = DEFAULT_SESSION_MAX_AGE_S
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    passwords: PasswordWorkers = field(default_factory=shared_password_workers)
    executor_tokens: ExecutorTokens | None = None
    delayed: DelayedFireRunner | None = None  # woken when a delayed fire is added
    workflows: WorkflowDriver | None = None  # starts and repairs workflow runs
    backfills: BackfillRunner | None = None  # woken when a backfill is created
    distributed: DistributedService | None = None  # map / shard runs: retry failed sub-tasks
    alarm_resolve: Resolver = system_resolve  # host names of alarm targets checked on save
    audit: AuditLog = field(init=False)
    address_policy: AddressPolicy = field(init=False)
    alarm_policy: AlarmTargetPolicy = field(init=False)

    def __post_init__(self) -> None:
        if not self.secrets.session_secret:
            raise ValueError("the session secret must not be empty")
        self.audit = AuditLog(self.store, self.clock)
        self.address_policy = address_policy(self.settings)
        self.alarm_policy = alarm_policy(self.settings)
        if self.login_limiter is None:
            self.login_limiter = LoginRateLimiter(clock=self.clock)

    @property
    def limiter(self) -> LoginRateLimiter:
        assert self.login_limiter is not None
        return self.login_limiter

    def now_ms(self) -> int:
        return self.clock.now_ms()

    def now_naive_utc(self) -> datetime:
        """Now as the reference's DATETIME columns hold it: naive UTC, whole seconds."""
        return datetime.fromtimestamp(self.clock.now_ms() // 1000, tz=UTC).replace(tzinfo=None)
