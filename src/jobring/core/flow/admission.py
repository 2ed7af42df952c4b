"""The admission decision: which queued runs start now, and what becomes of the others.

The admin reads a :class:`FlowSnapshot` inside one transaction (holding its admission lock,
so no other node admits at the same time): the runs waiting (stored ``queued`` ones and this
cycle's arrivals), the runs active in the scopes they count against, the limits, the
rate-limit buckets and the round-robin turns. :func:`admit` returns the whole decision, and
the admin writes it in the same transaction.

Rules, for each run in the order of :mod:`jobring.core.flow.ordering`:

- Every limit of the run must have room (job AND group AND key limits) and every rate-limit
  bucket of its scopes a token; then it starts: it counts in its scopes at once and takes
  one token from each of its buckets.
- A full limit whose policy is SKIP: the run is skipped (whether new or queued).
- Every full limit's policy is CANCEL_OLDEST and no bucket is empty: the oldest active runs
  of those scopes are cancelled (one victim may free several scopes) and the run starts in
  their place. A run started earlier in the same pass may be the victim; it is then cancelled
  instead of started (its rate-limit token is not given back).
- Otherwise the run waits (QUEUE), and so do the runs behind it in its key.

After the pass, a run left waiting in a scope that is full and whose policy is SKIP is
skipped too: SKIP never lets a run wait for that limit.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from jobring.core.flow.ordering import DEFAULT_AGING_MS, QueuedRun, Rotation
from jobring.core.flow.ratelimit import BucketState, RateLimit, bucket_now, ready_at, take
from jobring.core.flow.scopes import ConcurrencyLimit, OnLimit, Scope

__all__ = [
    "Admission",
    "BucketWrite",
    "Cancelled",
    "FlowSnapshot",
    "RunningRun",
    "Skipped",
    "Waiting",
    "admit",
]


@dataclass(frozen=True, slots=True)
class RunningRun:
    """An active run (dispatching or running): it counts in its scopes until it ends."""

    run_id: int
    scopes: tuple[Scope, ...]
    started_ms: int


@dataclass(frozen=True, slots=True)
class FlowSnapshot:
    """What the admin reads in the admission transaction.

    ``running`` needs the active runs of every scope a queued run counts against (others are
    ignored). ``limits`` and ``rates`` hold the configured scopes only; ``buckets`` the stored
    bucket rows (a missing row is a full bucket); ``turns`` the stored round-robin turns.
    """

    queued: Sequence[QueuedRun]
    running: Sequence[RunningRun] = ()
    limits: Mapping[Scope, ConcurrencyLimit] = field(default_factory=dict)
    rates: Mapping[Scope, RateLimit] = field(default_factory=dict)
    buckets: Mapping[Scope, BucketState] = field(default_factory=dict)
    turns: Mapping[str, int] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Waiting:
    """A run that stays queued, and why: limits at their maximum, buckets without a token, or
    an earlier run of its key (``behind``) that has to start first. All empty: the pass's
    ``max_starts`` was reached before its turn."""

    run_id: int
    full: tuple[Scope, ...] = ()
    rate_limited: tuple[Scope, ...] = ()
    behind: int | None = None


@dataclass(frozen=True, slots=True)
class Skipped:
    run_id: int
    scope: Scope


@dataclass(frozen=True, slots=True)
class Cancelled:
    """An active run cancelled by a CANCEL_OLDEST limit of ``scope`` to make room for ``for_run``."""

    run_id: int
    scope: Scope
    for_run: int


@dataclass(frozen=True, slots=True)
class BucketWrite:
    """A bucket to store: update the row from ``old`` to ``new`` (insert when ``old`` is None)."""

    scope: Scope
    old: BucketState | None
    new: BucketState


@dataclass(frozen=True, slots=True)
class Admission:
    """The decision. ``start`` in dispatch order; ``queue`` the arrivals to store as queued
    (also listed in ``waiting``, with every other run that stays queued); ``cancel`` active
    runs to stop (possibly an arrival of this pass: store it cancelled, never dispatched);
    ``buckets`` the rate-limit rows to write; ``turns`` the round-robin turns to store and
    ``forget`` those to delete (keys with no run left waiting: one that comes back joins at
    the end of the rotation); ``wake_ms`` the first instant a rate-limited run may get its
    token (None: no run waits for a token)."""

    start: tuple[int, ...]
    queue: tuple[int, ...]
    waiting: tuple[Waiting, ...]
    skip: tuple[Skipped, ...]
    cancel: tuple[Cancelled, ...]
    buckets: tuple[BucketWrite, ...]
    turns: Mapping[str, int]
    forget: tuple[str, ...]
    wake_ms: int | None


class _Pass:
    """Counts, buckets and victims as the pass goes."""

    def __init__(self, snapshot: FlowSnapshot, now_ms: int) -> None:
        self.now_ms = now_ms
        self.limits = snapshot.limits
        self.rates = snapshot.rates
        self.stored_buckets = snapshot.buckets
        self.counts: Counter[Scope] = Counter(
            s for r in snapshot.running for s in r.scopes if s in self.limits)
        # Victims are taken oldest first; runs started in this pass come last (they are newest).
        self.active: list[RunningRun] = sorted(snapshot.running, key=lambda r: (r.started_ms, r.run_id))
        self.buckets: dict[Scope, BucketState] = {}
        self.started: dict[int, QueuedRun] = {}
        self.cancelled: dict[int, Cancelled] = {}

    def full(self, run: QueuedRun) -> tuple[Scope, ...]:
        limits, counts = self.limits, self.counts
        return tuple(s for s in run.scopes if s in limits and counts[s] >= limits[s].max_running)

    def bucket(self, scope: Scope) -> BucketState:
        if scope not in self.buckets:
            self.buckets[scope] = bucket_now(self.rates[scope], self.stored_buckets.get(scope), self.now_ms)
        return self.buckets[scope]

    def rate_limited(self, run: QueuedRun) -> tuple[Scope, ...]:
        return tuple(s for s in run.scopes
                     if s in self.rates and take(self.rates[s], self.bucket(s), self.now_ms) is None)

    def start(self, run: QueuedRun) -> None:
        for scope in run.scopes:
            if scope in self.rates:
                taken = take(self.rates[scope], self.bucket(scope), self.now_ms)
                if taken is None:
                    raise RuntimeError(f"{scope} has no token: rate_limited() must be asked first")
                self.buckets[scope] = taken
            if scope in self.limits:
                self.counts[scope] += 1
        self.started[run.run_id] = run
        self.active.append(RunningRun(run.run_id, run.scopes, self.now_ms))

    def victims(self, run: QueuedRun, full: tuple[Scope, ...]) -> list[tuple[RunningRun, Scope]] | None:
        """The oldest active runs whose cancellation frees every full scope, or None."""
        counts = Counter({s: self.counts[s] for s in full})
        chosen: list[tuple[RunningRun, Scope]] = []
        taken: set[int] = set()
        for scope in full:
            while counts[scope] >= self.limits[scope].max_running:
                victim = next((a for a in self.active if scope in a.scopes and a.run_id not in taken
                               and a.run_id not in self.cancelled), None)
                if victim is None:
                    return None
                chosen.append((victim, scope))
                taken.add(victim.run_id)
                counts.subtract(s for s in victim.scopes if s in counts)
        return chosen

    def cancel(self, victims: list[tuple[RunningRun, Scope]], for_run: int) -> None:
        for victim, scope in victims:
            self.counts.subtract(s for s in victim.scopes if s in self.limits)
            self.started.pop(victim.run_id, None)
            self.cancelled[victim.run_id] = Cancelled(victim.run_id, scope, for_run)

    def skip_scope(self, full: tuple[Scope, ...]) -> Scope | None:
        return next((s for s in full if self.limits[s].on_limit is OnLimit.SKIP), None)

    def wake_ms(self, waiting: Iterable[Waiting]) -> int | None:
        instants = []
        for wait in waiting:
            if wait.rate_limited:
                ready = [ready_at(self.rates[s], self.bucket(s), self.now_ms) for s in wait.rate_limited]
                if all(r is not None for r in ready):
                    instants.append(max(r for r in ready if r is not None))
        return min(instants, default=None)


def _consider(state: _Pass, run: QueuedRun) -> Skipped | Waiting | None:
    """Start the run (None), or say why not."""
    full = state.full(run)
    skip = state.skip_scope(full)
    if skip is not None:
        return Skipped(run.run_id, skip)
    limited = state.rate_limited(run)
    if not limited:
        if not full:
            state.start(run)
            return None
        if all(state.limits[s].on_limit is OnLimit.CANCEL_OLDEST for s in full):
            victims = state.victims(run, full)
            if victims is not None:
                state.cancel(victims, run.run_id)
                state.start(run)
                return None
    return Waiting(run.run_id, full, limited)


def admit(
    snapshot: FlowSnapshot,
    now_ms: int,
    *,
    aging_ms: int | None = DEFAULT_AGING_MS,
    max_starts: int | None = None,
) -> Admission:
    """Decide one admission pass at ``now_ms`` (see the module docstring). ``max_starts`` bounds
    the runs started by one pass (the rest wait for the next one); ``aging_ms`` is the wait
    that raises a queued run's priority one level (None: strict priorities)."""
    state = _Pass(snapshot, now_ms)
    rotation = Rotation(snapshot.queued, snapshot.turns, now_ms, aging_ms)
    skipped: list[Skipped] = []
    waiting: list[Waiting] = []
    behind: list[tuple[QueuedRun, int | None]] = []
    while max_starts is None or len(state.started) < max_starts:
        run = rotation.next()
        if run is None:
            break
        outcome = _consider(state, run)
        if outcome is None:
            rotation.started()
        elif isinstance(outcome, Skipped):
            skipped.append(outcome)
            rotation.removed()
        else:
            waiting.append(outcome)
            behind.extend((later, run.run_id) for later in rotation.blocked())
    for head, later_runs in rotation.remaining():
        behind.append((head, None))
        behind.extend((later, head.run_id) for later in later_runs)
    for run, ahead in behind:
        full = state.full(run)
        skip = state.skip_scope(full)
        if skip is not None:
            skipped.append(Skipped(run.run_id, skip))
        else:
            waiting.append(Waiting(run.run_id, full, state.rate_limited(run), ahead))
    new_ids = {run.run_id for run in snapshot.queued if run.new}
    by_id = {run.run_id: run for run in snapshot.queued}
    waiting_keys = {by_id[w.run_id].key for w in waiting}
    writes = tuple(BucketWrite(s, state.stored_buckets.get(s), b) for s, b in sorted(state.buckets.items())
                   if b != bucket_now(state.rates[s], state.stored_buckets.get(s), now_ms))
    return Admission(
        start=tuple(state.started),
        queue=tuple(w.run_id for w in waiting if w.run_id in new_ids),
        waiting=tuple(waiting),
        skip=tuple(skipped),
        cancel=tuple(state.cancelled.values()),
        buckets=writes,
        turns={k: t for k, t in rotation.changed_turns.items() if k in waiting_keys},
        forget=tuple(sorted(k for k in snapshot.turns if k not in waiting_keys)),
        wake_ms=state.wake_ms(waiting),
    )
