"""What an alarm is about, the channel protocol, and the ``Alarmer`` that sends to all targets.

A channel is one configured destination (an email target, a Slack webhook, ...). The
alarmer sends one alarm through the admin-wide channels plus the job's own targets, each
delivery under its own timeout, retrying transient failures with back-off; the combined
outcome is the run's final alarm status (sent / failed / not needed).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC
from enum import Enum, StrEnum
from typing import Protocol

from jobring.admin.store.records import JobGroup, JobInfo, LogEntry
from jobring.core.enums import AlarmStatus

log = logging.getLogger(__name__)

ALARM_TITLE = "Job scheduling center monitor alarm"


class AlarmKind(StrEnum):
    """Why an alarm is sent."""

    FAILURE = "failure"
    RECOVERY = "recovery"
    DEADLINE = "deadline"


_KIND_TITLES = {
    AlarmKind.FAILURE: "Trigger Fail",
    AlarmKind.RECOVERY: "Recovered",
    AlarmKind.DEADLINE: "Deadline missed",
}


@dataclass(frozen=True)
class AlarmContext:
    """One run to alarm about, and why."""

    job: JobInfo
    log: LogEntry
    group: JobGroup | None
    kind: AlarmKind = AlarmKind.FAILURE
    public_url: str | None = None  # the console's base URL, for a link to the run
    note: str | None = None  # e.g. the deadline that was missed

    @property
    def run_url(self) -> str | None:
        """The run's page in the console, when the console's public URL is configured."""
        if not self.public_url:
            return None
        return f"{self.public_url.rstrip('/')}/runs/{self.log.id}"

    @property
    def title(self) -> str:
        """A one-line subject: kind, job and run."""
        return (
            f"[jobring] {_KIND_TITLES[self.kind]}: job {self.job.id} ({self.job.job_desc}), run {self.log.id}"
        )

    def summary_lines(self) -> list[str]:
        """The alarm content as plain lines (the reference's "Alarm Job LogId=..." text)."""
        trigger_time = self.log.trigger_time.replace(tzinfo=UTC).isoformat() if self.log.trigger_time else "-"
        lines = [
            f"Executor group: {self.group.title if self.group else self.job.job_group}"
            + (f" ({self.group.app_name})" if self.group else ""),
            f"Job ID: {self.job.id}",
            f"Job description: {self.job.job_desc}",
            f"Alarm type: {_KIND_TITLES[self.kind]}",
            f"Alarm Job LogId={self.log.id}",
            f"Attempt: {self.log.attempt}",
            f"Executor: {self.log.executor_address or '-'}",
            f"Trigger time: {trigger_time}",
        ]
        if self.note:
            lines.append(self.note)
        if self.kind is AlarmKind.FAILURE:
            if self.log.trigger_code != 200:
                lines += ["TriggerMsg=", self.log.trigger_msg or ""]
            if self.log.handle_code > 0 and self.log.handle_code != 200:
                lines.append(f"HandleCode={self.log.handle_code} HandleMsg={self.log.handle_msg or ''}")
        if self.run_url:
            lines.append(f"Run: {self.run_url}")
        return lines

    @property
    def text(self) -> str:
        return "\n".join([self.title, *self.summary_lines()])


class AlarmOutcome(Enum):
    NOT_APPLICABLE = "not_applicable"  # the channel has nothing to do for this job
    SENT = "sent"
    FAILED = "failed"  # permanent: retrying would not help (bad request, refused)
    TRANSIENT = "transient"  # worth retrying (timeout, connection error, 5xx, 429)


class AlarmChannel(Protocol):
    name: str

    async def send(self, ctx: AlarmContext) -> AlarmOutcome: ...


ChannelsForJob = Callable[[JobInfo], Sequence[AlarmChannel]]


class Alarmer:
    """Sends an alarm through every channel; the result is the run's new alarm_status.

    ``channels`` are the admin-wide ones; ``for_job`` gives a job's own (its targets).
    Each delivery has ``timeout`` seconds; a transient failure is retried ``retries`` times
    after ``backoff_s``, doubling.
    """

    def __init__(
        self,
        channels: Sequence[AlarmChannel] = (),
        *,
        for_job: ChannelsForJob | None = None,
        timeout: float = 10.0,
        retries: int = 2,
        backoff_s: float = 1.0,
        public_url: str | None = None,
    ) -> None:
        self.channels = list(channels)
        self._for_job = for_job
        self._timeout = timeout
        self._retries = retries
        self._backoff_s = backoff_s
        self.public_url = public_url

    def channels_for(self, job: JobInfo) -> list[AlarmChannel]:
        own = list(self._for_job(job)) if self._for_job is not None else []
        return self.channels + own

    async def _deliver(self, channel: AlarmChannel, ctx: AlarmContext) -> AlarmOutcome:
        wait = self._backoff_s
        for attempt in range(self._retries + 1):
            try:
                outcome = await asyncio.wait_for(channel.send(ctx), self._timeout)
            except TimeoutError:
                log.warning(
                    "alarm %s for run %s timed out after %ss", channel.name, ctx.log.id, self._timeout
                )
                outcome = AlarmOutcome.TRANSIENT
            except Exception:
                log.exception("alarm channel %s failed for run %s", channel.name, ctx.log.id)
                return AlarmOutcome.FAILED
            if outcome is not AlarmOutcome.TRANSIENT:
                return outcome
            if attempt < self._retries:
                log.warning(
                    "alarm %s for run %s failed (transient); retry %d in %.1fs",
                    channel.name,
                    ctx.log.id,
                    attempt + 1,
                    wait,
                )
                await asyncio.sleep(wait)
                wait *= 2
        log.error("alarm %s for run %s failed after %d tries", channel.name, ctx.log.id, self._retries + 1)
        return AlarmOutcome.FAILED

    async def alarm(self, ctx: AlarmContext) -> AlarmStatus:
        channels = self.channels_for(ctx.job)
        outcomes = await asyncio.gather(*(self._deliver(c, ctx) for c in channels))
        if AlarmOutcome.FAILED in outcomes:
            return AlarmStatus.FAILED
        if AlarmOutcome.SENT in outcomes:
            return AlarmStatus.SENT
        return AlarmStatus.NOT_NEEDED
