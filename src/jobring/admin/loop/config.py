"""The scheduling loop's settings and counters."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from jobring.core.buckets import Buckets
from jobring.core.planning import MISFIRE_THRESHOLD_MS


@dataclass(frozen=True, slots=True)
class LoopConfig:
    """The scheduling loop's timings and limits (docs/design/scheduling-loop.md)."""

    pre_read_ms: int = 5_000
    cycle_ms: int = 1_000
    # A dead node's jobs are claimable this long after its last renewal; renewals come every
    # cycle, so an overloaded node (slow cycles) keeps its jobs for a while before losing them.
    lease_ms: int = 10_000
    # A fire is not sent when the lease ends within this margin (clock skew between nodes).
    lease_guard_ms: int = 1_000
    # With a preparing fire port: fires planned up to this far ahead are recorded each cycle
    # (more than one cycle, so every instant is prepared by the cycle before it).
    prepare_ahead_ms: int = 2_500
    prepare_slice: int = 100  # fires recorded per insert
    # trigger_next_time updates of fires sent are written at most this often.
    advance_flush_ms: int = 200
    claim_limit: int = 20_000
    # Fire batches in flight at once. When the limit is reached, fires coming due wait and
    # go out together in the next batch: fewer, larger transactions under load.
    max_inflight_batches: int = 64
    # Under load, fires within a few ms of each other go out in one batch (one log insert
    # for all): the wait grows with the fire rate, 1 ms per 100 fires/s, up to this cap.
    max_coalesce_ms: int = 2
    misfire_threshold_ms: int = MISFIRE_THRESHOLD_MS
    stop_timeout_s: float = 10.0
    # The send fence (the latest planned instant this node may send) is kept this far ahead
    # of now, raised this often. A fire beyond the committed fence waits for it.
    fence_ahead_ms: int = 1_000
    fence_every_ms: int = 250


@dataclass(slots=True)
class LoopStats:
    """Counters of the scheduling loop (read by the metrics and the ops pages)."""

    fired: int = 0
    misfired: int = 0
    skipped: int = 0
    calendar_skipped: int = 0  # instants a calendar excluded (recorded as skipped runs)
    batches: int = 0
    batch_failures: int = 0
    cycles: int = 0
    held: int = 0
    # Lateness of the fire_batch call against the planned instant, ms (on-time fires only;
    # the most recent ones).
    lateness_ms: deque[int] = field(default_factory=lambda: deque(maxlen=10_000))
    # The same lateness as histogram buckets since start (exported as a metric).
    lateness: Buckets = field(default_factory=Buckets)
