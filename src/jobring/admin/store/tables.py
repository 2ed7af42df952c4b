"""The database schema: XXL-JOB 2.4's tables and columns, plus jobring's additions.

Names and meanings follow the reference so an existing XXL-JOB 2.x MySQL database can be
adopted. jobring's additions are new columns with defaults or new tables (prefixed
``jobring_``), never renames. Instants we add are UTC epoch milliseconds (BIGINT); DATETIME
columns hold wall time in the database's zone (``database_timezone``: UTC unless an adopted
XXL-JOB database says otherwise), converted to and from naive UTC in ``zones.ZonedDateTime``.
"""

from __future__ import annotations

from sqlalchemy import (
    BigInteger,
    Boolean,
    Column,
    DateTime,
    Index,
    Integer,
    MetaData,
    SmallInteger,
    String,
    Table,
    Text,
    UniqueConstraint,
)
from sqlalchemy.dialects import mysql

from jobring.admin.store.zones import ZonedDateTime

metadata = MetaData()

# MEDIUMTEXT on MySQL as in the reference; TEXT elsewhere.
LongText = Text().with_variant(mysql.MEDIUMTEXT(), "mysql", "mariadb")

job_group = Table(
    "xxl_job_group",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("app_name", String(64), nullable=False),
    Column("title", String(64), nullable=False),
    Column("address_type", SmallInteger, nullable=False, server_default="0"),
    Column("address_list", Text, nullable=True),
    Column("update_time", ZonedDateTime, nullable=True),
    # jobring addition: the group's executor token (None: only the global token, if enabled)
    Column("access_token", String(128), nullable=True),
    # jobring: addresses an admin took out of routing by hand (comma list); heartbeats
    # do not bring them back.
    Column("disabled_addresses", Text, nullable=True),
    # jobring: flow settings of every job of the group (JSON, jobring.core.flow.settings;
    # None: none)
    Column("flow", Text, nullable=True),
    sqlite_autoincrement=True,
)

