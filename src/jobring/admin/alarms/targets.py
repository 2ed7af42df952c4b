"""Alarm targets: a channel kind plus its settings, parsed and validated by the kind's
registered check, and the factory that turns a target into a channel through the kind's
registered builder (see :mod:`jobring.admin.alarms.registry`).

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
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx
import orjson

from jobring.admin.alarms.base import AlarmChannel
from jobring.admin.alarms.chat import _wall_ms
from jobring.admin.alarms.mail import recipients
from jobring.admin.alarms.outbound import AlarmHttp, Resolver, system_resolve
from jobring.admin.alarms.registry import NowMs, channel_kind, channel_kinds
from jobring.admin.alarms.registry import TargetError as TargetError  # where callers import it from
from jobring.admin.alarms.smtp import SmtpConfig, SmtpFactory
from jobring.admin.store.records import JobInfo
from jobring.core.addresses import AlarmTargetPolicy
from jobring.core.masking import MASK, is_secret_key, is_url_key, mask_url

log = logging.getLogger(__name__)

MAX_TARGETS = 20


@dataclass(frozen=True)
class AlarmTarget:
    kind: str
    config: Mapping[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, **self.config}


def _check_target(where: str, raw: Any) -> AlarmTarget:
    if not isinstance(raw, Mapping):
        raise TargetError(where, "each target must be an object with a 'kind'")
    name = raw.get("kind")
    kind = channel_kind(name) if isinstance(name, str) else None
    if kind is None:
        raise TargetError(f"{where}.kind",
                          f"unknown alarm channel {name!r} (one of {', '.join(channel_kinds())})")
    keys = set(raw) - {"kind"}
    if missing := kind.required - keys:
        raise TargetError(where, f"{kind.name} target needs {', '.join(sorted(missing))}")
    if unknown := keys - kind.required - kind.optional:
        raise TargetError(where, f"{kind.name} target has unknown key(s) {', '.join(sorted(unknown))}")
    return AlarmTarget(kind.name, kind.check(where, {k: v for k, v in raw.items() if k != "kind"}))


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


def _masked_keys(target: AlarmTarget) -> list[str]:
    """The keys of ``target`` whose value is a mask sent back (a secret, a masked URL)."""
    return [k for k, v in target.config.items() if isinstance(v, str) and MASK in v
            and ((is_secret_key(k) and v == MASK) or (is_url_key(k) and mask_url(v) == v))]


def _same_target(sent: AlarmTarget, stored: AlarmTarget) -> bool:
    if sent.kind != stored.kind:
        return False
    return all(isinstance(stored.config.get(k), str) and v in (stored.config[k], mask_url(stored.config[k]))
               for k, v in sent.config.items() if is_url_key(k))


def restore_masked(sent: Sequence[AlarmTarget], stored: Sequence[AlarmTarget],
                   where: str = "alarm_targets") -> list[AlarmTarget]:
    """``sent`` (a list a client got masked and sends back) with each masked value replaced by
    the stored target's real one, so that an edit never overwrites a secret with its mask.
    A sent target matches the stored one at its index, else the first of its kind with the same
    (or same masked) URLs; TargetError for a masked value that belongs to no stored target."""
    out: list[AlarmTarget] = []
    for i, target in enumerate(sent):
        keys = _masked_keys(target)
        if keys:
            ordered = [stored[i]] if i < len(stored) else []
            match = next((s for s in [*ordered, *stored] if _same_target(target, s)), None)
            if match is None:
                raise TargetError(f"{where}.{i}.{keys[0]}", "a masked value must belong to a stored "
                                  "target of this job (send the real value)")
            target = AlarmTarget(target.kind, {**target.config, **{k: match.config[k] for k in keys}})
        out.append(target)
    return out


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
    """Makes channels from targets; shared settings (SMTP, timeouts, clock, the alarm address
    policy) come from here. ``transport`` and ``resolve`` are for tests."""

    smtp: SmtpConfig | None = None
    timeout: float = 10.0
    transport: httpx.AsyncBaseTransport | None = None
    now_ms: NowMs = _wall_ms
    smtp_connect: SmtpFactory | None = None
    policy: AlarmTargetPolicy = field(default_factory=AlarmTargetPolicy)
    resolve: Resolver = system_resolve

    @property
    def http(self) -> AlarmHttp:
        """The HTTP client of webhook-like channels: checks and pins every target's address."""
        return AlarmHttp(self.policy, self.timeout, self.transport, self.resolve)

    def channel_of(self, kind: str, config: Mapping[str, Any]) -> AlarmChannel | None:
        return self.channel(_check_target("target", {"kind": kind, **config}))

    def channel(self, target: AlarmTarget) -> AlarmChannel | None:
        """The channel of one target; None when its kind cannot send here (email without
        an SMTP server)."""
        kind = channel_kind(target.kind)
        if kind is None:
            raise TargetError("kind", f"unknown alarm channel {target.kind!r}")
        return kind.build(target.config, self)

    def for_job(self, job: JobInfo) -> list[AlarmChannel]:
        return [c for c in (self.channel(t) for t in job_targets(job)) if c is not None]
