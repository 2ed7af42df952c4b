"""Contract tests on every backend: "retry the failed sub-tasks" and "delete runs" change a
bounded number of rows per transaction (``Db.bulk_rows``, 250 on SQLite; 7 here), and stay
right when interrupted midway (the same request again completes them), repeated at once, or
met by late results."""

from __future__ import annotations

import asyncio
from collections import Counter
from datetime import datetime
from typing import Any

import pytest
from sqlalchemy import func, select

from jobring.admin.store import ClearRule, JobInfo, NewLog, Store, Tally, log_retention
from jobring.admin.store.subtasks import NewSubTask, TaskUpdate
from jobring.admin.store.subtasks.records import HOOKS
from jobring.admin.store.tables import distributed_run, job_log, subtask
from jobring.core.distributed import Finished, JoinError
from tests.store.transactions_kit import Killed, killed_at_write, rows_per_transaction

NOW = datetime(2026, 3, 10, 12, 0, 0)
T0 = 1_773_144_000_000
ROWS = 7
TASKS = 40


@pytest.fixture(autouse=True)
def short_writes(store: Store) -> None:
    store.db.bulk_rows = ROWS  # SQLite's is 250; here every backend, 7


async def _run(store: Store, group: int = 3) -> int:
    job = await store.jobs.create(JobInfo(job_group=group, job_desc="m", executor_handler="root"))
    return await store.logs.insert(NewLog(job_group=group, job_id=job, trigger_time=NOW, trigger_code=200))


async def _mapped(store: Store, count: int, group: int = 3) -> int:
    run = await _run(store, group)
    tasks = [NewSubTask(f"r/0.{i}", "leaf", "map", str(i)) for i in range(count)]
    await store.distributed.add_map_call(run, "r", tasks, None, T0)
    await store.distributed.root_finished([(run, True, None)], T0)
    return run


async def _failed_run(store: Store) -> tuple[int, list[int]]:
    """A run whose TASKS sub-tasks all failed (attempt 1): it ended failed."""
    run = await _mapped(store, TASKS)
    claimed = await store.distributed.claim(run, [("http://a/", TASKS)], T0)
    _, ended = await store.distributed.apply(
        [TaskUpdate(t.id, Finished(t.attempt, False), message="boom") for t in claimed], T0
    )
    assert [p.phase for p in ended] == ["failed"]
    return run, [t.id for t in claimed]


async def _consistent(store: Store, run: int) -> Counter[str]:
    """The parent's counters are its children's states; returns the children by status."""
    parent = await store.distributed.get(run)
    assert parent is not None
    rows = await store.distributed.page(run, limit=500)
    states = Counter(r.status for r in rows if r.kind not in HOOKS)
    assert (parent.succeeded, parent.failed, parent.running) == (
        states["succeeded"], states["failed"] + states["cancelled"], states["running"]
    )
    return states


async def test_a_retry_of_many_failed_subtasks_changes_a_few_rows_a_transaction(store: Store) -> None:
    run, _ = await _failed_run(store)
    with rows_per_transaction(store.engine) as rows:
        retried, ended = await store.distributed.retry_failed(run, T0)
    assert (retried, ended) == (TASKS, [])
    assert max(rows) <= ROWS + 1  # the sub-tasks and their parent's counters
    parent = await store.distributed.get(run)
    assert parent is not None and (parent.phase, parent.attempt, parent.failed) == ("mapping", 2, 0)
    assert await _consistent(store, run) == {"pending": TASKS}
    log = await store.logs.get(run)
    assert log is not None and log.handle_code == 0  # open again: the new join records it


async def test_an_interrupted_retry_is_consistent_and_the_same_request_completes_it(store: Store) -> None:
    run, ids = await _failed_run(store)
    tally = Tally()
    with killed_at_write(store, 4), pytest.raises(Killed):
        await store.distributed.retry_failed(run, T0, tally=tally)
    assert tally.count == 2 * ROWS  # the parent marked, then two writes of sub-tasks
    parent = await store.distributed.get(run)
    assert parent is not None and (parent.phase, parent.attempt) == ("retrying", 2)
    assert [(p.run_id, p.failed) for p in await store.distributed.retrying()] == [(run, TASKS - 2 * ROWS)]
    assert await _consistent(store, run) == {"pending": 2 * ROWS, "failed": TASKS - 2 * ROWS}
    # Meanwhile nothing of it is dispatched, and late results of the first attempt change nothing.
    assert run not in [p.run_id for p in await store.distributed.pending_runs()]
    late = [TaskUpdate(i, Finished(1, True), "1") for i in (ids[0], ids[-1])]
    assert await store.distributed.apply(late, T0) == (0, [])
    # The same request again goes on under the same attempt.
    retried, ended = await store.distributed.retry_failed(run, T0 + 1)
    assert (retried, ended) == (TASKS - 2 * ROWS, [])
    assert await store.distributed.retrying() == []
    parent = await store.distributed.get(run)
    assert parent is not None and (parent.phase, parent.attempt) == ("mapping", 2)
    assert await _consistent(store, run) == {"pending": TASKS}
    claimed = await store.distributed.claim(run, [("http://b/", TASKS)], T0 + 2)
    assert {t.attempt for t in claimed} == {2} and len(claimed) == TASKS
    results = [TaskUpdate(t.id, Finished(2, True), "1") for t in claimed]
    _, ended = await store.distributed.apply(results, T0 + 3)
    assert [(p.phase, p.attempt, p.succeeded) for p in ended] == [("succeeded", 2, TASKS)]