job_info = Table(
    "xxl_job_info",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("job_group", Integer, nullable=False),
    Column("job_desc", String(255), nullable=False),
    Column("add_time", ZonedDateTime, nullable=True),
    Column("update_time", ZonedDateTime, nullable=True),
    Column("author", String(64), nullable=True),
    Column("alarm_email", String(255), nullable=True),
    Column("schedule_type", String(50), nullable=False, server_default="NONE"),
    Column("schedule_conf", String(128), nullable=True),
    Column("misfire_strategy", String(50), nullable=False, server_default="DO_NOTHING"),
    Column("executor_route_strategy", String(50), nullable=True),
    Column("executor_handler", String(255), nullable=True),
    Column("executor_param", String(512), nullable=True),
    Column("executor_block_strategy", String(50), nullable=True),
    Column("executor_timeout", Integer, nullable=False, server_default="0"),
    Column("executor_fail_retry_count", Integer, nullable=False, server_default="0"),
    Column("glue_type", String(50), nullable=False),
    Column("glue_source", LongText, nullable=True),
    Column("glue_remark", String(128), nullable=True),
    Column("glue_updatetime", ZonedDateTime, nullable=True),
    Column("child_jobid", String(255), nullable=True),
    Column("trigger_status", SmallInteger, nullable=False, server_default="0"),
    Column("trigger_last_time", BigInteger, nullable=False, server_default="0"),
    Column("trigger_next_time", BigInteger, nullable=False, server_default="0"),
    # jobring additions
    Column("schedule_timezone", String(64), nullable=True),  # None: the admin's zone
    Column("lease_owner", String(64), nullable=True),  # admin node holding the job's fires
    Column("lease_until", BigInteger, nullable=False, server_default="0"),  # epoch ms
    # Alarms and retries (jobring): JSON list of alarm targets, the alarm rule, recovery
    # alarms, the deadline (minutes after the planned instant), retry interval and back-off.
    Column("alarm_targets", Text, nullable=True),
    Column("alarm_on", String(20), nullable=False, server_default="failure_final"),
    Column("alarm_recovery", Boolean, nullable=False, server_default="0"),
    Column("deadline_minutes", Integer, nullable=True),
    Column("executor_fail_retry_interval_s", Integer, nullable=False, server_default="0"),
    Column("retry_backoff", String(20), nullable=False, server_default="fixed"),
    Column("retry_backoff_max_s", Integer, nullable=False, server_default="3600"),
    # The field values an executor last declared for this job (JSON), and whether it is
    # still declared (see jobring.admin.declarations).
    Column("declared_spec", Text, nullable=True),
    Column("declared_by_executor", SmallInteger, nullable=False, server_default="0"),
    # "code": an executor's declarations may manage the job (it made it, or an admin handed it
    # over); "console": only users may. When the code stopped declaring it (epoch ms): such a
    # job is deleted after JOBRING_DECLARED_JOBS_RETIRED_GRACE_DAYS.
    Column("managed_by", String(16), nullable=False, server_default="console"),
    Column("declared_retired_at", BigInteger, nullable=True),
    # Timing rules (JSON, see jobring.core.timing.rules; None: none), the note of the last
    # pause (JSON: by, reason, at).
    Column("timing", Text, nullable=True),
    Column("pause_note", Text, nullable=True),
    # Flow settings (JSON, jobring.core.flow.settings: limits, concurrency key, rate, priority;
    # None: none, and the fire path reads nothing more).
    Column("flow", Text, nullable=True),
    # Distributed runs (docs/distributed-jobs.md): shards per run (0: not sharded) and how
    # many sub-tasks may fail with the run still a success ("3", "1%"; None: none).
    Column("shard_count", Integer, nullable=False, server_default="0"),
    Column("failure_tolerance", String(32), nullable=True),
    # Broadcast hooks (handler names, None: none): with route SHARDING_BROADCAST, a run is one
    # parent: the pre hook once, one part per executor, then the post hook once.
    Column("broadcast_pre", String(64), nullable=True),
    Column("broadcast_post", String(64), nullable=True),
    Index("ix_job_info_due", "trigger_status", "trigger_next_time"),
    Index("ix_job_info_group", "job_group"),
    Index("ix_job_info_lease_owner", "lease_owner"),
    Index("ix_job_info_retired", "declared_retired_at"),
    sqlite_autoincrement=True,
)

