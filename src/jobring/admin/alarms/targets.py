"""Alarm targets: a channel kind plus its settings, parsed and validated, and the factory
that turns a target into a channel.

A job's targets are a JSON list in ``xxl_job_info.alarm_targets``; its ``alarm_email``
(XXL-JOB's field) counts as one email target. Admin-wide default targets come from
``JOBRING_ALARM_DEFAULT_TARGETS`` (the same JSON list, or a TOML array of tables).

    [{"kind": "email", "to": ["ops@example.com"]},
     {"kind": "webhook", "url": "https://hooks.example.com/jobring"},
     {"kind": "slack", "url": "https://hooks.slack.com/services/..."},
     {"kind": "dingtalk", "url": "https://oapi.dingtalk.com/robot/send?access_token=...", "secret": "SEC..."},
     {"kind": "wecom", "url": "https://qyapi.weixin.qq.com/cgi-bin/webhook/send?key=..."},
     {"kind": "feishu", "url": "https://open.feishu.cn/open-apis/bot/v2/hook/...", "secret": "..."}]
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import httpx
import orjson

from jobring.admin.alarms.base import AlarmChannel
from jobring.admin.alarms.chat import DingTalkAlarm, FeishuAlarm, NowMs, SlackAlarm, WeComAlarm, _wall_ms
from jobring.admin.alarms.mail import EmailAlarm, SmtpConfig, recipients
from jobring.admin.alarms.webhook import WebhookAlarm
from jobring.admin.store.records import JobInfo

if TYPE_CHECKING:
    from jobring.config import AdminSettings

log = logging.getLogger(__name__)

MAX_TARGETS = 20
SECRET_MASK = "******"
# kind -> (required keys, optional keys)
KINDS: dict[str, tuple[frozenset[str], frozenset[str]]] = {
    "email": (frozenset({"to"}), frozenset()),
    "webhook": (frozenset({"url"}), frozenset()),
    "slack": (frozenset({"url"}), frozenset()),
    "dingtalk": (frozenset({"url"}), frozenset({"secret"})),
    "wecom": (frozenset({"url"}), frozenset()),
    "feishu": (frozenset({"url"}), frozenset({"secret"})),
}


class TargetError(ValueError):
    """A target list that cannot be used; ``field`` names the bad part."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


@dataclass(frozen=True)
class AlarmTarget:
    kind: str
    config: Mapping[str, Any] = field(default_factory=dict)

    def as_dict(self, *, mask_secrets: bool = False) -> dict[str, Any]:
        out: dict[str, Any] = {"kind": self.kind, **self.config}
        if mask_secrets and "secret" in out:
            out["secret"] = SECRET_MASK
        return out


def _check_url(where: str, value: Any) -> str:
    if not isinstance(value, str) or len(value) > 1000:
        raise TargetError(where, "must be a URL of at most 1000 characters")
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise TargetError(where, "must be an http(s) URL")
    return value


def _check_target(where: str, raw: Any) -> AlarmTarget:
    if not isinstance(raw, Mapping):
        raise TargetError(where, "each target must be an object with a 'kind'")
    kind = raw.get("kind")
    if kind not in KINDS:
        raise TargetError(f"{where}.kind", f"unknown alarm channel {kind!r} (one of {', '.join(KINDS)})")
    required, optional = KINDS[kind]
    keys = set(raw) - {"kind"}
    if missing := required - keys:
        raise TargetError(where, f"{kind} target needs {', '.join(sorted(missing))}")
    if unknown := keys - required - optional:
        raise TargetError(where, f"{kind} target has unknown key(s) {', '.join(sorted(unknown))}")
    config: dict[str, Any] = {}
    if kind == "email":
        to = raw["to"]
        if isinstance(to, str):
            to = recipients(to)
        if (
            not isinstance(to, list)
            or not to
            or not all(isinstance(a, str) and "@" in a and len(a) <= 254 for a in to)
        ):
            raise TargetError(f"{where}.to", "must be a non-empty list of email addresses")
        config["to"] = to
    else:
        config["url"] = _check_url(f"{where}.url", raw["url"])
    if "secret" in raw:
        secret = raw["secret"]
        if not isinstance(secret, str) or not 1 <= len(secret) <= 256:
            raise TargetError(f"{where}.secret", "must be a string of 1-256 characters")
        config["secret"] = secret
    return AlarmTarget(kind, config)


