"""A job's or a group's flow settings, and what they make of one run.

The admin stores the settings as one JSON object per job and per group (``flow``; None: no
flow control at all, and the fire path asks nothing more). :func:`run_flow` turns the
settings of a run's job and group into the run's scopes, priority, limits and rates, the
input of :func:`jobring.core.flow.admission.admit`.

Fields (all optional):

- ``max_concurrent_runs``: runs of the job (or of every job of the group) at a time;
- ``concurrency_key``: a template (:mod:`jobring.core.templating`) rendered per run, e.g.
  ``{{params.tenant}}``; ``key_limit``: runs at a time per rendered key;
- ``on_limit``: ``queue`` (default), ``skip`` or ``cancel_oldest``, for every limit above;
- ``rate_limit`` starts per ``rate_period`` (``second``, ``minute`` or ``hour``): per key when
  a key is set, else per job (group);
- ``priority`` 1-3 (a job's wins over its group's; default 2).

A template reads ``params`` (the run's parameter as a JSON object, or its ``k=v`` pairs
separated by ``&``, ``,``, ``;`` or blanks), ``param`` (the parameter's text), ``job_id`` and
``group_id``.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from jobring.core.expression import ExpressionError, JsonValue, Value
from jobring.core.flow.ratelimit import MAX_RATE, RateLimit
from jobring.core.flow.scopes import (
    DEFAULT_PRIORITY,
    MAX_CONCURRENCY,
    MAX_KEY_LENGTH,
    PRIORITIES,
    ConcurrencyLimit,
    FlowError,
    OnLimit,
    Scope,
    ScopeKind,
    run_scopes,
)
from jobring.core.templating import Template, parse_template

__all__ = [
    "MAX_TEMPLATE_LENGTH",
    "RATE_PERIODS",
    "FlowSettings",
    "RunFlow",
    "parse_flow",
    "run_flow",
    "scope_limits",
    "template_variables",
]

RATE_PERIODS: Mapping[str, int] = {"second": 1_000, "minute": 60_000, "hour": 3_600_000}
MAX_TEMPLATE_LENGTH = 500
_PAIR = re.compile(r"([A-Za-z_][A-Za-z0-9_.-]*)=([^&,;\s]*)")


@dataclass(frozen=True, slots=True)
class FlowSettings:
    """The flow settings of one job or one group (see the module docstring)."""

    max_concurrent_runs: int | None = None
    concurrency_key: str | None = None
    key_limit: int | None = None
    on_limit: OnLimit = OnLimit.QUEUE
    rate_limit: int | None = None
    rate_period: str = "second"
    priority: int | None = None
    template: Template | None = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        for name in ("max_concurrent_runs", "key_limit"):
            value = getattr(self, name)
            if value is not None and not (type(value) is int and 1 <= value <= MAX_CONCURRENCY):
                raise FlowError(name, f"must be a whole number between 1 and {MAX_CONCURRENCY}")
        rate = self.rate_limit
        if rate is not None and not (type(rate) is int and 1 <= rate <= MAX_RATE):
            raise FlowError("rate_limit", f"must be a whole number between 1 and {MAX_RATE}")
        if self.rate_period not in RATE_PERIODS:
            raise FlowError("rate_period", f"must be one of {', '.join(RATE_PERIODS)}")
        if self.priority is not None and self.priority not in PRIORITIES:
            raise FlowError("priority", "must be 1 (low), 2 (normal) or 3 (high)")
        try:
            object.__setattr__(self, "on_limit", OnLimit(self.on_limit))
        except ValueError:
            raise FlowError("on_limit", f"must be one of {', '.join(o.value for o in OnLimit)}") from None
        if self.concurrency_key is not None:
            key = self.concurrency_key
            if not key.strip():
                raise FlowError("concurrency_key", "must not be blank (leave it out for no key)")
            if len(key) > MAX_TEMPLATE_LENGTH:
                raise FlowError("concurrency_key", f"longer than {MAX_TEMPLATE_LENGTH} characters")
            try:
                template = parse_template(key)
            except ExpressionError as exc:
                raise FlowError("concurrency_key", str(exc)) from None
            object.__setattr__(self, "template", template)
        elif self.key_limit is not None:
            raise FlowError("key_limit", "needs a concurrency_key")

    @property
    def empty(self) -> bool:
        """True when the settings ask for nothing (stored as None)."""
        return self == FlowSettings()

    @property
    def rate(self) -> RateLimit | None:
        if self.rate_limit is None:
            return None
        return RateLimit(self.rate_limit, RATE_PERIODS[self.rate_period])

    def to_json(self) -> str | None:
        """The stored form: only the fields set; None when empty."""
        if self.empty:
            return None
        data: dict[str, Any] = {}
        for name in ("max_concurrent_runs", "concurrency_key", "key_limit", "rate_limit", "priority"):
            if getattr(self, name) is not None:
                data[name] = getattr(self, name)
        if self.on_limit is not OnLimit.QUEUE:
            data["on_limit"] = self.on_limit.value
        if self.rate_limit is not None and self.rate_period != "second":
            data["rate_period"] = self.rate_period
        return json.dumps(data, sort_keys=True, separators=(",", ":"))

    def as_dict(self) -> dict[str, Any]:
        """Every field, for answers (unset ones as None)."""
        return {"max_concurrent_runs": self.max_concurrent_runs, "concurrency_key": self.concurrency_key,
                "key_limit": self.key_limit, "on_limit": self.on_limit.value, "rate_limit": self.rate_limit,
                "rate_period": self.rate_period, "priority": self.priority}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> FlowSettings:
        """Settings from a mapping of their fields (FlowError names an unknown one)."""
        known = {"max_concurrent_runs", "concurrency_key", "key_limit", "on_limit", "rate_limit",
                 "rate_period", "priority"}
        for name in data:
            if name not in known:
                raise FlowError(str(name), "not a flow setting")
        values = {k: v for k, v in data.items() if v is not None}
        return cls(**values)


@functools.lru_cache(maxsize=4096)
def parse_flow(text: str | None) -> FlowSettings | None:
    """Stored settings (cached per text); None for no settings. FlowError names the field of a
    stored value no longer valid."""
    if not text:
        return None
    try:
        data = json.loads(text)
    except ValueError:
        raise FlowError("flow", "stored settings are not JSON") from None
    if not isinstance(data, dict):
        raise FlowError("flow", "stored settings are not an object")
    settings = FlowSettings.from_dict(data)
    return None if settings.empty else settings


def template_variables(param: str | None, job_id: int, group_id: int) -> dict[str, Value]:
    """What a concurrency-key template may read for a run with parameter ``param``."""
    text = param or ""
    params: dict[str, JsonValue] = {}
    stripped = text.strip()
    if stripped.startswith("{"):
        try:
            parsed = json.loads(stripped)
        except ValueError:
            parsed = None
        if isinstance(parsed, dict):
            params = parsed
    if not params:
        params = dict(_PAIR.findall(text))
    return {"params": params, "param": text, "job_id": job_id, "group_id": group_id}


@dataclass(frozen=True, slots=True)
class RunFlow:
    """What one run counts against under flow control, and its priority."""

    scopes: tuple[Scope, ...]
    priority: int


def _render(settings: FlowSettings | None, variables: Mapping[str, Value]) -> str | None:
    if settings is None or settings.template is None:
        return None
    try:
        return settings.template.render(variables, max_chars=MAX_KEY_LENGTH)
    except ExpressionError as exc:
        raise FlowError("concurrency_key", str(exc)) from None


def run_flow(job_id: int, group_id: int, job: FlowSettings | None, group: FlowSettings | None,
             param: str | None) -> RunFlow:
    """The scopes and priority of a run of ``job_id`` with parameter ``param``; FlowError
    (field ``concurrency_key``) when a key template does not render to a valid key."""
    variables = template_variables(param, job_id, group_id)
    job_key, group_key = _render(job, variables), _render(group, variables)
    scopes = run_scopes(job_id, group_id, job_key=job_key, group_key=group_key)
    priority = next((s.priority for s in (job, group) if s is not None and s.priority is not None),
                    DEFAULT_PRIORITY)
    return RunFlow(scopes, priority)

def scope_limits(
    scopes: Iterable[Scope], jobs: Mapping[int, FlowSettings | None], group: FlowSettings | None
) -> tuple[dict[Scope, ConcurrencyLimit], dict[Scope, RateLimit]]:
    """The limits and rates configured now for ``scopes`` (of one group), from the current
    settings of their jobs (``jobs``, by id) and of the group: a run queued under older
    settings waits under the new ones."""
    limits: dict[Scope, ConcurrencyLimit] = {}
    rates: dict[Scope, RateLimit] = {}
    for scope in set(scopes):
        owner_text = scope.name.partition("/")[0] if scope.kind is ScopeKind.KEY else str(scope)
        kind, _, ident = owner_text.partition(":")
        if kind == ScopeKind.GROUP.value:
            settings = group
        elif kind == ScopeKind.JOB.value and ident.isdigit():
            settings = jobs.get(int(ident))
        else:
            settings = None
        if settings is None:
            continue
        keyed = scope.kind is ScopeKind.KEY
        limit = settings.key_limit if keyed else settings.max_concurrent_runs
        if limit is not None:
            limits[scope] = ConcurrencyLimit(limit, settings.on_limit)
        # The rate applies per key when the owner has a key template, else to the owner.
        rate = settings.rate
        if rate is not None and keyed == (settings.template is not None):
            rates[scope] = rate
    return limits, rates