job_log = Table(
    "xxl_job_log",
    metadata,
    Column("id", BigInteger().with_variant(Integer, "sqlite"), primary_key=True, autoincrement=True),
    Column("job_group", Integer, nullable=False),
    Column("job_id", Integer, nullable=False),
    Column("executor_address", String(255), nullable=True),
    Column("executor_handler", String(255), nullable=True),
    Column("executor_param", String(512), nullable=True),
    Column("executor_sharding_param", String(20), nullable=True),
    Column("executor_fail_retry_count", Integer, nullable=False, server_default="0"),
    Column("trigger_time", ZonedDateTime, nullable=True),
    Column("trigger_code", Integer, nullable=False),
    Column("trigger_msg", Text, nullable=True),
    Column("handle_time", ZonedDateTime, nullable=True),
    Column("handle_code", Integer, nullable=False),
    Column("handle_msg", Text, nullable=True),
    Column("alarm_status", SmallInteger, nullable=False, server_default="0"),
    # jobring additions
    Column("trigger_type", String(20), nullable=True),
    # The planned instant of a scheduled fire (epoch ms); with job_id it is the fire's
    # identity, so a second node that tries the same fire hits the unique key.
    Column("planned_time", BigInteger, nullable=True),
    Column("dispatch_time", BigInteger, nullable=True),  # actual dispatch, epoch ms
    Column("admin_node", String(64), nullable=True),
    Column("handle_time_ms", BigInteger, nullable=True),  # handle_time to the ms (run durations)
    Column("attempt", Integer, nullable=False, server_default="1"),  # 1 = first run, 2 = first retry ...
    # A child run: the run its tree started from and how deep it is (1: a direct child). On a
    # root run: how many child fires its tree used of JOBRING_CHILD_FIRE_BUDGET.
    Column("root_run_id", BigInteger, nullable=True),
    Column("child_depth", Integer, nullable=False, server_default="0"),
    Column("child_fires", Integer, nullable=False, server_default="0"),
    Column("retry_of", BigInteger, nullable=True),  # a retry: the run it re-runs (its previous attempt)
    # A workflow node's run: the node attempt (``jobring_workflow_node_run.id``) it carries out;
    # unique, so an attempt is recorded at most once whichever admin fires it.
    Column("workflow_node_run_id", BigInteger, nullable=True),
    # Logical (business) time of the run and the start of its data interval, epoch ms (issue
    # 24): set on backfill runs and runs whose params are templated; a scheduled run's logical
    # time is otherwise its planned_time.
    Column("logical_time", BigInteger, nullable=True),
    Column("data_interval_start", BigInteger, nullable=True),
    # A backfill's run (``jobring_backfill.id``); with logical_time and attempt unique, so an
    # instant of a backfill is recorded at most once per attempt whichever admin fires it.
    Column("backfill_id", BigInteger, nullable=True),
    # The logDateTime the run was sent with, epoch ms (trigger_time may have lost or rounded
    # its milliseconds, and reads an hour early in a database zone's repeated hour).
    Column("sent_time", BigInteger, nullable=True),
    UniqueConstraint("job_id", "planned_time", name="ux_job_log_planned_fire"),
    Index("I_trigger_time", "trigger_time"),
    Index("I_handle_code", "handle_code"),
    Index("ix_job_log_job_time", "job_id", "trigger_time"),
    Index("ix_job_log_alarm", "alarm_status", "handle_code"),
    Index("ix_job_log_alarm_trigger", "alarm_status", "trigger_code"),  # the fail monitor
    Index("ix_job_log_time_id", "trigger_time", "id"),  # newest first, keyset paging
    Index("ix_job_log_group_time", "job_group", "trigger_time"),
    Index("ix_job_log_planned", "planned_time"),  # the dashboard's node lateness
    Index("ix_job_log_retry_of", "retry_of"),  # a run's attempts
    Index("ux_job_log_workflow_node", "workflow_node_run_id", unique=True),
    Index("ux_job_log_backfill", "backfill_id", "logical_time", "attempt", unique=True),
    sqlite_autoincrement=True,
)

job_log_report = Table(
    "xxl_job_log_report",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    # A calendar day (midnight) in the scheduling zone, as XXL-JOB stores it: a label, not an instant.
    Column("trigger_day", DateTime, nullable=True),
    Column("running_count", Integer, nullable=False, server_default="0"),
    Column("suc_count", Integer, nullable=False, server_default="0"),
    Column("fail_count", Integer, nullable=False, server_default="0"),
    Column("update_time", ZonedDateTime, nullable=True),
    UniqueConstraint("trigger_day", name="i_trigger_day"),
)

job_logglue = Table(
    "xxl_job_logglue",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("job_id", Integer, nullable=False),
    Column("glue_type", String(50), nullable=True),
    Column("glue_source", LongText, nullable=True),
    Column("glue_remark", String(128), nullable=False),
    Column("add_time", ZonedDateTime, nullable=True),
    Column("update_time", ZonedDateTime, nullable=True),
    Index("ix_job_logglue_job", "job_id"),
)

job_registry = Table(
    "xxl_job_registry",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("registry_group", String(50), nullable=False),
    Column("registry_key", String(255), nullable=False),
    Column("registry_value", String(255), nullable=False),
    Column("update_time", ZonedDateTime, nullable=True),
    # jobring addition: the handler names the executor declared in its last beat received by
    # a jobring admin (a JSON array); NULL: it declared nothing (any job may go there).
    Column("handlers", LongText, nullable=True),
    Index("i_g_k_v", "registry_group", "registry_key", "registry_value"),
)

