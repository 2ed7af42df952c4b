"""The sub-tasks a dead admin node claimed: their executors are asked first; those held are
taken over (never sent again), those not held (or whose executor left, or cannot answer for
too long, or has no such endpoint) are lost and dispatched again."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime
from typing import Any, cast

from jobring.admin.dispatch.client import ExecutorClient
from jobring.admin.distributed.recovery import RECEIVED_PATH, DeadNodeSubTasks
from jobring.admin.store import JobGroup, JobInfo, NewLog, Store
from jobring.admin.store.subtasks import DistributedRun, NewSubTask
from jobring.core.clock import ManualClock
from jobring.protocol.models import ReturnT, msg_uri_not_found

NOW = datetime(2026, 3, 10, 12, 0, 0)
T0 = 1_773_144_000_000
A, B, C, GONE = "http://a/", "http://b/", "http://c/", "http://gone/"


class Executors:
    """Answers /jobring/subtasks/received per address: the ids held, an error, or no endpoint."""

    def __init__(self) -> None:
        self.held: dict[str, set[int]] = {}
        self.failing: set[str] = set()
        self.old: set[str] = set()
        self.asked: list[tuple[str, list[list[int]], str | None]] = []

    async def call(self, address: str, path: str, body: dict[str, Any] | None, token: str | None = None,
                   app_name: str | None = None) -> ReturnT:
        assert path == RECEIVED_PATH and body is not None
        self.asked.append((address, body["tasks"], token))
        if address in self.failing:
            return ReturnT.fail(f"executor {address} timed out (ReadTimeout): ")
        if address in self.old:
            return ReturnT.fail(msg_uri_not_found("/" + RECEIVED_PATH))
        held = self.held.get(address, set())
        return ReturnT.success({"received": [t[1] for t in body["tasks"] if t[1] in held]})


async def _claimed_by_a_dead_node(store: Store, per_executor: int) -> tuple[int, int, dict[str, list[int]]]:
    """(group, run, ids by executor) of a map run whose 3 x ``per_executor`` sub-tasks node
    "dead" claimed for A, B and C."""
    group = await store.groups.create(JobGroup(app_name="app", title="t", address_type=1,
                                               address_list=f"{A},{B},{C}", access_token="tok"), NOW)
    job = await store.jobs.create(JobInfo(job_group=group, job_desc="m", executor_handler="root"))
    run = await store.logs.insert(NewLog(job_group=group, job_id=job, trigger_time=NOW, trigger_code=200))
    tasks = [NewSubTask(f"r/0.{i}", "work", item=str(i)) for i in range(3 * per_executor)]
    await store.distributed.add_map_call(run, "r", tasks, None, T0)
    await store.nodes.announce("dead", T0 - 1)
    await store.nodes.announce("alive", T0 + 3_600_000)
    slots = [(A, per_executor), (B, per_executor), (C, per_executor)]
    by_executor: dict[str, list[int]] = {}
    for task in await store.distributed.claim(run, slots, T0, node="dead"):
        by_executor.setdefault(task.executor_address, []).append(task.id)
    return group, run, by_executor


def _recovery(store: Store, executors: Executors, clock: ManualClock) -> DeadNodeSubTasks:
    async def record(parents: Sequence[DistributedRun]) -> None:
        raise AssertionError(f"no parent ends here: {parents}")

    return DeadNodeSubTasks(store, cast(ExecutorClient, executors), clock, record, "alive",
                            give_up_after_ms=30_000)


async def _states(store: Store, run: int, ids: list[int]) -> set[tuple[str, int, str | None]]:
    rows = {r.id: r for r in await store.distributed.page(run, limit=1_000)}
    return {(rows[i].status, rows[i].attempt, rows[i].dispatched_by) for i in ids}


async def test_held_sub_tasks_are_taken_over_the_others_sent_again(sqlite_store: Store) -> None:
    store = sqlite_store
    _, run, ids = await _claimed_by_a_dead_node(store, 3)
    executors = Executors()
    executors.held[A] = set(ids[A])  # all of A's arrived
    executors.held[B] = {ids[B][0]}  # one of B's; C got none (the node died before)
    recovery = _recovery(store, executors, ManualClock(T0))
    assert await recovery.round() == 2 + 3
    assert (recovery.adopted, recovery.resent) == (4, 5)
    assert await _states(store, run, ids[A] + ids[B][:1]) == {("running", 1, "alive")}
    assert await _states(store, run, ids[B][1:] + ids[C]) == {("pending", 1, None)}
    asked = {address: (tasks, token) for address, tasks, token in executors.asked}
    assert asked[A] == ([[run, i, 1] for i in ids[A]], "tok")
    assert sorted(asked) == [A, B, C]
    # Nothing is left to ask about: taken over or dispatched again.
    assert await recovery.round() == 0
    assert len(executors.asked) == 3


async def test_no_answer_waits_a_while_no_endpoint_and_a_gone_executor_do_not(sqlite_store: Store) -> None:
    store = sqlite_store
    group, run, ids = await _claimed_by_a_dead_node(store, 2)
    saved = await store.groups.get(group)
    assert saved is not None
    await store.groups.update(replace(saved, address_list=f"{A},{B}"), NOW)  # C left
    executors = Executors()
    executors.failing.add(A)  # unreachable for now
    executors.old.add(B)  # an executor without the endpoint: at least once, as before
    clock = ManualClock(T0)
    recovery = _recovery(store, executors, clock)
    assert await recovery.round() == 4  # B's (no endpoint) and C's (left the group)
    assert await _states(store, run, ids[B] + ids[C]) == {("pending", 1, None)}
    assert await _states(store, run, ids[A]) == {("running", 1, "dead")}
    clock.advance(29_999)
    assert await recovery.round() == 0  # asked again, still no answer
    assert await _states(store, run, ids[A]) == {("running", 1, "dead")}
    clock.advance(1)
    assert await recovery.round() == 2  # too long without an answer: sent again
    assert await _states(store, run, ids[A]) == {("pending", 1, None)}
    assert [address for address, _, _ in executors.asked] == [A, B, A, A]
