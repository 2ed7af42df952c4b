"""Email alarms: one message per recipient (an email target's ``to``, else the job's
``alarm_email``), sent by smtplib in a thread.

Header values never carry a line break: the subject (with the job's description) is put on
one line, and a recipient that is not one address on one line is skipped. Values stored
before single-line fields were enforced (adopted XXL-JOB databases) neither inject a header
nor stop the job's alarms."""

from __future__ import annotations

import asyncio
import logging
import smtplib
from collections.abc import Mapping
from email.message import EmailMessage
from typing import Any

from jobring.admin.alarms.base import ALARM_TITLE, AlarmContext, AlarmOutcome
from jobring.admin.alarms.registry import ChannelTools, TargetError, register_channel
from jobring.admin.alarms.smtp import SmtpConfig, SmtpFactory
from jobring.core.text import one_line, one_line_problem

log = logging.getLogger(__name__)


# Answers that retrying will not change.
_REFUSED = (
    smtplib.SMTPRecipientsRefused,
    smtplib.SMTPSenderRefused,
    smtplib.SMTPAuthenticationError,
    smtplib.SMTPNotSupportedError,
    smtplib.SMTPDataError,
)

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


def is_one_address(value: str) -> bool:
    """``value`` can be a recipient: an address with an "@", no white space, on one line."""
    return "@" in value and len(value) <= 254 and one_line_problem(value) is None and not any(
        ch.isspace() for ch in value)


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
        failure = f"{ALARM_TITLE}: job {ctx.job.id} ({ctx.job.job_desc})"
        msg["Subject"] = one_line(ctx.title if ctx.kind.value != "failure" else failure)
        msg["From"] = one_line(self._config.sender)
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
        given = self._to if self._to is not None else recipients(ctx.job.alarm_email)
        to = [address for address in given if is_one_address(address)]
        if len(to) < len(given):
            log.warning("alarm email for log %s: skipped %d recipient(s) that are not one address on one "
                        "line: %r", ctx.log.id, len(given) - len(to), [a for a in given if a not in to])
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


def _email_config(where: str, raw: Mapping[str, Any]) -> dict[str, Any]:
    to = raw["to"]
    if isinstance(to, str):
        to = recipients(to)
    elif isinstance(to, list) and all(isinstance(a, str) for a in to):
        to = [a.strip() for a in to]
    valid = isinstance(to, list) and to and all(isinstance(a, str) and is_one_address(a) for a in to)
    if not valid:
        raise TargetError(f"{where}.to", "must be a non-empty list of email addresses")
    return {"to": to}


@register_channel("email", required={"to"}, check=_email_config)
def _email(config: Mapping[str, Any], factory: ChannelTools) -> EmailAlarm | None:
    if factory.smtp is None:
        log.warning("email alarm to %s skipped: no SMTP server configured (JOBRING_SMTP_HOST)", config["to"])
        return None
    if factory.smtp_connect is not None:
        return EmailAlarm(factory.smtp, to=list(config["to"]), connect=factory.smtp_connect)
    return EmailAlarm(factory.smtp, to=list(config["to"]))