job_user = Table(
    "xxl_job_user",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("username", String(50), nullable=False),
    # The reference's unsalted MD5: jobring never writes one; an adopted user's is accepted at
    # one login (forcing a change), then emptied (kept with JOBRING_KEEP_XXL_JOB_PASSWORDS).
    Column("password", String(50), nullable=False, server_default=""),
    # 1 = admin, 0 = operator (the reference's normal user), 2 = viewer (jobring).
    Column("role", SmallInteger, nullable=False),
    Column("permission", String(255), nullable=True),  # permitted group ids, comma list
    # jobring additions
    Column("password_hash", String(255), nullable=True),  # argon2id
    Column("must_change_password", Boolean, nullable=False, server_default="0"),
    Column("glue_permission", Boolean, nullable=False, server_default="0"),
    Column("add_time", ZonedDateTime, nullable=True),
    UniqueConstraint("username", name="i_username"),
    sqlite_autoincrement=True,
)

job_lock = Table(
    "xxl_job_lock",
    metadata,
    Column("lock_name", String(50), primary_key=True),
)

# jobring's own tables.
setting = Table(
    "jobring_setting",
    metadata,
    Column("name", String(64), primary_key=True),
    Column("value", Text, nullable=False),
    Column("update_time", ZonedDateTime, nullable=True),
)

api_token = Table(
    "jobring_api_token",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("user_id", Integer, nullable=False),
    Column("name", String(64), nullable=False),
    Column("token_hash", String(128), nullable=False),  # sha256 hex of the token
    Column("add_time", ZonedDateTime, nullable=True),
    Column("last_used_time", ZonedDateTime, nullable=True),
    Column("revoked", Boolean, nullable=False, server_default="0"),
    Column("expires_at", ZonedDateTime, nullable=True),  # naive UTC; None: never expires
    Column("parent_token_id", Integer, nullable=True),  # the token it was created with, if any
    UniqueConstraint("token_hash", name="ux_api_token_hash"),
    Index("ix_api_token_user", "user_id"),
    sqlite_autoincrement=True,
)

# Console/API sessions, checked on every request so that logout, a password or role change
# and user deletion end them at once on every node. Only a sha256 of the session id is kept.
session = Table(
    "jobring_session",
    metadata,
    Column("id_hash", String(64), primary_key=True),
    Column("user_id", Integer, nullable=False),
    Column("created", BigInteger, nullable=False),  # epoch ms
    Column("expires", BigInteger, nullable=False),  # epoch ms
    Column("last_seen", BigInteger, nullable=False),  # epoch ms, written at most once a minute
    Column("revoked", Boolean, nullable=False, server_default="0"),
    Index("ix_session_user", "user_id"),
    Index("ix_session_expires", "expires"),
)

# Admin nodes that schedule: announced every cycle (alive_until), and the latest planned
# instant each node may send (send_fence), raised a little ahead of time while it runs.
scheduler_node = Table(
    "jobring_scheduler_node",
    metadata,
    Column("node_id", String(64), primary_key=True),
    Column("alive_until", BigInteger, nullable=False, server_default="0"),
    Column("send_fence", BigInteger, nullable=False, server_default="0"),
    # The key of the session lock the node holds while alive (0: none; see store.node_locks).
    Column("lock_key", BigInteger, nullable=False, server_default="0"),
)

# Security-relevant actions: who did what, when, from where (see jobring.admin.services.audit).
# Ids are never reused (AUTOINCREMENT on SQLite), so a deleted record leaves a visible gap.
audit = Table(
    "jobring_audit",
    metadata,
    Column("id", BigInteger().with_variant(Integer, "sqlite"), primary_key=True, autoincrement=True),
    Column("at", BigInteger, nullable=False),  # epoch ms, UTC
    Column("actor_id", Integer, nullable=True),  # user id when known
    Column("actor", String(64), nullable=False),  # username snapshot, or "anonymous"/credential name
    Column("actor_kind", String(16), nullable=False),
    Column("token_id", Integer, nullable=True),  # the API token used, if any
    Column("source", String(64), nullable=True),  # client address
    Column("action", String(32), nullable=False),
    Column("target_type", String(16), nullable=True),
    Column("target_id", String(64), nullable=True),
    Column("group_id", Integer, nullable=True),
    Column("outcome", String(16), nullable=False),
    Column("details", LongText, nullable=True),  # JSON, secrets redacted
    Index("ix_audit_at", "at"),
    Index("ix_audit_action", "action"),
    Index("ix_audit_actor", "actor"),
    Index("ix_audit_target", "target_type", "target_id"),
    Index("ix_audit_group", "group_id"),
    sqlite_autoincrement=True,
)

