"""The order in which queued runs get their chance to start.

1. **Priority first.** A run's effective priority is its priority (1-3) raised by one level
   for every ``aging_ms`` it has waited, up to 3: a low-priority run waits behind higher ones
   for at most ``2 * aging_ms`` before it competes at the top level (so no run starves).
2. **Fair round-robin between keys.** Every key (a run's concurrency key, else its job) has
   a *turn*, a number stored per key while the key has runs waiting. Among the keys whose
   first run has the highest effective priority, the key with the smallest turn goes next
   (ties: the older first run); once one of its runs starts, it gets a turn above every
   turn in the queue. So each key waiting gets its turn before any key goes again, however
   many runs one tenant has queued. A key that has no turn (new, or back after its queue
   emptied) joins with the largest turn of the keys waiting: behind them.
3. **FIFO within a key.** A key's runs go by effective priority, then enqueue time, then run
   id; only its first run can start, so when that run cannot start now, the key's later runs
   wait behind it for the rest of the pass (nothing overtakes inside a key).

Why a run cannot starve: while a key's first run waits, the key's turn stays put; every other
key that starts a run moves behind it, and keys that arrive later join behind it. So while
a run is first in its key at the top priority level, the passes that find room for it but
start another run number at most the other keys waiting when it got there. It can lose its
first place only to older runs of its key that age up to the top level, which are finitely
many (``tests/core/test_flow_properties.py`` checks this bound under random arrivals).
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from jobring.core.flow.scopes import DEFAULT_PRIORITY, PRIORITIES, FlowError, Scope, fair_key

__all__ = [
    "DEFAULT_AGING_MS",
    "QueuedRun",
    "Rotation",
    "effective_priority",
    "queue_order",
]

DEFAULT_AGING_MS = 60_000


@dataclass(frozen=True, slots=True)
class QueuedRun:
    """A run waiting to start (stored with state ``queued``, or ``new``: an arrival of this
    admission that is stored only with the decision)."""

    run_id: int
    scopes: tuple[Scope, ...]
    enqueued_ms: int
    priority: int = DEFAULT_PRIORITY
    new: bool = False
    key: str = field(init=False, repr=False, compare=False)
    """Its round-robin key (see :func:`jobring.core.flow.scopes.fair_key`)."""

    def __post_init__(self) -> None:
        if self.priority not in PRIORITIES:
            raise FlowError("priority", f"must be one of {', '.join(map(str, PRIORITIES))}")
        if not self.scopes:
            raise FlowError("scopes", "a run counts against at least its job")
        object.__setattr__(self, "key", fair_key(self.scopes))


def effective_priority(run: QueuedRun, now_ms: int, aging_ms: int | None) -> int:
    """The run's priority raised one level per ``aging_ms`` waited (None: no aging)."""
    if aging_ms is None:
        return run.priority
    if aging_ms <= 0:
        raise FlowError("aging_ms", "must be positive")
    waited = max(0, now_ms - run.enqueued_ms)
    return min(PRIORITIES[-1], run.priority + waited // aging_ms)


_Entry = tuple[int, int, int, int, str]  # (-priority, turn, enqueued_ms, run_id, key) of a key's head


class Rotation:
    """One admission pass over the queue: yields each key's first run in turn order.

    After :meth:`next`, the caller says what became of that run: :meth:`started` (the key
    moves behind every other), :meth:`removed` (skipped or cancelled: the key keeps its
    place) or :meth:`blocked` (the key sits out the rest of the pass).
    """

    def __init__(
        self, runs: Iterable[QueuedRun], turns: Mapping[str, int], now_ms: int, aging_ms: int | None
    ) -> None:
        self._now_ms = now_ms
        self._aging_ms = aging_ms
        by_key: dict[str, list[tuple[int, int, int, QueuedRun]]] = {}
        for run in runs:
            by_key.setdefault(run.key, []).append(
                (-effective_priority(run, now_ms, aging_ms), run.enqueued_ms, run.run_id, run))
        self._queues: dict[str, list[QueuedRun]] = {}
        for key, items in by_key.items():
            items.sort(key=lambda item: item[:3])
            self._queues[key] = [item[3] for item in reversed(items)]  # head last: pop() is O(1)
        stored = [turns[key] for key in self._queues if key in turns]
        self._last_turn = max(stored, default=0)
        self._turns = {key: turns.get(key, self._last_turn) for key in self._queues}
        # A key's turn is stored from its first pass on, so it holds its place while it waits.
        self.changed_turns: dict[str, int] = {k: t for k, t in self._turns.items() if k not in turns}
        self._heap: list[_Entry] = []
        for key in self._queues:
            self._push(key)
        self._current: str | None = None

    def _push(self, key: str) -> None:
        queue = self._queues[key]
        if not queue:
            del self._queues[key]
            return
        head = queue[-1]
        priority = effective_priority(head, self._now_ms, self._aging_ms)
        heapq.heappush(self._heap, (-priority, self._turns[key], head.enqueued_ms, head.run_id, key))

    def next(self) -> QueuedRun | None:
        """The next key's first run, or None when every key has had its chance this pass."""
        if self._current is not None:
            raise RuntimeError("say what became of the previous run first")
        if not self._heap:
            return None
        self._current = heapq.heappop(self._heap)[-1]
        return self._queues[self._current][-1]

    def _take(self) -> str:
        if self._current is None:
            raise RuntimeError("no run was handed out")
        key, self._current = self._current, None
        self._queues[key].pop()
        return key

    def started(self) -> None:
        key = self._take()
        self._last_turn += 1
        self._turns[key] = self.changed_turns[key] = self._last_turn
        self._push(key)

    def removed(self) -> None:
        self._push(self._take())

    def blocked(self) -> list[QueuedRun]:
        """The key's runs after the blocked one, in their order; none of them start this pass."""
        if self._current is None:
            raise RuntimeError("no run was handed out")
        key, self._current = self._current, None
        queue = self._queues.pop(key)
        return queue[-2::-1]

    def remaining(self) -> list[tuple[QueuedRun, list[QueuedRun]]]:
        """Each key still in the pass: its first run and the runs behind it."""
        if self._current is not None:
            raise RuntimeError("say what became of the previous run first")
        out = []
        for entry in sorted(self._heap):
            queue = self._queues[entry[-1]]
            out.append((queue[-1], queue[-2::-1]))
        return out


def queue_order(
    runs: Iterable[QueuedRun], turns: Mapping[str, int], now_ms: int, aging_ms: int | None = DEFAULT_AGING_MS
) -> list[QueuedRun]:
    """The runs in the order they would start if every limit had room (a queue's display order)."""
    rotation = Rotation(runs, turns, now_ms, aging_ms)
    order: list[QueuedRun] = []
    while (run := rotation.next()) is not None:
        order.append(run)
        rotation.started()
    return order
