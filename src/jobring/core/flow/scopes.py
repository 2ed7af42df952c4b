"""What a run counts against: limit scopes (job, group, concurrency key) and their limits.

A scope names one counter shared by every admin node: ``job:7``, ``group:2``,
``key:job:7/acme`` (the key ``acme`` rendered from job 7's template) or ``key:group:2/acme``
(from group 2's template). A key belongs to the job or group that declares the template, so
two jobs whose templates both render ``acme`` keep separate counters unless the key is
declared on their group. ``str(scope)`` is the stored form (a row key for rate-limit state).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from jobring.core.fielderror import FieldError

__all__ = [
    "DEFAULT_PRIORITY",
    "MAX_CONCURRENCY",
    "MAX_KEY_LENGTH",
    "PRIORITIES",
    "ConcurrencyLimit",
    "FlowError",
    "OnLimit",
    "Scope",
    "ScopeKind",
    "fair_key",
    "group_scope",
    "job_scope",
    "key_scope",
    "run_scopes",
]

MAX_KEY_LENGTH = 200
MAX_CONCURRENCY = 100_000
PRIORITIES = (1, 2, 3)
"""1 low, 2 normal, 3 high: higher starts first."""
DEFAULT_PRIORITY = 2


class FlowError(FieldError):
    """Invalid flow-control input; ``field`` names the offending field."""


class ScopeKind(StrEnum):
    JOB = "job"
    GROUP = "group"
    KEY = "key"


_KINDS = frozenset(k.value for k in ScopeKind)


@dataclass(frozen=True, slots=True, order=True)
class Scope:
    """One shared counter: a job, a group, or a concurrency key of a job or group."""

    kind: ScopeKind
    name: str

    def __str__(self) -> str:
        return f"{self.kind.value}:{self.name}"

    @classmethod
    def parse(cls, text: str) -> Scope:
        """The scope whose ``str()`` is ``text``."""
        kind, _, name = text.partition(":")
        if kind not in _KINDS or not name:
            raise FlowError("scope", f"not a scope: {text!r}")
        return cls(ScopeKind(kind), name)


def job_scope(job_id: int) -> Scope:
    return Scope(ScopeKind.JOB, str(job_id))


def group_scope(group_id: int) -> Scope:
    return Scope(ScopeKind.GROUP, str(group_id))


def key_scope(owner: Scope, key: str) -> Scope:
    """The scope of a rendered concurrency key declared on ``owner`` (a job or group scope).

    The key is the template engine's output; it must be 1..MAX_KEY_LENGTH characters with no
    control characters (an empty key means the template's parameter was missing).
    """
    if owner.kind is ScopeKind.KEY:
        raise FlowError("concurrency_key", "a key belongs to a job or a group, not to another key")
    if not key:
        raise FlowError("concurrency_key", "the rendered key is empty")
    if len(key) > MAX_KEY_LENGTH:
        raise FlowError("concurrency_key", f"the rendered key is longer than {MAX_KEY_LENGTH} characters")
    if any(ord(c) < 32 or ord(c) == 127 for c in key):
        raise FlowError("concurrency_key", "the rendered key contains a control character")
    return Scope(ScopeKind.KEY, f"{owner}/{key}")


def run_scopes(
    job_id: int, group_id: int, *, job_key: str | None = None, group_key: str | None = None
) -> tuple[Scope, ...]:
    """Every scope a run of ``job_id`` counts against: its job, its group, and the keys rendered
    from the job's and the group's templates (None when the template is not set)."""
    job, group = job_scope(job_id), group_scope(group_id)
    scopes = [job, group]
    if job_key is not None:
        scopes.append(key_scope(job, job_key))
    if group_key is not None:
        scopes.append(key_scope(group, group_key))
    return tuple(scopes)


def fair_key(scopes: tuple[Scope, ...]) -> str:
    """The round-robin key of a run: its first concurrency key, else its job (so runs without a
    key share turns per job)."""
    if not scopes:
        raise FlowError("scopes", "a run counts against at least its job")
    for kind in (ScopeKind.KEY, ScopeKind.JOB):
        for scope in scopes:
            if scope.kind is kind:
                return str(scope)
    return str(scopes[0])


class OnLimit(StrEnum):
    """What happens to a run that finds a limit full.

    QUEUE waits (state ``queued``) until there is room; SKIP drops the run (state ``skipped``)
    and never waits for this limit; CANCEL_OLDEST cancels the oldest running run of the scope
    and starts the new one in its place.
    """

    QUEUE = "queue"
    SKIP = "skip"
    CANCEL_OLDEST = "cancel_oldest"


@dataclass(frozen=True, slots=True)
class ConcurrencyLimit:
    """At most ``max_running`` runs of a scope at a time, across every admin node and executor."""

    max_running: int
    on_limit: OnLimit = OnLimit.QUEUE

    def __post_init__(self) -> None:
        if not 1 <= self.max_running <= MAX_CONCURRENCY:
            raise FlowError("max_concurrent_runs", f"must be between 1 and {MAX_CONCURRENCY}")
