from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Collection, Sequence
from dataclasses import dataclass

import pytest

from jobring.admin.alarms import Alarmer, AlarmService
from jobring.admin.dispatch.client import ExecutorClient
from jobring.admin.distributed.service import DistributedService
from jobring.admin.services.callbacks import CallbackService, child_summary, parse_child_ids
from jobring.admin.store import Store
from jobring.admin.store.records import (
    FirstResult,
    GroupGuard,
    HandleResult,
    JobInfo,
    ParentLink,
    ResultOutcome,
)
from jobring.admin.trigger.trigger import FireRequest
from jobring.core.enums import TriggerType
from jobring.protocol.models import HandleCallbackParam
from tests.admin.trigger_kit import HOSTS, T0, Env, make_env


@dataclass
class CbEnv:
    env: Env
    callbacks: CallbackService


@pytest.fixture
async def cb(sqlite_store: Store) -> AsyncIterator[CbEnv]:
    env = await make_env(sqlite_store, HOSTS)
    callbacks = CallbackService(sqlite_store, env.trigger, env.clock)
    try:
        yield CbEnv(env, callbacks)
    finally:
        await callbacks.close()
        await env.trigger.close()


def done(log_id: int, code: int = 200, msg: str | None = None) -> HandleCallbackParam:
    return HandleCallbackParam(log_id, T0, code, msg)


async def fired_log(env: Env, job: JobInfo) -> int:
    result = await env.trigger.fire(FireRequest(job, TriggerType.CRON))
    return result.log_ids[0]


def test_child_ids_and_summary() -> None:
    assert parse_child_ids(" 3, x ,,4") == ["3", "x", "4"]
    known = {3: JobInfo(id=3)}
    text = child_summary(["3", "x", "4"], known)
    assert "1/3 [Job ID=3], Trigger success" in text
    assert "2/3 [Job ID=x], Trigger Fail, Trigger msg: Job ID is illegal" in text
    assert "3/3 [Job ID=4], Trigger Fail, Trigger msg: Job ID is illegal" in text


async def test_outcomes_repeat_and_unknown_are_logged(cb: CbEnv, caplog: pytest.LogCaptureFixture) -> None:
    job = await cb.env.job()
    log_id = await fired_log(cb.env, job)
    caplog.set_level(logging.INFO, logger="jobring.admin.services.callbacks")
    outcomes = await cb.callbacks.handle([done(log_id, 500, "boom"), done(log_id, 200), done(424242)])
    assert outcomes == [ResultOutcome.APPLIED, ResultOutcome.REPEAT, ResultOutcome.NOT_FOUND]
    entry = await cb.env.store.logs.get(log_id)
    assert entry is not None and entry.handle_code == 500 and entry.handle_msg == "boom"
    assert f"log repeate callback. logId={log_id}" in caplog.text
    assert "log item not found. logId=424242" in caplog.text


@dataclass
class LonePath:
    guard: GroupGuard
    links_read: list[int]  # grows with each parent_links read
    written: list[bool]  # grows with each lone write: whether it wrote the result


def lone_result_first(cb: CbEnv, monkeypatch: pytest.MonkeyPatch) -> LonePath:
    """PostgreSQL's way on this store: a lone result of a token-checked callback is written
    before anything is read, its run's parent link returned by the write."""
    async def yes() -> bool:
        return True

    lone = LonePath(GroupGuard(only=frozenset({cb.env.group_id})), [], [])
    logs = cb.env.store.logs
    real_links, real_first = logs.parent_links, logs.record_first_result

    async def counted(run_ids: Collection[int]) -> dict[int, ParentLink]:
        lone.links_read.append(len(run_ids))
        return await real_links(run_ids)

    async def first(result: HandleResult, guard: GroupGuard | None) -> FirstResult | None:
        written = await real_first(result, guard)
        lone.written.append(written is not None)
        return written

    monkeypatch.setattr(logs, "writes_lone_result_first", yes)
    monkeypatch.setattr(logs, "parent_links", counted)
    monkeypatch.setattr(logs, "record_first_result", first)
    return lone


