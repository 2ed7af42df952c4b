"""Overlap policies in the admin (issue 24 item 3) over a SQLite store: the gate decides a due
fire from the job's runs in progress and waiting fires; the runner starts a waiting fire once
nothing runs."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, cast

import orjson

from jobring.admin.loop.overlap import TERMINATED_MSG, OverlapGate, OverlapRunner, overlap_policy
from jobring.admin.store import JobGroup, JobInfo, NewLog, Store
from jobring.admin.store.records import HandleResult, TriggerResult
from jobring.admin.trigger.trigger import FireRequest, FireResult, TriggerService
from jobring.core.clock import ManualClock
from jobring.core.enums import TriggerType
from jobring.core.runstate import RunState, run_state
from jobring.core.timing import OverlapPolicy

NOW = datetime(2026, 3, 10, 12, 0, 0)
T0 = 1_773_144_000_000
ADDRESS = "http://127.0.0.1:9999"


@dataclass
class Answer:
    ok: bool = True
    msg: str | None = None


@dataclass
class FakeExecutors:
    kills: list[tuple[str, int]] = field(default_factory=list)

    async def kill(self, address: str, job_id: int, token: str | None = None,
                   app_name: str | None = None) -> Answer:
        self.kills.append((address, job_id))
        return Answer()


@dataclass
class FakeTrigger:
    fired: list[FireRequest] = field(default_factory=list)

    async def fire(self, req: FireRequest) -> FireResult:
        self.fired.append(req)
        return FireResult([len(self.fired)], False, 200, "ok")


async def _job(store: Store, policy: str) -> JobInfo:
    group = await store.groups.create(JobGroup(app_name="ov-app", title="O"), NOW)
    job_id = await store.jobs.create(JobInfo(
        job_group=group, job_desc="j", executor_handler="h", schedule_type="CRON",
        schedule_conf="0 * * * * ?", trigger_status=1, timing=orjson.dumps({"overlap": policy}).decode()))
    job = await store.jobs.get(job_id)
    assert job is not None
    return job


async def _running(store: Store, job: JobInfo, planned: int) -> int:
    (run_id,) = await store.logs.insert_fires([NewLog(job.job_group, job.id, NOW, trigger_type="CRON",
                                                      planned_time=planned)])
    assert run_id is not None
    await store.logs.update_trigger_results([TriggerResult(run_id, ADDRESS, 200, "ok")])
    return run_id


def _gate(store: Store) -> tuple[OverlapGate, FakeExecutors]:
    executors = FakeExecutors()
    return OverlapGate(store, ManualClock(T0), cast(Any, executors), "n1"), executors


def _fire(job: JobInfo, planned: int) -> FireRequest:
    return FireRequest(job, TriggerType.CRON, planned_time=planned)


async def _states(store: Store, job: JobInfo) -> dict[int, RunState]:
    return {e.planned_time or 0: run_state(trigger_code=e.trigger_code, handle_code=e.handle_code, now_ms=T0,
                                           trigger_msg=e.trigger_msg, handle_msg=e.handle_msg)
            for e in await store.logs.for_job(job.id)}


async def test_policy_is_read_from_the_timing_and_allow_all_is_none() -> None:
    job = JobInfo(job_group=1, job_desc="j", timing='{"overlap":"skip"}')
    assert overlap_policy(job) is OverlapPolicy.SKIP
    assert overlap_policy(JobInfo(job_group=1, job_desc="j", timing='{"overlap":"allow_all"}')) is None
    assert overlap_policy(JobInfo(job_group=1, job_desc="j", timing='{"max_runs":3}')) is None
    assert overlap_policy(JobInfo(job_group=1, job_desc="j")) is None


async def test_nothing_running_starts_and_jobs_without_policy_pass(sqlite_store: Store) -> None:
    job = await _job(sqlite_store, "skip")
    plain = JobInfo(id=99, job_group=1, job_desc="plain")
    gate, _ = _gate(sqlite_store)
    requests = [_fire(job, T0), FireRequest(plain, TriggerType.CRON, planned_time=T0)]
    assert await gate.admit(requests) == requests


async def test_skip_records_the_fire_as_skipped(sqlite_store: Store) -> None:
    job = await _job(sqlite_store, "skip")
    await _running(sqlite_store, job, T0 - 60_000)
    gate, executors = _gate(sqlite_store)
    assert await gate.admit([_fire(job, T0)]) == []
    states = await _states(sqlite_store, job)
    assert states[T0] is RunState.SKIPPED and states[T0 - 60_000] is RunState.RUNNING
    (skipped,) = [e for e in await sqlite_store.logs.for_job(job.id) if e.planned_time == T0]
    assert skipped.trigger_msg == "skipped by overlap: a run of this job is still in progress (policy skip)"
    assert executors.kills == []


async def test_buffer_one_keeps_one_waiting_and_the_runner_starts_it_when_the_run_ends(
    sqlite_store: Store,
) -> None:
    job = await _job(sqlite_store, "buffer_one")
    running = await _running(sqlite_store, job, T0 - 60_000)
    gate, _ = _gate(sqlite_store)
    assert await gate.admit([_fire(job, T0), _fire(job, T0 + 60_000)]) == []
    assert [w.planned_time for w in await sqlite_store.overlap.waiting(job.id)] == [T0]
    assert (await _states(sqlite_store, job))[T0 + 60_000] is RunState.SKIPPED
    trigger = FakeTrigger()
    runner = OverlapRunner(sqlite_store, cast(TriggerService, trigger))
    await runner.tick()
    assert trigger.fired == []  # still running
    await sqlite_store.logs.record_results([HandleResult(running, 200, "done", NOW)])
    await runner.tick()
    assert [(r.planned_time, r.logical_time, r.trigger_type) for r in trigger.fired] == [
        (T0, T0, TriggerType.CRON)]
    assert await sqlite_store.overlap.waiting(job.id) == []


async def test_buffer_all_queues_every_fire_oldest_first(sqlite_store: Store) -> None:
    job = await _job(sqlite_store, "buffer_all")
    await _running(sqlite_store, job, T0 - 60_000)
    gate, _ = _gate(sqlite_store)
    assert await gate.admit([_fire(job, T0 + 60_000)]) == []
    assert await gate.admit([_fire(job, T0)]) == []
    assert [w.planned_time for w in await sqlite_store.overlap.waiting(job.id)] == [T0, T0 + 60_000]


async def test_a_fire_waits_behind_waiting_ones_even_when_nothing_runs(sqlite_store: Store) -> None:
    job = await _job(sqlite_store, "buffer_all")
    assert await sqlite_store.overlap.wait(job.id, job.job_group, T0, T0, "CRON", T0)
    gate, _ = _gate(sqlite_store)
    assert await gate.admit([_fire(job, T0 + 60_000)]) == []
    assert [w.planned_time for w in await sqlite_store.overlap.waiting(job.id)] == [T0, T0 + 60_000]


async def test_cancel_other_kills_the_runs_and_replaces_the_waiting_fire(sqlite_store: Store) -> None:
    job = await _job(sqlite_store, "cancel_other")
    running = await _running(sqlite_store, job, T0 - 60_000)
    gate, executors = _gate(sqlite_store)
    assert await gate.admit([_fire(job, T0)]) == []
    assert executors.kills == [(ADDRESS, job.id)]
    assert await gate.admit([_fire(job, T0 + 60_000)]) == []
    # The newer fire replaces the waiting one (recorded skipped); the run ends by its callback.
    assert [w.planned_time for w in await sqlite_store.overlap.waiting(job.id)] == [T0 + 60_000]
    states = await _states(sqlite_store, job)
    assert states[T0] is RunState.SKIPPED and states[T0 - 60_000] is RunState.RUNNING
    await sqlite_store.logs.record_results([HandleResult(running, 500, "killed [job running, killed]", NOW)])
    trigger = FakeTrigger()
    await OverlapRunner(sqlite_store, cast(TriggerService, trigger)).tick()
    assert [r.planned_time for r in trigger.fired] == [T0 + 60_000]


async def test_terminate_other_ends_the_runs_and_starts_at_once(sqlite_store: Store) -> None:
    job = await _job(sqlite_store, "terminate_other")
    running = await _running(sqlite_store, job, T0 - 60_000)
    gate, executors = _gate(sqlite_store)
    request = _fire(job, T0)
    assert await gate.admit([request]) == [request]
    assert executors.kills == [(ADDRESS, job.id)]
    entry = await sqlite_store.logs.get(running)
    assert entry is not None and entry.handle_code == 500 and entry.handle_msg == TERMINATED_MSG
    assert await sqlite_store.overlap.in_progress(job.id) == []


async def test_allow_all_starts_beside_the_running_one(sqlite_store: Store) -> None:
    job = await _job(sqlite_store, "allow_all")
    await _running(sqlite_store, job, T0 - 60_000)
    gate, _ = _gate(sqlite_store)
    request = _fire(job, T0)
    assert await gate.admit([request]) == [request]


async def test_the_runner_drops_waits_of_deleted_jobs_and_keeps_those_of_stopped_ones(
    sqlite_store: Store,
) -> None:
    job = await _job(sqlite_store, "buffer_one")
    assert await sqlite_store.overlap.wait(job.id, job.job_group, T0, T0, "CRON", T0)
    assert await sqlite_store.overlap.wait(12345, 1, T0, T0, "CRON", T0)
    await sqlite_store.jobs.set_status(job.id, 0, 0)
    trigger = FakeTrigger()
    await OverlapRunner(sqlite_store, cast(TriggerService, trigger)).tick()
    assert trigger.fired == [] and await sqlite_store.overlap.jobs_waiting() == [job.id]
