"""Flow control for every dispatch mode: concurrency limits, concurrency keys, rate limits,
priority and fair round-robin between keys (pure decisions; the admin stores the state).

- :mod:`.scopes`: what a run counts against (job, group, concurrency key) and the limits.
- :mod:`.ratelimit`: a global token bucket per scope, two integers per row, time passed in.
- :mod:`.ordering`: priority with aging, round-robin turns between keys, FIFO within a key.
- :mod:`.admission`: :func:`admit`, the decision of one admission pass over a snapshot.

The model is described in ``docs/dispatch.md`` ("Flow control").
"""

from jobring.core.flow.admission import (
    Admission,
    BucketWrite,
    Cancelled,
    FlowSnapshot,
    RunningRun,
    Skipped,
    Waiting,
    admit,
)
from jobring.core.flow.ordering import DEFAULT_AGING_MS, QueuedRun, effective_priority, queue_order
from jobring.core.flow.ratelimit import BucketState, RateLimit, bucket_now, ready_at, supersedes, take
from jobring.core.flow.scopes import (
    DEFAULT_PRIORITY,
    PRIORITIES,
    ConcurrencyLimit,
    FlowError,
    OnLimit,
    Scope,
    ScopeKind,
    fair_key,
    group_scope,
    job_scope,
    key_scope,
    run_scopes,
)

__all__ = [
    "DEFAULT_AGING_MS",
    "DEFAULT_PRIORITY",
    "PRIORITIES",
    "Admission",
    "BucketState",
    "BucketWrite",
    "Cancelled",
    "ConcurrencyLimit",
    "FlowError",
    "FlowSnapshot",
    "OnLimit",
    "QueuedRun",
    "RateLimit",
    "RunningRun",
    "Scope",
    "ScopeKind",
    "Skipped",
    "Waiting",
    "admit",
    "bucket_now",
    "effective_priority",
    "fair_key",
    "group_scope",
    "job_scope",
    "key_scope",
    "queue_order",
    "ready_at",
    "run_scopes",
    "supersedes",
    "take",
]
