"""Email alarms: one message per recipient (an email target's ``to``, else the job's
``alarm_email``), sent by smtplib in a thread."""

from __future__ import annotations

import asyncio
import logging
import smtplib
from collections.abc import Callable
from dataclasses import dataclass
from email.message import EmailMessage

from jobring.admin.alarms.base import ALARM_TITLE, AlarmContext, AlarmOutcome

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class SmtpConfig:
    host: str
    port: int = 25
    username: str | None = None
    password: str | None = None
    sender: str = "jobring@localhost"
    starttls: bool = False
    ssl: bool = False
    timeout: float = 10.0


# Answers that retrying will not change.
_REFUSED = (
    smtplib.SMTPRecipientsRefused,
    smtplib.SMTPSenderRefused,
    smtplib.SMTPAuthenticationError,
    smtplib.SMTPNotSupportedError,
    smtplib.SMTPDataError,
)

SmtpFactory = Callable[[SmtpConfig], smtplib.SMTP]


def _connect(config: SmtpConfig) -> smtplib.SMTP:
    if config.ssl:
        return smtplib.SMTP_SSL(config.host, config.port, timeout=config.timeout)
    return smtplib.SMTP(config.host, config.port, timeout=config.timeout)


def recipients(alarm_email: str | None) -> list[str]:
    """The distinct addresses of a comma-separated ``alarm_email``, in order."""
    seen: dict[str, None] = {}
    for part in (alarm_email or "").split(","):
        if part.strip():
            seen.setdefault(part.strip(), None)
    return list(seen)


class EmailAlarm:
    name = "email"

    def __init__(
        self, config: SmtpConfig, *, connect: SmtpFactory = _connect, to: list[str] | None = None
    ) -> None:
        self._config = config
        self._connect = connect
        self._to = to

    def _message(self, ctx: AlarmContext, to: str) -> EmailMessage:
        msg = EmailMessage()
        msg["Subject"] = (
            ctx.title
            if ctx.kind.value != "failure"
            else (f"{ALARM_TITLE}: job {ctx.job.id} ({ctx.job.job_desc})")
        )
        msg["From"] = self._config.sender
        msg["To"] = to
        msg.set_content("\n".join(ctx.summary_lines()))
        return msg

    def _send_all(self, messages: list[EmailMessage]) -> None:
        with self._connect(self._config) as smtp:
            if self._config.starttls:
                smtp.starttls()
            if self._config.username:
                smtp.login(self._config.username, self._config.password or "")
            for message in messages:
                smtp.send_message(message)

    async def send(self, ctx: AlarmContext) -> AlarmOutcome:
        to = self._to if self._to is not None else recipients(ctx.job.alarm_email)
        if not to:
            return AlarmOutcome.NOT_APPLICABLE
        messages = [self._message(ctx, address) for address in to]
        try:
            await asyncio.to_thread(self._send_all, messages)
        except _REFUSED as exc:
            log.error("alarm email for log %s to %s refused: %s", ctx.log.id, to, exc)
            return AlarmOutcome.FAILED
        except OSError as exc:  # connection trouble (SMTPException is an OSError too)
            log.warning("alarm email for log %s to %s failed: %s", ctx.log.id, to, exc)
            return AlarmOutcome.TRANSIENT
        return AlarmOutcome.SENT