@pytest.mark.parametrize("lone", [False, True], ids=["batch", "lone-result-first"])
async def test_success_fires_children_once_with_parent_trigger_type(
        cb: CbEnv, monkeypatch: pytest.MonkeyPatch, lone: bool) -> None:
    # Lone (PostgreSQL): the children are those the result's own write returned, not read after.
    env = cb.env
    path = lone_result_first(cb, monkeypatch) if lone else None
    guard = None if path is None else path.guard
    child_a = await env.job(job_desc="child a")
    child_b = await env.job(job_desc="child b")
    parent = await env.job(child_jobid=f"{child_a.id},oops,{child_b.id},987654")
    log_id = await fired_log(env, parent)
    await cb.callbacks.handle([done(log_id, 200, "all good")], guard)
    await cb.callbacks.wait_idle()
    if path is not None:
        assert (path.written, path.links_read) == ([True], [])
    for child in (child_a, child_b):
        (entry,) = await env.store.logs.for_job(child.id)
        assert entry.trigger_type == "PARENT" and entry.trigger_code == 200
        assert "Parent job trigger" in (entry.trigger_msg or "")
    parent_log = await env.store.logs.get(log_id)
    assert parent_log is not None and parent_log.handle_code == 200
    msg = parent_log.handle_msg or ""
    assert msg.startswith("all good\n\n>>>>>>>>>>> Trigger child job <<<<<<<<<<<")
    assert f"1/4 [Job ID={child_a.id}], Trigger success" in msg
    assert "2/4 [Job ID=oops], Trigger Fail, Trigger msg: Job ID is illegal" in msg
    assert "4/4 [Job ID=987654], Trigger Fail" in msg
    # A repeated success callback changes nothing and fires no more children.
    await cb.callbacks.handle([done(log_id, 200)], guard)
    await cb.callbacks.wait_idle()
    assert len(await env.store.logs.for_job(child_a.id)) == 1
    assert len(env.double.runs()) == 3


@pytest.mark.parametrize("lone", [False, True], ids=["batch", "lone-result-first"])
async def test_failure_fires_no_children(cb: CbEnv, monkeypatch: pytest.MonkeyPatch, lone: bool) -> None:
    env = cb.env
    path = lone_result_first(cb, monkeypatch) if lone else None
    guard = None if path is None else path.guard
    child = await env.job()
    parent = await env.job(child_jobid=str(child.id))
    log_id = await fired_log(env, parent)
    await cb.callbacks.handle([done(log_id, 500, "no")], guard)
    await cb.callbacks.wait_idle()
    assert path is None or path.written == [True]
    assert await env.store.logs.for_job(child.id) == []
    entry = await env.store.logs.get(log_id)
    assert entry is not None and entry.handle_msg == "no"


async def test_concurrent_duplicate_callbacks_fire_children_once(cb: CbEnv) -> None:
    env = cb.env
    child = await env.job()
    parent = await env.job(child_jobid=str(child.id))
    log_id = await fired_log(env, parent)
    await asyncio.gather(*(cb.callbacks.handle([done(log_id, 200)]) for _ in range(5)))
    await cb.callbacks.wait_idle()
    assert len(await env.store.logs.for_job(child.id)) == 1


