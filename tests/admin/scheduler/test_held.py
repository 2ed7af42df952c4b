"""The held set and its timer heap: plain synchronous code, tested without a loop."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from jobring.admin.loop.ahead import Ahead, Outcome, Withdrawals
from jobring.admin.loop.held import HeldSet
from jobring.core.schedule import Schedule, parse_schedule
from tests.admin.loop_fakes import T0, fix_rate_job


def _every(seconds: int = 1) -> Schedule:
    return parse_schedule("FIX_RATE", str(seconds), "UTC")


def test_pop_due_in_instant_order_and_only_up_to_the_limit() -> None:
    held = HeldSet()
    for job_id, at in ((1, T0 + 300), (2, T0 + 100), (3, T0 + 200)):
        held.adopt(fix_rate_job(job_id, at), _every(), at, T0 + 10_000, at)
    assert held.next_due() == T0 + 100
    assert [h.job.id for h in iter(lambda: held.pop_due(T0 + 250), None)] == [2, 3]
    assert held.pop_due(T0 + 250) is None
    assert held.next_due() == T0 + 300
    assert len(held) == 3  # popping a due entry does not forget the job


def test_a_dropped_job_leaves_stale_entries_that_are_skipped() -> None:
    held = HeldSet()
    first = held.adopt(fix_rate_job(1, T0), _every(), T0, T0 + 10_000, T0)
    held.adopt(fix_rate_job(2, T0 + 500), _every(), T0 + 500, T0 + 10_000, T0 + 500)
    assert held.drop(1) is first
    assert first.generation == 0
    assert 1 not in held and held.get(1) is None
    assert held.next_due() == T0 + 500  # the stale top entry was discarded
    assert held.drop(1) is None


def test_a_readopted_job_fires_from_its_new_entry_only() -> None:
    held = HeldSet()
    old = held.adopt(fix_rate_job(1, T0), _every(), T0, T0 + 10_000, T0)
    held.drop(1)
    new = held.adopt(fix_rate_job(1, T0 + 50), _every(), T0 + 50, T0 + 10_000, T0 + 50)
    assert not held.holds(old) and held.holds(new)
    assert held.pop_due(T0 + 1_000) is new
    assert held.pop_due(T0 + 1_000) is None


def test_pushing_an_earlier_instant_rings_the_sleeping_timer() -> None:
    held = HeldSet()
    rings: list[int] = []
    held.alarm, held.alarm_at = lambda: rings.append(1), T0 + 100
    job = held.adopt(fix_rate_job(1, T0 + 200), _every(), T0 + 200, T0 + 10_000, T0 + 200)
    assert rings == []  # later than the timer's deadline
    held.push(job, T0 + 50)
    assert rings == [1]
    held.alarm_at = None  # sleeping without a deadline: any push rings
    held.push(job, T0 + 900)
    assert rings == [1, 1]


def test_renew_reports_jobs_gone_and_jobs_resumed_beyond_the_window() -> None:
    held = HeldSet()
    held.adopt(fix_rate_job(1, T0), _every(), T0, T0 + 1_000, T0)
    held.adopt(fix_rate_job(2, T0), _every(), T0, T0 + 1_000, T0)
    far = held.adopt(fix_rate_job(3, T0 + 9_000), _every(), T0 + 9_000, T0 + 1_000, T0 + 9_000)
    leaving = held.adopt(fix_rate_job(4, T0 + 9_000), _every(), T0 + 9_000, T0 + 1_000, T0 + 9_000)
    leaving.leaving = True
    gone, beyond = held.renew({1, 3, 4}, T0 + 11_000, T0 + 5_000)
    assert gone == [2]
    assert beyond == [3]
    assert far.lease_until_ms == T0 + 11_000
    assert held.get(2) is not None and held.get(2).lease_until_ms == T0 + 1_000  # type: ignore[union-attr]


def test_excess_gives_away_the_furthest_staying_jobs() -> None:
    held = HeldSet()
    for job_id in range(1, 6):
        held.adopt(fix_rate_job(job_id, T0 + job_id * 100), _every(), T0 + job_id * 100, T0 + 10_000, T0)
    held.get(5).leaving = True  # type: ignore[union-attr]
    assert [h.job.id for h in held.excess(2)] == [4, 3]
    assert held.excess(4) == []


def test_changed_sees_next_time_and_schedule_edits_only() -> None:
    held = HeldSet()
    job = fix_rate_job(1, T0)
    entry = held.adopt(job, _every(), T0, T0 + 10_000, T0)
    assert not HeldSet.changed(entry, replace(job, job_desc="renamed"))
    assert HeldSet.changed(entry, replace(job, trigger_next_time=T0 + 1))
    assert HeldSet.changed(entry, replace(job, schedule_conf="5"))


def test_clear_forgets_everything() -> None:
    held = HeldSet()
    entry = held.adopt(fix_rate_job(1, T0), _every(), T0, T0 + 10_000, T0)
    held.clear()
    assert len(held) == 0 and entry.generation == 0
    assert held.next_due() is None


def test_due_at_least_counts_only_entries_due_and_stops_at_the_count() -> None:
    held = HeldSet()
    assert not held.due_at_least(T0, 1)
    for job_id in range(1, 11):
        at = T0 + (0 if job_id <= 6 else 1_000)
        held.adopt(fix_rate_job(job_id, at), _every(), at, T0 + 10_000, at)
    assert held.due_at_least(T0, 6)
    assert not held.due_at_least(T0, 7)
    assert not held.due_at_least(T0 - 1, 1)
    assert held.due_at_least(T0 + 1_000, 10)
    assert not held.due_at_least(T0 + 1_000, 11)



class _Canceller:
    def __init__(self) -> None:
        self.cancelled: list[object] = []

    async def cancel(self, batches: Sequence[object]) -> None:
        self.cancelled += batches


async def test_drop_withdraws_the_fires_recorded_ahead_and_tells_the_later_stage() -> None:
    port = _Canceller()
    withdrawals = Withdrawals(port)
    held = HeldSet(withdrawals)
    told: list[int] = []
    held.dropped = told.append
    entry = held.adopt(fix_rate_job(1, T0), _every(), T0, T0 + 10_000, T0)
    recorded, recording = Ahead(), Ahead()
    recorded.resolve(Outcome.PREPARED, "batch@T0")
    entry.prepared = {T0: recorded, T0 + 1_000: recording}
    assert held.drop(1) is entry
    assert told == [1] and entry.prepared == {} and recording.withdrawn
    assert held.drop(1) is None and told == [1]  # nothing held: nothing to tell
    await withdrawals.cancel()
    assert port.cancelled == ["batch@T0"]


def test_lapsed_drops_a_job_whose_lease_ends_within_the_guard() -> None:
    held = HeldSet()
    entry = held.adopt(fix_rate_job(1, T0), _every(), T0, T0 + 10_000, T0)
    assert not held.lapsed(entry, T0 + 8_999, 1_000)
    assert 1 in held
    assert held.lapsed(entry, T0 + 9_000, 1_000)
    assert 1 not in held and entry.generation == 0