# Alarms other than the failure alarm (which is the run's alarm_status): deadline and
# recovery alarms, one row per (run, kind). The unique key is the claim: of two admin nodes
# that see the same deadline pass, only the one whose insert succeeds sends the alarm.
alarm_event = Table(
    "jobring_alarm_event",
    metadata,
    Column("id", BigInteger().with_variant(Integer, "sqlite"), primary_key=True, autoincrement=True),
    Column("log_id", BigInteger, nullable=False),
    Column("job_id", Integer, nullable=False),
    Column("kind", String(20), nullable=False),
    Column("status", SmallInteger, nullable=False, server_default="-1"),
    Column("add_time", BigInteger, nullable=False, server_default="0"),  # epoch ms
    UniqueConstraint("log_id", "kind", name="ux_alarm_event_log_kind"),
    Index("ix_alarm_event_time", "add_time"),
)

# One-shot runs asked for a later instant (trigger-at): fired once by whichever node gets
# there first; the run's log row carries ``planned_time = -id``, so the run log's unique key
# on (job id, planned time) keeps it to one run, and never collides with a scheduled fire.
delayed_fire = Table(
    "jobring_delayed_fire",
    metadata,
    Column("id", BigInteger().with_variant(Integer, "sqlite"), primary_key=True, autoincrement=True),
    Column("job_id", Integer, nullable=False),
    Column("job_group", Integer, nullable=False),
    Column("fire_at", BigInteger, nullable=False),  # epoch ms
    Column("executor_param", String(512), nullable=True),
    Column("addresses", Text, nullable=True),  # JSON list, or null: the job's routing
    Column("created_by", String(64), nullable=True),
    Column("created_at", BigInteger, nullable=False),  # epoch ms
    Index("ix_delayed_fire_at", "fire_at"),
    Index("ix_delayed_fire_job", "job_id"),
    sqlite_autoincrement=True,
)

# Workflows (docs/workflows.md). A workflow's current graph is the row of its latest version
# in ``workflow_version``; a run keeps the version it started with.
workflow = Table(
    "jobring_workflow",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("name", String(100), nullable=False),
    Column("job_group", Integer, nullable=False),  # the owning group (who may see and edit it)
    Column("description", String(255), nullable=False, server_default=""),
    Column("version", Integer, nullable=False),
    Column("created_by", String(64), nullable=True),
    Column("created_at", BigInteger, nullable=False),  # epoch ms
    Column("updated_at", BigInteger, nullable=False),  # epoch ms
    Column("managed_by", String(16), nullable=True),  # "code": declared by an executor, read-only
    Index("ix_workflow_group", "job_group"),
    sqlite_autoincrement=True,
)

workflow_version = Table(
    "jobring_workflow_version",
    metadata,
    Column("workflow_id", Integer, primary_key=True, autoincrement=False),
    Column("version", Integer, primary_key=True, autoincrement=False),
    Column("definition", LongText, nullable=False),  # the graph's canonical JSON
    Column("created_by", String(64), nullable=True),
    Column("created_at", BigInteger, nullable=False),
)

# A run's whole state is one JSON document (core.workflow.run_to_json); ``rev`` counts its
# writes: a step is stored only over the revision it was computed from (two admins that apply
# events to the same run cannot both win).
workflow_run = Table(
    "jobring_workflow_run",
    metadata,
    Column("id", BigInteger().with_variant(Integer, "sqlite"), primary_key=True, autoincrement=True),
    Column("workflow_id", Integer, nullable=False),
    Column("version", Integer, nullable=False),
    Column("job_group", Integer, nullable=False),
    Column("status", String(16), nullable=False),
    Column("rev", Integer, nullable=False, server_default="0"),
    Column("state", LongText, nullable=False),
    Column("triggered_by", String(64), nullable=True),
    Column("started_at", BigInteger, nullable=False),
    Column("ended_at", BigInteger, nullable=True),
    # A sub-workflow node's run: the parent run and the node attempt that started it (unique:
    # one child run per attempt, whichever admin fires it); ``params`` the starting context.
    Column("parent_run_id", BigInteger, nullable=True),
    Column("parent_node_run_id", BigInteger, nullable=True),
    Column("params", LongText, nullable=True),
    Index("ix_workflow_run_workflow", "workflow_id", "id"),
    Index("ux_workflow_run_parent_node", "parent_node_run_id", unique=True),
    Index("ix_workflow_run_status", "status"),
    sqlite_autoincrement=True,
)

