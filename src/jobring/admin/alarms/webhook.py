"""Webhook alarms: a JSON POST describing the run to one configured URL."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from jobring.admin.alarms.base import ALARM_TITLE, AlarmContext, AlarmOutcome
from jobring.admin.alarms.outbound import AlarmHttp
from jobring.admin.alarms.registry import ChannelTools, register_channel, url_config


def payload(ctx: AlarmContext) -> dict[str, Any]:
    """The webhook body: the run's identity, codes and messages, plus a readable text."""
    return {
        "title": ALARM_TITLE,
        "kind": ctx.kind.value,
        "jobId": ctx.job.id,
        "jobDesc": ctx.job.job_desc,
        "jobGroup": ctx.job.job_group,
        "groupTitle": ctx.group.title if ctx.group else None,
        "appName": ctx.group.app_name if ctx.group else None,
        "logId": ctx.log.id,
        "attempt": ctx.log.attempt,
        "executorAddress": ctx.log.executor_address,
        "triggerTime": ctx.log.trigger_time.isoformat() + "Z" if ctx.log.trigger_time else None,
        "triggerCode": ctx.log.trigger_code,
        "triggerMsg": ctx.log.trigger_msg,
        "handleCode": ctx.log.handle_code,
        "handleMsg": ctx.log.handle_msg,
        "runUrl": ctx.run_url,
        "text": "\n".join(ctx.summary_lines()),
    }


class WebhookAlarm:
    name = "webhook"

    def __init__(self, url: str, http: AlarmHttp | None = None) -> None:
        self.url = url
        self._http = http or AlarmHttp()

    async def send(self, ctx: AlarmContext) -> AlarmOutcome:
        return await self._http.post_json(self.name, self.url, payload(ctx))


@register_channel("webhook", required={"url"}, check=url_config)
def _webhook(config: Mapping[str, Any], factory: ChannelTools) -> WebhookAlarm:
    return WebhookAlarm(config["url"], factory.http)
