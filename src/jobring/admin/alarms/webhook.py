"""Webhook alarms: a JSON POST describing the failed run to one configured URL."""

from __future__ import annotations

import logging
from typing import Any

import httpx

from jobring.admin.alarms.base import ALARM_TITLE, AlarmContext, AlarmOutcome

log = logging.getLogger(__name__)


def payload(ctx: AlarmContext) -> dict[str, Any]:
    """The webhook body: the run's identity, codes and messages, plus a readable text."""
    return {
        "title": ALARM_TITLE,
        "jobId": ctx.job.id,
        "jobDesc": ctx.job.job_desc,
        "jobGroup": ctx.job.job_group,
        "groupTitle": ctx.group.title if ctx.group else None,
        "logId": ctx.log.id,
        "executorAddress": ctx.log.executor_address,
        "triggerTime": ctx.log.trigger_time.isoformat() + "Z" if ctx.log.trigger_time else None,
        "triggerCode": ctx.log.trigger_code,
        "triggerMsg": ctx.log.trigger_msg,
        "handleCode": ctx.log.handle_code,
        "handleMsg": ctx.log.handle_msg,
        "text": "\n".join(ctx.summary_lines()),
    }


class WebhookAlarm:
    name = "webhook"

    def __init__(
        self, url: str, *, timeout: float = 10.0, transport: httpx.AsyncBaseTransport | None = None
    ) -> None:
        self._url = url
        self._timeout = timeout
        self._transport = transport

    async def send(self, ctx: AlarmContext) -> AlarmOutcome:
        try:
            async with httpx.AsyncClient(timeout=self._timeout, transport=self._transport) as http:
                response = await http.post(self._url, json=payload(ctx))
        except httpx.HTTPError as exc:
            log.error("alarm webhook for log %s failed: %s: %s", ctx.log.id, type(exc).__name__, exc)
            return AlarmOutcome.FAILED
        if not response.is_success:
            log.error("alarm webhook for log %s answered HTTP %s", ctx.log.id, response.status_code)
            return AlarmOutcome.FAILED
        return AlarmOutcome.SENT
