"""Per-job workers: queue, block strategies, timeout, kill (interface; implementation follows)."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping

from jobring.executor.context import JobHandler
from jobring.executor.runlog import RunLog
from jobring.protocol.models import HandleCallbackParam, ReturnT, TriggerParam

ReportFn = Callable[[HandleCallbackParam], None]


class JobRunner:
    def __init__(
        self,
        handlers: Mapping[str, JobHandler],
        runlog: RunLog,
        report: ReportFn,
        *,
        glue_enabled: bool = False,
        idle_timeout_s: float = 90.0,
        max_handle_msg: int = 15000,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        raise NotImplementedError

    async def run(self, param: TriggerParam) -> ReturnT:
        raise NotImplementedError

    def is_idle(self, job_id: int) -> bool:
        raise NotImplementedError

    async def kill(self, job_id: int) -> ReturnT:
        raise NotImplementedError

    def running_count(self) -> int:
        raise NotImplementedError

    async def close(self, timeout: float = 10.0) -> None:  # noqa: ASYNC109 - agreed interface
        raise NotImplementedError
