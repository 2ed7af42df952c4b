"""The alarm channel kinds: each channel module registers its own kind here.

A kind is a name (the ``"kind"`` of a target), the keys its targets take, a check that
turns a target's raw settings into its validated config, and a builder that makes the
channel from that config and the shared :class:`ChannelTools` (SMTP server, timeouts, clock;
:class:`~jobring.admin.alarms.targets.ChannelFactory` in the admin). Adding a channel is one
new module that calls :func:`register_channel` (and is imported by the package
``__init__``); nothing shared switches on the kind.

    @register_channel("pager", required={"url"}, check=url_config)
    def _pager(config: Mapping[str, Any], factory: ChannelTools) -> AlarmChannel:
        return PagerAlarm(config["url"], timeout=factory.timeout, transport=factory.transport)
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol
from urllib.parse import urlsplit

from jobring.core.text import one_line_problem
from jobring.errors import JobringError

if TYPE_CHECKING:
    import httpx

    from jobring.admin.alarms.base import AlarmChannel
    from jobring.admin.alarms.outbound import AlarmHttp
    from jobring.admin.alarms.smtp import SmtpConfig, SmtpFactory

NowMs = Callable[[], int]


class ChannelTools(Protocol):
    """What a builder gets besides its target's config: the shared clients and settings.
    A protocol, so the channel modules need not import the factory that implements it."""

    @property
    def http(self) -> AlarmHttp: ...
    @property
    def timeout(self) -> float: ...
    @property
    def transport(self) -> httpx.AsyncBaseTransport | None: ...
    @property
    def now_ms(self) -> NowMs: ...
    @property
    def smtp(self) -> SmtpConfig | None: ...
    @property
    def smtp_connect(self) -> SmtpFactory | None: ...


ConfigCheck = Callable[[str, Mapping[str, Any]], dict[str, Any]]
ChannelBuilder = Callable[[Mapping[str, Any], ChannelTools], "AlarmChannel | None"]


class TargetError(JobringError, ValueError):
    """A target list that cannot be used; ``field`` names the bad part."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


@dataclass(frozen=True)
class ChannelKind:
    """One registered channel kind."""

    name: str
    required: frozenset[str]
    optional: frozenset[str]
    check: ConfigCheck
    build: ChannelBuilder


_KINDS: dict[str, ChannelKind] = {}


def register_channel(
    name: str, *, required: Iterable[str], optional: Iterable[str] = (), check: ConfigCheck
) -> Callable[[ChannelBuilder], ChannelBuilder]:
    """Register the decorated builder as channel kind ``name``. ``check(where, raw)`` gets
    the target's keys (``kind`` excluded, unknown and missing keys already refused) and
    returns its config or raises :class:`TargetError`. A name registers once."""

    def decorate(build: ChannelBuilder) -> ChannelBuilder:
        if name in _KINDS:
            raise ValueError(f"alarm channel kind {name!r} is already registered")
        _KINDS[name] = ChannelKind(name, frozenset(required), frozenset(optional), check, build)
        return build

    return decorate


def unregister_channel(name: str) -> None:
    """Forget channel kind ``name`` (a plug-in unloaded, or a test's kind)."""
    del _KINDS[name]


def channel_kind(name: str) -> ChannelKind | None:
    """The registered kind ``name``, or None."""
    return _KINDS.get(name)


def channel_kinds() -> tuple[str, ...]:
    """The registered kind names, in registration order."""
    return tuple(_KINDS)


def check_url(where: str, value: Any) -> str:
    """``value`` as an http(s) URL of at most 1000 characters; TargetError otherwise."""
    if not isinstance(value, str) or len(value) > 1000:
        raise TargetError(where, "must be a URL of at most 1000 characters")
    if one_line_problem(value) or any(ch.isspace() for ch in value):
        raise TargetError(where, "must be a URL on one line, without spaces")
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise TargetError(where, "must be an http(s) URL")
    return value


def url_config(where: str, raw: Mapping[str, Any]) -> dict[str, Any]:
    """The check of the webhook-like kinds: ``url``, and an optional signing ``secret``."""
    config: dict[str, Any] = {"url": check_url(f"{where}.url", raw["url"])}
    if "secret" in raw:
        secret = raw["secret"]
        if not isinstance(secret, str) or not 1 <= len(secret) <= 256:
            raise TargetError(f"{where}.secret", "must be a string of 1-256 characters")
        config["secret"] = secret
    return config
