"""check_fires on made-up runs: what a node fault may explain (settled as sent, coalesced)
and what stays lost. One 1 s job; node-a fails at FAULT, node-b takes the job over."""

from __future__ import annotations

from typing import Any, NamedTuple

import pytest

from tests.chaos.harness import FailedNode, Gap, check_fires
from tests.e2e.admin_nodes import RecordingExecutor, RunCall

FIRST = 100_000
FAULT = FIRST + 4_300
FENCE = FIRST + 5_100  # node-a's committed fence: it may have sent FIRST + 5 s


class Row(NamedTuple):
    id: int
    job_id: int
    planned_time: int
    trigger_type: str
    admin_node: str
    trigger_code: int
    dispatch_time: int | None
    handle_code: int
    handle_msg: str | None
    executor_address: str
    trigger_msg: str | None = None


def _run(received: dict[int, tuple[int, str]], unsent: dict[int, dict[str, Any]],
         until: int) -> tuple[RecordingExecutor, list[Row]]:
    """``received``: planned offset -> (arrival offset, node); ``unsent``: planned offset ->
    changes to an unconfirmed row of node-a (recorded, never received)."""
    executor = RecordingExecutor()
    rows = []
    for log_id, (offset, (at, node)) in enumerate(sorted(received.items()), start=1):
        rows.append(Row(log_id, 1, FIRST + offset, "CRON", node, 200, FIRST + at, 200, None, "x"))
        executor.calls.append(RunCall(log_id, 1, FIRST + at))
    for log_id, (offset, changes) in enumerate(sorted(unsent.items()), start=100):
        row = Row(log_id, 1, FIRST + offset, "CRON", "node-a", 0, None, 0, None, "x")
        rows.append(row._replace(**changes))
    return executor, rows


def _on_time(offsets: range, node: str) -> dict[int, tuple[int, str]]:
    return {o: (o + 3, node) for o in offsets}


KILLED = FailedNode("node-a", FENCE, FAULT)
BEFORE = _on_time(range(0, 5_000, 1_000), "node-a")
AFTER = _on_time(range(6_000, 10_000, 1_000), "node-b")


def test_a_fire_recorded_under_the_fence_and_never_sent_is_settled_not_lost() -> None:
    executor, rows = _run(BEFORE | AFTER, {5_000: {}}, FIRST + 9_000)
    v = check_fires(executor, rows, {1: FIRST}, FIRST + 9_000, 2_500, failed=KILLED)
    assert (v.settled, v.lost, v.doubled, v.notes) == ([(1, FIRST + 5_000)], [], [], [])
    assert v.row()["settled"] == 1 and v.fired == 9


@pytest.mark.parametrize(("unsent", "failed"), [
    pytest.param({5_000: {}}, FailedNode("node-a", FIRST + 4_900, FAULT), id="beyond the fence"),
    pytest.param({5_000: {"admin_node": "node-b"}}, KILLED, id="recorded by the survivor"),
    pytest.param({5_000: {"trigger_code": 200, "dispatch_time": FIRST + 5_000}}, KILLED, id="dispatched"),
    pytest.param({5_000: {"handle_code": 500}}, KILLED, id="has a result"),
    pytest.param({}, KILLED, id="never recorded"),
    pytest.param({5_000: {}}, FailedNode("node-a", FENCE, FIRST + 6_100), id="due a period before the fault"),
])
def test_other_misses_of_the_failed_node_stay_lost(unsent: dict[int, dict[str, Any]],
                                                   failed: FailedNode) -> None:
    executor, rows = _run(BEFORE | AFTER, unsent, FIRST + 9_000)
    v = check_fires(executor, rows, {1: FIRST}, FIRST + 9_000, 2_500, failed=failed)
    assert (v.settled, v.lost) == ([], [(1, FIRST + 5_000)])


def test_a_miss_after_the_settled_instant_is_lost() -> None:
    later = _on_time(range(7_000, 10_000, 1_000), "node-b")
    executor, rows = _run(BEFORE | later, {5_000: {}}, FIRST + 9_000)
    v = check_fires(executor, rows, {1: FIRST}, FIRST + 9_000, 2_500, failed=KILLED)
    assert (v.settled, v.lost) == ([(1, FIRST + 5_000)], [(1, FIRST + 6_000)])


def test_more_than_one_settled_instant_per_job_is_a_failure() -> None:
    failed = FailedNode("node-a", FIRST + 6_100, FAULT)
    executor, rows = _run(BEFORE | _on_time(range(7_000, 10_000, 1_000), "node-b"), {5_000: {}, 6_000: {}},
                          FIRST + 9_000)
    v = check_fires(executor, rows, {1: FIRST}, FIRST + 9_000, 2_500, failed=failed)
    assert len(v.settled) == 2 and not v.lost
    assert v.notes and "2 instants settled as sent" in v.notes[0]


# A pause: node-b takes over 3 s after it; its first fire of the job (FIRST + 6 s) goes
# out 1.3 s late, after FIRST + 7 s came due: that instant is coalesced into it.
PAUSED = BEFORE | {6_000: (7_300, "node-b")} | _on_time(range(8_000, 12_000, 1_000), "node-b")
PAUSE_GAP = Gap(FAULT, FIRST + 12_000, {1: "DO_NOTHING"}, coalesced_only=True)


def test_a_pause_coalesces_the_instants_due_before_the_late_takeover_fire() -> None:
    executor, rows = _run(PAUSED, {5_000: {}}, FIRST + 11_000)
    v = check_fires(executor, rows, {1: FIRST}, FIRST + 11_000, 5_000, PAUSE_GAP, failed=KILLED)
    assert (v.settled, v.coalesced, v.excused, v.lost, v.late) == ([(1, FIRST + 5_000)], 1, 1, [], [])
    assert v.max_late_ms == 1_300


def test_the_late_fire_standing_for_coalesced_instants_is_judged_after_a_pause() -> None:
    executor, rows = _run(PAUSED, {5_000: {}}, FIRST + 11_000)
    v = check_fires(executor, rows, {1: FIRST}, FIRST + 11_000, 1_000, PAUSE_GAP, failed=KILLED)
    assert v.late == [(1, FIRST + 6_000, 1_300)]


def test_a_pause_explains_no_do_nothing_skip() -> None:
    # No fire for 6 s after the settled instant: DO_NOTHING would skip that run of misses
    # after a database outage, but a pause is shorter than the misfire threshold.
    received = BEFORE | _on_time(range(12_000, 14_000, 1_000), "node-b")
    executor, rows = _run(received, {5_000: {}}, FIRST + 13_000)
    v = check_fires(executor, rows, {1: FIRST}, FIRST + 13_000, 5_000, PAUSE_GAP, failed=KILLED)
    assert (v.coalesced, v.excused, len(v.lost)) == (0, 0, 6)
    outage = Gap(FAULT, FIRST + 12_000, {1: "DO_NOTHING"})
    v = check_fires(executor, rows, {1: FIRST}, FIRST + 13_000, 5_000, outage, failed=KILLED)
    assert (v.coalesced, v.excused, v.lost) == (0, 6, [])
