"""Names shared by the admin and the executor: the XXL-JOB 2.x vocabulary."""

from __future__ import annotations

from enum import IntEnum, StrEnum


class ScheduleType(StrEnum):
    NONE = "NONE"
    CRON = "CRON"
    FIX_RATE = "FIX_RATE"


class MisfireStrategy(StrEnum):
    DO_NOTHING = "DO_NOTHING"
    FIRE_ONCE_NOW = "FIRE_ONCE_NOW"


class BlockStrategy(StrEnum):
    SERIAL_EXECUTION = "SERIAL_EXECUTION"
    DISCARD_LATER = "DISCARD_LATER"
    COVER_EARLY = "COVER_EARLY"


class GlueType(StrEnum):
    BEAN = "BEAN"
    GLUE_GROOVY = "GLUE_GROOVY"
    GLUE_SHELL = "GLUE_SHELL"
    GLUE_PYTHON = "GLUE_PYTHON"
    GLUE_PHP = "GLUE_PHP"
    GLUE_NODEJS = "GLUE_NODEJS"
    GLUE_POWERSHELL = "GLUE_POWERSHELL"

    @property
    def is_script(self) -> bool:
        return self not in (GlueType.BEAN, GlueType.GLUE_GROOVY)


class RouteStrategy(StrEnum):
    FIRST = "FIRST"
    LAST = "LAST"
    ROUND = "ROUND"
    RANDOM = "RANDOM"
    CONSISTENT_HASH = "CONSISTENT_HASH"
    LEAST_FREQUENTLY_USED = "LEAST_FREQUENTLY_USED"
    LEAST_RECENTLY_USED = "LEAST_RECENTLY_USED"
    FAILOVER = "FAILOVER"
    BUSYOVER = "BUSYOVER"
    SHARDING_BROADCAST = "SHARDING_BROADCAST"


class TriggerType(StrEnum):
    MANUAL = "MANUAL"
    CRON = "CRON"
    FIX_RATE = "FIX_RATE"  # a fixed-rate schedule's fire (jobring; XXL-JOB records these as CRON)
    RETRY = "RETRY"
    PARENT = "PARENT"
    API = "API"
    MISFIRE = "MISFIRE"
    DELAYED = "DELAYED"  # a one-shot run asked for a later instant (jobring)
    WORKFLOW = "WORKFLOW"  # a workflow node's run (jobring)
    BACKFILL = "BACKFILL"  # a backfill's run, standing for a past instant (jobring)


class ManagedBy(StrEnum):
    """Who manages a job (jobring): users only, or also its executor's declarations."""

    CONSOLE = "console"
    CODE = "code"


class HandleCode(IntEnum):
    """Result codes of a run (``handle_code`` / ``trigger_code``); 0 means not known yet."""

    UNKNOWN = 0
    SUCCESS = 200
    FAIL = 500
    TIMEOUT = 502


class AlarmStatus(IntEnum):
    DEFAULT = 0
    LOCKED = -1
    NOT_NEEDED = 1
    SENT = 2
    FAILED = 3


class AddressType(IntEnum):
    AUTO = 0
    MANUAL = 1


class TriggerStatus(IntEnum):
    STOPPED = 0
    RUNNING = 1
