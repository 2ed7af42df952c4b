"""Queue order: priority (with aging), round-robin turns between keys, FIFO inside a key."""

from __future__ import annotations

import pytest

from jobring.core.flow.ordering import QueuedRun, Rotation, effective_priority, queue_order
from jobring.core.flow.scopes import FlowError, run_scopes

T0 = 1_700_000_000_000


def run(run_id: int, tenant: str | None, at: int = 0, priority: int = 2, job: int = 1) -> QueuedRun:
    return QueuedRun(run_id, run_scopes(job, 1, job_key=tenant), T0 + at, priority)


def ids(runs: list[QueuedRun]) -> list[int]:
    return [r.run_id for r in runs]


def test_one_tenants_burst_does_not_starve_the_others() -> None:
    burst = [run(i, "a", at=i) for i in range(1, 6)]
    others = [run(10, "b", at=50), run(20, "c", at=60), run(11, "b", at=70)]
    order = queue_order(burst + others, {}, T0 + 100)
    assert ids(order) == [1, 10, 20, 2, 11, 3, 4, 5]


def test_priority_goes_first_then_turns_then_fifo() -> None:
    runs = [run(1, "a", at=0, priority=1), run(2, "b", at=5, priority=3), run(3, "a", at=9, priority=3),
            run(4, "b", at=1, priority=2)]
    # Priority 3 first (a key's own runs too: 3 overtakes 1 inside key a), then the rest.
    assert ids(queue_order(runs, {}, T0 + 10, aging_ms=None)) == [2, 3, 4, 1]


def test_stored_turns_decide_which_key_goes_first() -> None:
    runs = [run(1, "a", at=0), run(2, "b", at=5)]
    assert ids(queue_order(runs, {}, T0 + 10)) == [1, 2]  # same turn: the older head first
    assert ids(queue_order(runs, {"key:job:1/a": 9, "key:job:1/b": 4}, T0 + 10)) == [2, 1]


def test_a_key_without_a_turn_joins_behind_the_keys_waiting() -> None:
    runs = [run(1, "a", at=0), run(2, "b", at=1), run(3, "new", at=2)]
    turns = {"key:job:1/a": 3, "key:job:1/b": 7}
    assert ids(queue_order(runs, turns, T0 + 10)) == [1, 2, 3]


def test_aging_raises_one_level_per_period_up_to_three() -> None:
    low = run(1, "a", at=0, priority=1)
    assert [effective_priority(low, T0 + w, 1000) for w in (0, 999, 1000, 2500, 10**9)] == [1, 1, 2, 3, 3]
    assert effective_priority(low, T0 + 10**9, None) == 1
    with pytest.raises(FlowError):
        effective_priority(low, T0, 0)
    # An old low-priority run competes with fresh high ones once aged to the top.
    fresh = [run(i, f"t{i}", at=5000 + i, priority=3) for i in range(2, 5)]
    assert ids(queue_order([low, *fresh], {}, T0 + 5010, aging_ms=2000))[0] == 1
    assert ids(queue_order([low, *fresh], {}, T0 + 5010, aging_ms=None))[-1] == 1


def test_rotation_sequence_rules() -> None:
    rotation = Rotation([run(1, "a"), run(2, "a", at=1), run(3, "b", at=2)], {}, T0 + 5, None)
    first = rotation.next()
    assert first is not None and first.run_id == 1
    with pytest.raises(RuntimeError):
        rotation.next()
    assert ids(rotation.blocked()) == [2]
    assert ids([head for head, _ in rotation.remaining()]) == [3]
    with pytest.raises(RuntimeError):
        rotation.started()


def test_bad_queued_runs_are_refused() -> None:
    with pytest.raises(FlowError) as err:
        run(1, "a", priority=4)
    assert err.value.field == "priority"
    with pytest.raises(FlowError):
        QueuedRun(1, (), T0)
