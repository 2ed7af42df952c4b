"""Chat alarm channels: Slack, DingTalk, WeCom and Feishu/Lark webhooks, each in its
documented message shape (and signature, where the robot has a signing secret), POSTed
through :class:`~jobring.admin.alarms.outbound.AlarmHttp` (the alarm address policy)."""

from __future__ import annotations

import base64
import hashlib
import hmac
import time
from collections.abc import Mapping
from typing import Any
from urllib.parse import quote_plus

from jobring.admin.alarms.base import AlarmContext, AlarmOutcome
from jobring.admin.alarms.outbound import AlarmHttp
from jobring.admin.alarms.registry import ChannelTools, NowMs, register_channel, url_config


def _wall_ms() -> int:
    return time.time_ns() // 1_000_000


def _markdown(ctx: AlarmContext) -> str:
    lines = [f"**{ctx.title}**", ""]
    lines += [f"- {line}" for line in ctx.summary_lines() if not line.startswith("Run: ")]
    if ctx.run_url:
        lines += ["", f"[Open the run]({ctx.run_url})"]
    return "\n".join(lines)


class _HttpChannel:
    name = "http"

    def __init__(self, url: str, http: AlarmHttp | None = None) -> None:
        self.url = url
        self._http = http or AlarmHttp()

    async def _post(self, url: str, body: dict[str, Any], error_key: str | None = None) -> AlarmOutcome:
        return await self._http.post_json(self.name, url, body, error_key=error_key)


class SlackAlarm(_HttpChannel):
    """Slack incoming webhook: ``{"text": ..., "blocks": [...]}`` (text is the fallback)."""

    name = "slack"

    def body(self, ctx: AlarmContext) -> dict[str, Any]:
        blocks: list[dict[str, Any]] = [
            {"type": "header", "text": {"type": "plain_text", "text": ctx.title[:150]}},
            {"type": "section", "text": {"type": "mrkdwn", "text": "\n".join(ctx.summary_lines())[:3000]}},
        ]
        if ctx.run_url:
            blocks.append(
                {
                    "type": "actions",
                    "elements": [
                        {
                            "type": "button",
                            "text": {"type": "plain_text", "text": "Open the run"},
                            "url": ctx.run_url,
                        }
                    ],
                }
            )
        return {"text": ctx.text, "blocks": blocks}

    async def send(self, ctx: AlarmContext) -> AlarmOutcome:
        return await self._post(self.url, self.body(ctx))


def dingtalk_sign(timestamp_ms: int, secret: str) -> str:
    """DingTalk robot signature: base64(HmacSHA256(secret, "timestamp\\nsecret")), URL-encoded."""
    digest = hmac.new(secret.encode(), f"{timestamp_ms}\n{secret}".encode(), hashlib.sha256).digest()
    return quote_plus(base64.b64encode(digest).decode())


class _SignedChannel(_HttpChannel):
    """A robot whose messages are signed with a secret and the current time."""

    def __init__(
        self, url: str, secret: str | None = None, *, now_ms: NowMs = _wall_ms, http: AlarmHttp | None = None
    ) -> None:
        super().__init__(url, http)
        self._secret = secret
        self._now_ms = now_ms


class DingTalkAlarm(_SignedChannel):
    """DingTalk custom robot: markdown message; with a secret, ``timestamp`` and ``sign``
    query parameters are added to the robot's URL."""

    name = "dingtalk"

    def signed_url(self) -> str:
        if not self._secret:
            return self.url
        stamp = self._now_ms()
        joiner = "&" if "?" in self.url else "?"
        return f"{self.url}{joiner}timestamp={stamp}&sign={dingtalk_sign(stamp, self._secret)}"

    def body(self, ctx: AlarmContext) -> dict[str, Any]:
        return {"msgtype": "markdown", "markdown": {"title": ctx.title[:64], "text": _markdown(ctx)}}

    async def send(self, ctx: AlarmContext) -> AlarmOutcome:
        return await self._post(self.signed_url(), self.body(ctx), error_key="errcode")


class WeComAlarm(_HttpChannel):
    """WeCom (WeChat Work) group robot: ``{"msgtype": "markdown", "markdown": {"content": ...}}``."""

    name = "wecom"

    def body(self, ctx: AlarmContext) -> dict[str, Any]:
        # WeCom markdown content is limited to 4096 bytes.
        return {
            "msgtype": "markdown",
            "markdown": {"content": _markdown(ctx).encode()[:4000].decode(errors="ignore")},
        }

    async def send(self, ctx: AlarmContext) -> AlarmOutcome:
        return await self._post(self.url, self.body(ctx), error_key="errcode")


def feishu_sign(timestamp_s: int, secret: str) -> str:
    """Feishu/Lark bot signature: base64(HmacSHA256(key="timestamp\\nsecret", msg=""))."""
    digest = hmac.new(f"{timestamp_s}\n{secret}".encode(), b"", hashlib.sha256).digest()
    return base64.b64encode(digest).decode()


class FeishuAlarm(_SignedChannel):
    """Feishu/Lark custom bot: a text message, with ``timestamp`` (seconds) and ``sign``
    in the body when the bot has a signing secret."""

    name = "feishu"

    def body(self, ctx: AlarmContext) -> dict[str, Any]:
        body: dict[str, Any] = {"msg_type": "text", "content": {"text": ctx.text}}
        if self._secret:
            stamp = self._now_ms() // 1000
            body = {"timestamp": str(stamp), "sign": feishu_sign(stamp, self._secret), **body}
        return body

    async def send(self, ctx: AlarmContext) -> AlarmOutcome:
        return await self._post(self.url, self.body(ctx), error_key="code")


@register_channel("slack", required={"url"}, check=url_config)
def _slack(config: Mapping[str, Any], factory: ChannelTools) -> SlackAlarm:
    return SlackAlarm(config["url"], factory.http)


@register_channel("dingtalk", required={"url"}, optional={"secret"}, check=url_config)
def _dingtalk(config: Mapping[str, Any], factory: ChannelTools) -> DingTalkAlarm:
    return DingTalkAlarm(config["url"], config.get("secret"), now_ms=factory.now_ms, http=factory.http)


@register_channel("wecom", required={"url"}, check=url_config)
def _wecom(config: Mapping[str, Any], factory: ChannelTools) -> WeComAlarm:
    return WeComAlarm(config["url"], factory.http)


@register_channel("feishu", required={"url"}, optional={"secret"}, check=url_config)
def _feishu(config: Mapping[str, Any], factory: ChannelTools) -> FeishuAlarm:
    return FeishuAlarm(config["url"], config.get("secret"), now_ms=factory.now_ms, http=factory.http)