@pytest.mark.parametrize("lone", [False, True], ids=["batch", "lone-result-first"])
async def test_a_success_without_children_or_recovery_alarm_costs_one_read(
    cb: CbEnv, monkeypatch: pytest.MonkeyPatch, lone: bool
) -> None:
    # After the result's write, a success reads its run's link with its job's child jobs and
    # recovery alarm in one statement; the recovery alarm's own reads follow only for a job that
    # asks for one. (Before: the link and the job were two reads, and every success spawned the
    # recovery check's two reads, beside a workflow node start's path.) A lone result written
    # first (PostgreSQL) has the link back from its write: no read at all.
    path = lone_result_first(cb, monkeypatch) if lone else None
    guard = None if path is None else path.guard
    alarms = AlarmService(cb.env.store, Alarmer([]))
    callbacks = CallbackService(cb.env.store, cb.env.trigger, cb.env.clock, alarms=alarms)
    job = await cb.env.job()
    log_id = await fired_log(cb.env, job)
    db = cb.env.store.db
    real_read = db.read
    reads = 0

    def counting(*args: object, **kwargs: object) -> object:
        nonlocal reads
        reads += 1
        return real_read(*args, **kwargs)

    monkeypatch.setattr(db, "read", counting)
    try:
        assert await callbacks.handle([done(log_id)], guard) == [ResultOutcome.APPLIED]
        await callbacks.wait_idle()
    finally:
        await callbacks.close()
        await alarms.close()
    assert reads == (0 if lone else 1)
    assert path is None or path.written == [True]


@pytest.mark.parametrize("unread", [False, True], ids=["read-first", "lone-result-first"])
async def test_a_token_checked_callback_reads_once_before_its_write(
    cb: CbEnv, monkeypatch: pytest.MonkeyPatch, unread: bool
) -> None:
    # With a token's guard and distributed runs on, a callback reads the runs' groups and which
    # runs are distributed parents in one read before its write (before: the parents, then the
    # groups, two reads on a workflow node start's path). A distributed parent's root task
    # still goes to the distributed service. ``unread`` (PostgreSQL's way): a lone result
    # that is its run's first is written with no read before; the others take the read.
    async def yes() -> bool:
        return True

    if unread:
        monkeypatch.setattr(cb.env.store.logs, "writes_lone_result_first", yes)
    distributed = DistributedService(cb.env.store, ExecutorClient(access_token="tok"), cb.env.clock)
    callbacks = CallbackService(cb.env.store, cb.env.trigger, cb.env.clock)
    callbacks.distributed = distributed
    taken: list[list[int]] = []
    real_take = distributed.take_callbacks

    async def take(items: Sequence[HandleCallbackParam], guard: GroupGuard | None
                   ) -> tuple[list[HandleCallbackParam], set[int]]:
        taken.append([i.log_id for i in items])
        return await real_take(items, guard)

    monkeypatch.setattr(distributed, "take_callbacks", take)
    job = await cb.env.job()
    plain, parent = await fired_log(cb.env, job), await fired_log(cb.env, job)
    await cb.env.store.distributed.start_sharded(parent, job.id, job.job_group, "demoJobHandler", 2, None,
                                                 None, 0, T0)
    guard = GroupGuard(only=frozenset({cb.env.group_id}))
    db = cb.env.store.db
    real_read, real_write = db.read, db.write
    reads_before_write: list[int] = []
    reads = 0

    def counting_read(*args: object, **kwargs: object) -> object:
        nonlocal reads
        reads += 1
        return real_read(*args, **kwargs)

    def noting_write(*args: object, **kwargs: object) -> object:
        reads_before_write.append(reads)
        return real_write(*args, **kwargs)

    monkeypatch.setattr(db, "read", counting_read)
    monkeypatch.setattr(db, "write", noting_write)
    try:
        assert await callbacks.handle([done(plain)], guard) == [ResultOutcome.APPLIED]
        assert reads_before_write[0] == (0 if unread else 1)
        assert taken == []
        assert await callbacks.handle([done(plain)], guard) == [ResultOutcome.REPEAT]
        assert await callbacks.handle([done(parent + 100)], guard) == [ResultOutcome.NOT_FOUND]
        assert await callbacks.handle([done(plain)], GroupGuard(only=frozenset({-1}))) == [
            ResultOutcome.NOT_FOUND]
        assert await callbacks.handle([done(parent)], guard) == [ResultOutcome.APPLIED]
        assert taken == [[parent]]
    finally:
        await callbacks.close()
    entry = await cb.env.store.logs.get(parent)
    assert entry is not None and entry.handle_code == 0  # its join ends it, not its root task