# A workflow's schedule (docs/workflows.md#scheduling), one row at most per workflow. A fire is
# claimed by moving ``next_fire_at`` on by compare-and-set (one admin wins each instant);
# ``queued_at``: the planned instant of a fire waiting for the running run (overlap queue_one).
workflow_schedule = Table(
    "jobring_workflow_schedule",
    metadata,
    Column("workflow_id", Integer, primary_key=True, autoincrement=False),
    Column("schedule_type", String(16), nullable=False),
    Column("schedule_conf", String(128), nullable=False, server_default=""),
    Column("time_zone", String(64), nullable=True),
    Column("misfire_strategy", String(32), nullable=False, server_default="DO_NOTHING"),
    Column("overlap", String(16), nullable=False, server_default="skip"),
    Column("params", Text, nullable=True),  # the starting context of scheduled runs (JSON object)
    Column("enabled", Integer, nullable=False, server_default="0"),
    Column("next_fire_at", BigInteger, nullable=False, server_default="0"),
    Column("queued_at", BigInteger, nullable=False, server_default="0"),
    Column("last_fire_at", BigInteger, nullable=False, server_default="0"),
    Column("last_result", String(255), nullable=False, server_default=""),
    Column("updated_by", String(64), nullable=True),
    Column("updated_at", BigInteger, nullable=False),
    Column("managed_by", String(16), nullable=True),  # "code": declared with its workflow (r0032)
    Index("ix_workflow_schedule_due", "enabled", "next_fire_at"),
)

# One row per job attempt a workflow run starts: the outbox of the engine's StartJob commands
# (written with the step that emits them) and the link to the run log. ``state``: pending (to
# fire), firing (claimed by ``claimed_by``), running (``log_id`` known), ended.
workflow_node_run = Table(
    "jobring_workflow_node_run",
    metadata,
    Column("id", BigInteger().with_variant(Integer, "sqlite"), primary_key=True, autoincrement=True),
    Column("workflow_run_id", BigInteger, nullable=False),
    Column("node_key", String(64), nullable=False),
    Column("item", Integer, nullable=False, server_default="-1"),  # fan-out item, -1: none
    Column("attempt", Integer, nullable=False),
    Column("job_id", Integer, nullable=False),
    Column("params", String(512), nullable=True),
    Column("timeout_s", Integer, nullable=True),
    Column("state", String(16), nullable=False),
    Column("log_id", BigInteger, nullable=True),
    Column("claimed_by", String(64), nullable=True),
    Column("claimed_at", BigInteger, nullable=True),
    Column("created_at", BigInteger, nullable=False),
    Column("ended_at", BigInteger, nullable=True),
    Column("workflow_id", Integer, nullable=True),  # a sub-workflow attempt's workflow (job_id 0)
    # What the handler added to the context (the callback's workflowContext, JSON), if anything.
    Column("context_added", LongText, nullable=True),
    UniqueConstraint("workflow_run_id", "node_key", "item", "attempt", name="ux_workflow_node_attempt"),
    Index("ix_workflow_node_run_log", "log_id"),
    Index("ix_workflow_node_run_state", "state"),
    sqlite_autoincrement=True,
)

# Named calendars (issue 24): the times jobs must not fire. ``job_group`` None: a global
# calendar (admins write it, every job may use it); else the group's own. ``spec`` is the
# normalised JSON of jobring.core.timing.parse_calendar; ``update_time`` epoch ms.
calendar = Table(
    "jobring_calendar",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("name", String(64), nullable=False),
    Column("job_group", Integer, nullable=True),
    Column("spec", LongText, nullable=False),
    Column("update_time", BigInteger, nullable=False, server_default="0"),
    Column("updated_by", String(64), nullable=True),
    UniqueConstraint("name", name="ux_calendar_name"),
    sqlite_autoincrement=True,
)

