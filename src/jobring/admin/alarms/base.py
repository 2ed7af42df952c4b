"""What an alarm is about, the channel protocol, and the composite that sends to all."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Protocol

from jobring.admin.store.records import JobGroup, JobInfo, LogEntry
from jobring.config import AdminSettings
from jobring.core.enums import AlarmStatus

log = logging.getLogger(__name__)

ALARM_TITLE = "Job scheduling center monitor alarm"


@dataclass(frozen=True)
class AlarmContext:
    """One failed run to alarm about."""

    job: JobInfo
    log: LogEntry
    group: JobGroup | None

    def summary_lines(self) -> list[str]:
        """The alarm content as plain lines (the reference's "Alarm Job LogId=..." text)."""
        lines = [
            f"Executor group: {self.group.title if self.group else self.job.job_group}",
            f"Job ID: {self.job.id}",
            f"Job description: {self.job.job_desc}",
            "Alarm type: Trigger Fail",
            f"Alarm Job LogId={self.log.id}",
        ]
        if self.log.trigger_code != 200:
            lines += ["TriggerMsg=", self.log.trigger_msg or ""]
        if self.log.handle_code > 0 and self.log.handle_code != 200:
            lines.append(f"HandleCode={self.log.handle_code} HandleMsg={self.log.handle_msg or ''}")
        return lines


class AlarmOutcome(Enum):
    NOT_APPLICABLE = "not_applicable"  # the channel has nothing to do for this job
    SENT = "sent"
    FAILED = "failed"


class AlarmChannel(Protocol):
    name: str

    async def send(self, ctx: AlarmContext) -> AlarmOutcome: ...


class Alarmer:
    """Sends an alarm through every channel; the result is the log's new alarm_status."""

    def __init__(self, channels: Sequence[AlarmChannel]) -> None:
        self.channels = list(channels)

    async def alarm(self, ctx: AlarmContext) -> AlarmStatus:
        outcomes: list[AlarmOutcome] = []
        for channel in self.channels:
            try:
                outcomes.append(await channel.send(ctx))
            except Exception:
                log.exception("alarm channel %s failed for log %s", channel.name, ctx.log.id)
                outcomes.append(AlarmOutcome.FAILED)
        if AlarmOutcome.FAILED in outcomes:
            return AlarmStatus.FAILED
        if AlarmOutcome.SENT in outcomes:
            return AlarmStatus.SENT
        return AlarmStatus.NOT_NEEDED


def alarmer_from_settings(settings: AdminSettings) -> Alarmer:
    """The channels the settings configure (none: every alarm is "not needed")."""
    from jobring.admin.alarms.mail import EmailAlarm, SmtpConfig
    from jobring.admin.alarms.webhook import WebhookAlarm

    channels: list[AlarmChannel] = []
    if settings.smtp_host:
        channels.append(EmailAlarm(SmtpConfig(
            host=settings.smtp_host,
            port=settings.smtp_port,
            username=settings.smtp_username,
            password=settings.smtp_password,
            sender=settings.smtp_from or (settings.smtp_username or "jobring@localhost"),
            starttls=settings.smtp_starttls,
            ssl=settings.smtp_ssl,
            timeout=settings.alarm_timeout,
        )))
    if settings.alarm_webhook_url:
        channels.append(WebhookAlarm(settings.alarm_webhook_url, timeout=settings.alarm_timeout))
    return Alarmer(channels)
