"""The admin's storage layer: one ``Store`` facade over typed async repositories.

    engine = create_engine("postgresql://postgres@127.0.0.1/jobring")
    await upgrade_database(engine)
    store = Store(engine)
    job = await store.jobs.get(1)

Every repository method runs in its own transaction and returns frozen dataclasses from
``jobring.admin.store.records``. Reference DATETIME columns are naive UTC (whole seconds);
epoch-millisecond columns are ints.
"""

from __future__ import annotations

from sqlalchemy.ext.asyncio import AsyncEngine

from jobring.admin.store.alarms import AlarmEventRepository
from jobring.admin.store.audit import AuditEvent, AuditFilter, AuditRepository, NewAuditEvent
from jobring.admin.store.backfills import BackfillRepository
from jobring.admin.store.calendars import CalendarRepository, CalendarRow
from jobring.admin.store.delayed import DelayedFire, DelayedFireRepository
from jobring.admin.store.engine import (
    DEFAULT_POOL_SIZE,
    Capabilities,
    Db,
    create_engine,
    normalize_url,
    utc_naive,
)
from jobring.admin.store.errors import Conflict, NotFound, ReferencedError, StoreError, is_transient
from jobring.admin.store.fires import FireRepository, RecordedFire
from jobring.admin.store.flow import FlowRepository
from jobring.admin.store.groups import EXECUTOR, GroupRepository, RegistryRepository
from jobring.admin.store.insights import InsightRepository, NodeActivity
from jobring.admin.store.jobs import JobRepository
from jobring.admin.store.logs import HANDLE_MSG_MAX, LogRepository
from jobring.admin.store.migrate import UpgradeResult, current_revision, head_revision, upgrade_database
from jobring.admin.store.misc import GlueRepository, ReportRepository, ScheduleLock
from jobring.admin.store.nodes import SchedulerNodeRepository
from jobring.admin.store.overlap import OverlapRepository
from jobring.admin.store.records import (
    ApiToken,
    ClearRule,
    DayCount,
    GlueVersion,
    GroupGuard,
    HandleResult,
    HeldJobs,
    JobGroup,
    JobInfo,
    JobSort,
    LogEntry,
    LogStatus,
    NewLog,
    Page,
    RegistryEntry,
    ReportTotals,
    ResultOutcome,
    RevokedAccess,
    RunCursor,
    Tally,
    TriggerResult,
    User,
)
from jobring.admin.store.subtasks import DistributedRepository
from jobring.admin.store.users import SessionRepository, SettingRepository, TokenRepository, UserRepository
from jobring.admin.store.workflow_children import WorkflowChildRepository
from jobring.admin.store.workflow_schedules import WorkflowScheduleRepository
from jobring.admin.store.workflows import WorkflowRepository


class Store:
    """Typed access to every table. Cheap to construct; share one per process."""

    def __init__(self, engine: AsyncEngine) -> None:
        self.engine = engine
        self.db = Db(engine)
        self.jobs = JobRepository(self.db)
        self.logs = LogRepository(self.db)
        self.fires = FireRepository(self.db)
        self.nodes = SchedulerNodeRepository(self.db)
        self.groups = GroupRepository(self.db)
        self.registry = RegistryRepository(self.db)
        self.reports = ReportRepository(self.db)
        self.insights = InsightRepository(self.db)
        self.glue = GlueRepository(self.db)
        self.users = UserRepository(self.db)
        self.tokens = TokenRepository(self.db)
        self.sessions = SessionRepository(self.db)
        self.settings = SettingRepository(self.db)
        self.lock = ScheduleLock(self.db)
        self.audit = AuditRepository(self.db)
        self.alarms = AlarmEventRepository(self.db)
        self.delayed = DelayedFireRepository(self.db)
        self.workflows = WorkflowRepository(self.db)
        self.workflow_schedules = WorkflowScheduleRepository(self.db)
        self.workflow_children = WorkflowChildRepository(self.db)
        self.calendars = CalendarRepository(self.db)
        self.backfills = BackfillRepository(self.db)
        self.flow = FlowRepository(self.db)
        self.distributed = DistributedRepository(self.db)
        self.overlap = OverlapRepository(self.db)

    @classmethod
    async def open(cls, url: str, *, upgrade: bool = True, pool_size: int = DEFAULT_POOL_SIZE) -> Store:
        """Create the engine for ``url`` (``pool_size``: connections kept, PostgreSQL and
        MySQL/MariaDB), optionally run migrations, and return the store."""
        engine = create_engine(url, pool_size=pool_size)
        if upgrade:
            await upgrade_database(engine)
        return cls(engine)

    @property
    def backend(self) -> str:
        """ "sqlite", "postgresql", "mariadb" or "mysql" (MariaDB is known after first connect)."""
        return self.db.backend

    async def capabilities(self) -> Capabilities:
        """What the server supports (SKIP LOCKED, INSERT ... RETURNING)."""
        return await self.db.capabilities()

    async def close(self) -> None:
        """Dispose of the engine's connections."""
        await self.engine.dispose()


__all__ = [
    "EXECUTOR",
    "AlarmEventRepository",
    "HANDLE_MSG_MAX",
    "ApiToken",
    "AuditEvent",
    "AuditFilter",
    "AuditRepository",
    "CalendarRepository",
    "CalendarRow",
    "Capabilities",
    "ClearRule",
    "Conflict",
    "DayCount",
    "DelayedFire",
    "DelayedFireRepository",
    "DistributedRepository",
    "FireRepository",
    "FlowRepository",
    "GlueRepository",
    "GlueVersion",
    "GroupRepository",
    "HandleResult",
    "HeldJobs",
    "InsightRepository",
    "JobGroup",
    "JobInfo",
    "JobRepository",
    "JobSort",
    "LogEntry",
    "LogRepository",
    "LogStatus",
    "NewAuditEvent",
    "NewLog",
    "NodeActivity",
    "NotFound",
    "Page",
    "RunCursor",
    "Tally",
    "RecordedFire",
    "ReferencedError",
    "RegistryEntry",
    "RegistryRepository",
    "ReportRepository",
    "ReportTotals",
    "GroupGuard",
    "ResultOutcome",
    "RevokedAccess",
    "ScheduleLock",
    "SchedulerNodeRepository",
    "SessionRepository",
    "SettingRepository",
    "Store",
    "StoreError",
    "TokenRepository",
    "TriggerResult",
    "UpgradeResult",
    "User",
    "UserRepository",
    "WorkflowRepository",
    "DEFAULT_POOL_SIZE",
    "create_engine",
    "current_revision",
    "head_revision",
    "is_transient",
    "normalize_url",
    "upgrade_database",
    "utc_naive",
]