# Backfills (issue 24): one row per request. ``instants`` is the JSON list of the runs to start
# in their order ([logical ms, data interval start ms | null], ...); ``started`` counts those
# handed out (advanced by compare-and-set, which keeps the parallelism cap across admins);
# ``claimed_at`` is when the last hand-out happened (a node that died after it leaves instants
# without a run; another node fires them after a grace period). Times epoch ms.
backfill = Table(
    "jobring_backfill",
    metadata,
    Column("id", BigInteger().with_variant(Integer, "sqlite"), primary_key=True, autoincrement=True),
    Column("job_id", Integer, nullable=False),
    Column("job_group", Integer, nullable=False),
    Column("status", String(16), nullable=False),
    Column("request", Text, nullable=False),
    Column("instants", LongText, nullable=False),
    Column("total", Integer, nullable=False),
    Column("parallelism", Integer, nullable=False),
    Column("started", Integer, nullable=False, server_default="0"),
    Column("claimed_at", BigInteger, nullable=True),
    Column("created_by", String(64), nullable=True),
    Column("created_at", BigInteger, nullable=False),
    Column("ended_at", BigInteger, nullable=True),
    Index("ix_backfill_job", "job_id", "id"),
    Index("ix_backfill_status", "status"),
    sqlite_autoincrement=True,
)

# Flow control (issue 22, docs/dispatch.md "Flow control"): one row per run that flow control
# holds, while it waits (``started_ms`` None: its run-log row is ``queued``) or runs (it then
# counts in its scopes until its run-log row ends). ``scopes``: JSON list of scope texts.
flow_run = Table(
    "jobring_flow_run",
    metadata,
    Column("log_id", BigInteger().with_variant(Integer, "sqlite"), primary_key=True, autoincrement=False),
    Column("job_group", Integer, nullable=False),
    Column("job_id", Integer, nullable=False),
    Column("scopes", Text, nullable=False),
    Column("fair_key", String(300), nullable=False),
    Column("priority", SmallInteger, nullable=False),
    Column("enqueued_ms", BigInteger, nullable=False),
    Column("started_ms", BigInteger, nullable=True),
    Index("ix_flow_run_group", "job_group", "started_ms"),
)

# A rate limit's token bucket per scope (jobring.core.flow.ratelimit): level in millionths of
# a token as of ``stamp_ms``.
flow_bucket = Table(
    "jobring_flow_bucket",
    metadata,
    Column("scope", String(300), primary_key=True),
    Column("job_group", Integer, nullable=False),
    Column("level", BigInteger, nullable=False),
    Column("stamp_ms", BigInteger, nullable=False),
    Index("ix_flow_bucket_group", "job_group"),
)

# The round-robin turn of each key that has runs waiting (jobring.core.flow.ordering).
flow_turn = Table(
    "jobring_flow_turn",
    metadata,
    Column("fair_key", String(300), primary_key=True),
    Column("job_group", Integer, nullable=False),
    Column("turn", BigInteger, nullable=False),
    Index("ix_flow_turn_group", "job_group"),
)