def parse_targets(value: str | Sequence[Any] | None, where: str = "alarm_targets") -> list[AlarmTarget]:
    """A target list from JSON text or already-parsed data; TargetError when invalid."""
    if value is None or value == "":
        return []
    data: Any = value
    if isinstance(value, str):
        try:
            data = orjson.loads(value)
        except orjson.JSONDecodeError as exc:
            raise TargetError(where, f"not valid JSON: {exc}") from None
    if not isinstance(data, list):
        raise TargetError(where, "must be a list of targets")
    if len(data) > MAX_TARGETS:
        raise TargetError(where, f"at most {MAX_TARGETS} targets")
    return [_check_target(f"{where}.{i}", item) for i, item in enumerate(data)]


def dump_targets(targets: Sequence[AlarmTarget]) -> str | None:
    """The JSON text stored in ``alarm_targets`` (None for no target)."""
    return orjson.dumps([t.as_dict() for t in targets]).decode() if targets else None


def job_targets(job: JobInfo) -> list[AlarmTarget]:
    """The job's targets: ``alarm_targets`` plus ``alarm_email`` as one email target. A stored
    list that no longer parses is logged and skipped (it was validated when written)."""
    try:
        targets = parse_targets(job.alarm_targets)
    except TargetError as exc:
        log.error("job %s: unusable alarm_targets: %s", job.id, exc)
        targets = []
    emails = recipients(job.alarm_email)
    if emails:
        targets.append(AlarmTarget("email", {"to": emails}))
    return targets


@dataclass
class ChannelFactory:
    """Makes channels from targets; shared settings (SMTP, timeouts, clock) come from here."""

    smtp: SmtpConfig | None = None
    timeout: float = 10.0
    transport: httpx.AsyncBaseTransport | None = None
    now_ms: NowMs = _wall_ms
    smtp_connect: Callable[[SmtpConfig], Any] | None = None

    @classmethod
    def from_settings(cls, settings: AdminSettings) -> ChannelFactory:
        smtp = None
        if settings.smtp_host:
            smtp = SmtpConfig(
                host=settings.smtp_host,
                port=settings.smtp_port,
                username=settings.smtp_username,
                password=settings.smtp_password,
                sender=settings.smtp_from or (settings.smtp_username or "jobring@localhost"),
                starttls=settings.smtp_starttls,
                ssl=settings.smtp_ssl,
                timeout=settings.alarm_timeout,
            )
        return cls(smtp=smtp, timeout=settings.alarm_timeout)

    def channel_of(self, kind: str, config: Mapping[str, Any]) -> AlarmChannel | None:
        return self.channel(_check_target("target", {"kind": kind, **config}))

    def channel(self, target: AlarmTarget) -> AlarmChannel | None:
        """The channel of one target; None for email when no SMTP server is configured."""
        cfg = target.config
        http = {"timeout": self.timeout, "transport": self.transport}
        if target.kind == "email":
            if self.smtp is None:
                log.warning(
                    "email alarm to %s skipped: no SMTP server configured (JOBRING_SMTP_HOST)", cfg["to"]
                )
                return None
            if self.smtp_connect is not None:
                return EmailAlarm(self.smtp, to=list(cfg["to"]), connect=self.smtp_connect)
            return EmailAlarm(self.smtp, to=list(cfg["to"]))
        if target.kind == "webhook":
            return WebhookAlarm(cfg["url"], **http)  # type: ignore[arg-type]
        if target.kind == "slack":
            return SlackAlarm(cfg["url"], **http)  # type: ignore[arg-type]
        if target.kind == "wecom":
            return WeComAlarm(cfg["url"], **http)  # type: ignore[arg-type]
        if target.kind == "dingtalk":
            return DingTalkAlarm(cfg["url"], cfg.get("secret"), now_ms=self.now_ms, **http)  # type: ignore[arg-type]
        if target.kind == "feishu":
            return FeishuAlarm(cfg["url"], cfg.get("secret"), now_ms=self.now_ms, **http)  # type: ignore[arg-type]
        raise TargetError("kind", f"unknown alarm channel {target.kind!r}")

    def for_job(self, job: JobInfo) -> list[AlarmChannel]:
        return [c for c in (self.channel(t) for t in job_targets(job)) if c is not None]