async def test_two_retries_at_once_put_each_subtask_back_once(store: Store) -> None:
    run, ids = await _failed_run(store)
    late = [TaskUpdate(i, Finished(1, False), message="late") for i in ids]
    first, second, _ = await asyncio.gather(
        store.distributed.retry_failed(run, T0),
        store.distributed.retry_failed(run, T0),
        store.distributed.apply(late, T0),  # a result batch sent again meanwhile
    )
    assert first[0] + second[0] == TASKS
    parent = await store.distributed.get(run)
    assert parent is not None and (parent.phase, parent.attempt) == ("mapping", 2)
    assert await _consistent(store, run) == {"pending": TASKS}
    with pytest.raises(JoinError):  # running again: nothing to retry now
        await store.distributed.retry_failed(run, T0)


async def test_a_retry_with_nothing_failed_is_refused_before_it_changes_anything(store: Store) -> None:
    run = await _mapped(store, 3)
    claimed = await store.distributed.claim(run, [("http://a/", 3)], T0)
    await store.distributed.apply([TaskUpdate(t.id, Finished(1, True), "1") for t in claimed], T0)
    with rows_per_transaction(store.engine) as rows, pytest.raises(JoinError):
        await store.distributed.retry_failed(run, T0)
    assert sum(rows) == 0
    parent = await store.distributed.get(run)
    assert parent is not None and (parent.phase, parent.attempt) == ("succeeded", 1)


async def _logged(store: Store, group: int, runs: int, children: int) -> tuple[list[int], int]:
    """``runs`` plain runs of ``group`` and one more, a parent of ``children`` sub-tasks."""
    plain = [await _run(store, group) for _ in range(runs)]
    return plain, await _mapped(store, children, group)


async def _left(store: Store, group: int) -> tuple[int, int, int]:
    """(runs, join states, sub-tasks) of the group still stored."""
    async with store.engine.connect() as conn:
        counts = [
            (await conn.execute(select(func.count()).select_from(table).where(column == group))).scalar_one()
            for table, column in (
                (job_log, job_log.c.job_group),
                (distributed_run, distributed_run.c.job_group),
                (subtask, subtask.c.job_group),
            )
        ]
    return counts[0], counts[1], counts[2]


async def test_a_clear_of_many_runs_changes_a_few_rows_a_transaction(store: Store) -> None:
    await _logged(store, 3, 20, TASKS)
    _, parent = await _logged(store, 4, 5, 10)
    with rows_per_transaction(store.engine) as rows:
        deleted = await store.logs.clear(ClearRule.ALL, NOW, group_id=3)
    assert deleted == 21
    assert max(rows) <= ROWS + 1  # 7 runs (one with its join state), or 7 sub-tasks
    assert await _left(store, 3) == (0, 0, 0)
    assert await _left(store, 4) == (6, 1, 10)  # another group's runs and sub-tasks stay
    assert await store.distributed.get(parent) is not None


async def test_an_interrupted_clear_leaves_no_orphan_and_the_same_clear_completes_it(store: Store) -> None:
    await _logged(store, 3, 3, TASKS)
    await _logged(store, 4, 2, 10)
    tally = Tally()
    with killed_at_write(store, 4), pytest.raises(Killed):
        await store.logs.clear(ClearRule.ALL, NOW, group_id=3, tally=tally)
    # The parent ends, then its sub-tasks go, a part a write: the runs are all still there.
    assert tally.count == 0
    assert await _left(store, 3) == (4, 1, TASKS - 2 * ROWS)
    assert await store.logs.clear(ClearRule.ALL, NOW, group_id=3, tally=tally) == 4
    assert tally.count == 4
    assert await _left(store, 3) == (0, 0, 0)
    assert await _left(store, 4) == (3, 1, 10)


async def test_a_clear_failing_in_a_write_counts_only_the_runs_deleted(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    for _ in range(3 * ROWS - 1):
        await _run(store)
    real = log_retention.delete_parents_of_deleted
    calls = 0

    async def failing_second(conn: Any, run_ids: Any) -> list[int]:
        nonlocal calls
        calls += 1
        if calls == 2:  # the second write has deleted its runs, and fails before its commit
            raise Killed
        return await real(conn, run_ids)

    monkeypatch.setattr(log_retention, "delete_parents_of_deleted", failing_second)
    tally = Tally()
    with pytest.raises(Killed):
        await store.logs.clear(ClearRule.ALL, NOW, group_id=3, tally=tally)
    assert tally.count == ROWS  # what the audit says was deleted: the first write's runs only
    assert (await _left(store, 3))[0] == 2 * ROWS - 1


async def test_a_clear_interrupted_after_a_running_parents_subtasks_leaves_it_ended(store: Store) -> None:
    _, parent = await _logged(store, 3, 2, TASKS)
    _, other = await _logged(store, 4, 1, 10)
    with killed_at_write(store, 3), pytest.raises(Killed):  # after the first part of its sub-tasks
        await store.logs.clear(ClearRule.ALL, NOW, group_id=3)
    runs, states, tasks = await _left(store, 3)
    assert (runs, states) == (3, 1) and 0 < tasks < TASKS  # killed midway through its sub-tasks
    # It would wait for ever for the sub-tasks gone: it ended failed, neither retried nor alarmed.
    ended = await store.distributed.get(parent)
    assert ended is not None and (ended.phase, ended.result_recorded) == ("failed", 1)
    log = await store.logs.get(parent)
    assert log is not None and (log.handle_code, log.alarm_status) == (500, 1)
    assert log.handle_msg is not None and "run-log clear" in log.handle_msg
    assert await store.distributed.unrecorded() == []
    assert [p.run_id for p in await store.distributed.pending_runs()] == [other]  # not sent on
    still = await store.distributed.get(other)  # another group's parent is left as it was
    assert still is not None and still.phase == "mapping"
    assert await store.logs.clear(ClearRule.ALL, NOW, group_id=3) == 3
    assert await _left(store, 3) == (0, 0, 0)