# Distributed runs (docs/distributed-jobs.md). One row per parent run (a map / map-reduce
# run, or a sharded run): its join phase and attempt, whether its root task has ended, and
# its children's progress as counters, changed in the same write as the children.
distributed_run = Table(
    "jobring_distributed_run",
    metadata,
    Column("run_id", BigInteger, primary_key=True, autoincrement=False),  # xxl_job_log.id
    Column("job_id", Integer, nullable=False),
    Column("job_group", Integer, nullable=False),
    Column("kind", String(8), nullable=False),  # map, shard, bcast
    Column("phase", String(16), nullable=False),  # core.distributed.ParentPhase
    Column("attempt", Integer, nullable=False, server_default="1"),  # join attempt (user retries)
    Column("root_state", String(16), nullable=False),  # running, succeeded, failed
    Column("root_msg", Text, nullable=True),
    Column("params", String(512), nullable=True),  # the run's parameter (shards see it)
    Column("reduce_task", String(64), nullable=True),  # a broadcast's post hook
    Column("tolerance", String(32), nullable=True),
    Column("max_retries", Integer, nullable=False, server_default="0"),
    Column("total", Integer, nullable=False, server_default="0"),
    Column("succeeded", Integer, nullable=False, server_default="0"),
    Column("failed", Integer, nullable=False, server_default="0"),
    Column("running", Integer, nullable=False, server_default="0"),
    Column("result", LongText, nullable=True),  # the reduce task's result (JSON)
    Column("result_recorded", SmallInteger, nullable=False, server_default="0"),
    Column("created_at", BigInteger, nullable=False),
    Column("ended_at", BigInteger, nullable=True),
    Column("pre_task", String(64), nullable=True),  # a broadcast's pre hook
    Index("ix_distributed_run_phase", "phase"),
)

# The children of distributed runs: shards ("s/<i>"), map sub-tasks (core.distributed
# .mapping keys "r/0.17") and reduce tasks ("reduce:<run>:<attempt>"); unique per run and key,
# so a repeated map call creates nothing twice. Kept out of xxl_job_log: the run list shows
# the parent only. Deleted with their parent run (retention).
subtask = Table(
    "jobring_subtask",
    metadata,
    Column("id", BigInteger().with_variant(Integer, "sqlite"), primary_key=True, autoincrement=True),
    Column("run_id", BigInteger, nullable=False),
    Column("job_group", Integer, nullable=False),
    Column("task_key", String(191), nullable=False),
    Column("task_name", String(64), nullable=False),
    Column("kind", String(8), nullable=False),  # map, shard, reduce
    Column("shard_index", Integer, nullable=False, server_default="0"),
    Column("shard_total", Integer, nullable=False, server_default="0"),
    Column("item", LongText, nullable=True),  # the map item as JSON
    Column("status", String(16), nullable=False),  # core.distributed.TaskState
    Column("attempt", Integer, nullable=False, server_default="0"),
    Column("failures", Integer, nullable=False, server_default="0"),
    Column("losses", Integer, nullable=False, server_default="0"),
    Column("executor_address", String(255), nullable=True),
    Column("result", LongText, nullable=True),  # the handler's return value as JSON
    Column("message", Text, nullable=True),
    Column("created_at", BigInteger, nullable=False),
    Column("dispatched_at", BigInteger, nullable=True),
    Column("ended_at", BigInteger, nullable=True),
    # The admin node that claimed it (while it runs): a node that dies, perhaps between a
    # claim and its send, leaves it to the other nodes (jobring.admin.distributed.pump).
    Column("dispatched_by", String(64), nullable=True),
    Column("log", Text, nullable=True),  # its handler's last log lines (the executor keeps 4 KiB)
    UniqueConstraint("run_id", "task_key", name="ux_subtask_run_key"),
    Index("ix_subtask_run_status", "run_id", "status", "id"),
    Index("ix_subtask_status_executor", "status", "executor_address"),
    sqlite_autoincrement=True,
)

# Overlap policies (issue 24): fires of a job waiting for its runs in progress to end
# (``buffer_one``, ``buffer_all``, ``cancel_other``), oldest first; each keeps its identity
# (job id, planned instant), so a fire waits at most once. Times epoch ms.
overlap_wait = Table(
    "jobring_overlap_wait",
    metadata,
    Column("id", BigInteger().with_variant(Integer, "sqlite"), primary_key=True, autoincrement=True),
    Column("job_id", Integer, nullable=False),
    Column("job_group", Integer, nullable=False),
    Column("planned_time", BigInteger, nullable=False),
    Column("logical_time", BigInteger, nullable=False),
    Column("trigger_type", String(16), nullable=False),
    Column("created_at", BigInteger, nullable=False),
    UniqueConstraint("job_id", "planned_time", name="ux_overlap_wait"),
    sqlite_autoincrement=True,
)

SCHEDULE_LOCK = "schedule_lock"
