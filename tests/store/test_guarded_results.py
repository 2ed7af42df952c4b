"""Contract tests of the guarded result write (``logs.record_results(guard=...)``) on every
backend: an executor token's groups are a condition of the UPDATE itself (issue 19, 1.1)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import pytest
from sqlalchemy.ext.asyncio import AsyncConnection

from jobring.admin.store import GroupGuard, HandleResult, JobGroup, JobInfo, NewLog, ResultOutcome, Store
from jobring.admin.store import logs as logs_module
from jobring.admin.store.records import FirstResult

NOW = datetime(2026, 3, 10, 12, 0, 0)
WHEN = datetime(2026, 3, 10, 12, 0, 5, tzinfo=UTC)


async def _groups(store: Store) -> tuple[tuple[int, int], tuple[int, int]]:
    """(group, job) of app A and of app B."""
    out = []
    for app in ("guard-a", "guard-b"):
        group = await store.groups.create(JobGroup(app_name=app, title=app), NOW)
        job = await store.jobs.create(JobInfo(job_group=group, job_desc=app, executor_handler="h"))
        out.append((group, job))
    return out[0], out[1]


async def _run(store: Store, group: int, job: int) -> int:
    (log_id,) = await store.logs.insert_fires([NewLog(group, job, NOW, executor_handler="h",
                                                      trigger_type="CRON", trigger_code=200)])
    assert log_id is not None
    return log_id


def _done(log_id: int, msg: str) -> HandleResult:
    return HandleResult(log_id, 200, msg, WHEN)


def _count_writes(store: Store, monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """A list that grows by one with each write transaction the store opens from now on."""
    writes: list[bool] = []
    real_write = store.db.write

    def counting_write(**kwargs: Any) -> Any:
        writes.append(True)
        return real_write(**kwargs)

    monkeypatch.setattr(store.db, "write", counting_write)
    return writes


async def test_a_token_writes_only_its_groups_runs(store: Store) -> None:
    (ga, ja), (gb, jb) = await _groups(store)
    run_a, run_b = await _run(store, ga, ja), await _run(store, gb, jb)
    for guard in (GroupGuard(only=frozenset({ga})), GroupGuard(excluded=frozenset({gb}))):
        outcomes = await store.logs.record_results(
            [_done(run_b, "forged"), _done(run_a, "own"), _done(run_b + 1000, "unknown")], guard=guard)
        assert outcomes[0] is ResultOutcome.NOT_FOUND and outcomes[2] is ResultOutcome.NOT_FOUND
        entry_b = await store.logs.get(run_b)
        assert entry_b is not None and entry_b.handle_code == 0 and entry_b.handle_msg is None
    entry_a = await store.logs.get(run_a)
    assert entry_a is not None and (entry_a.handle_code, entry_a.handle_msg) == (200, "own")
    # The first guard applied A's result, the second found it a repeat.
    assert await store.logs.record_results([_done(run_a, "again")], guard=GroupGuard(only=frozenset({ga}))) \
        == [ResultOutcome.REPEAT]


async def test_a_run_created_after_the_batch_was_read_is_never_written(
        store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    """The race of the second attack: the batch names the next run ids; B's fire inserts one
    of them between the batch's read and its write."""
    (ga, ja), (gb, jb) = await _groups(store)
    newest = await _run(store, gb, jb)
    real = logs_module._existing_ids
    created: list[int] = []

    async def read_then_fire(conn: AsyncConnection, log_ids: Sequence[int], *, lock: bool) -> Any:
        found = await real(conn, log_ids, lock=lock)
        if not lock and not created:
            created.append(await _run(store, gb, jb))  # committed before the write begins
        return found

    monkeypatch.setattr(logs_module, "_existing_ids", read_then_fire)
    forged = [_done(newest + k, "forged by A") for k in range(1, 30)]
    outcomes = await store.logs.record_results(forged, guard=GroupGuard(only=frozenset({ga})))
    assert created and created[0] in {r.log_id for r in forged}
    assert set(outcomes) == {ResultOutcome.NOT_FOUND}
    entry = await store.logs.get(created[0])
    assert entry is not None and entry.handle_code == 0 and entry.handle_msg is None
    # The global token is refused the same way for a group with its own token.
    outcomes = await store.logs.record_results(forged, guard=GroupGuard(excluded=frozenset({gb})))
    assert set(outcomes) == {ResultOutcome.NOT_FOUND}


async def test_the_guard_is_part_of_the_update_itself(store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    """Even when the check before the write is fooled (here: it sees B's run as A's), the
    UPDATE's own condition keeps B's run unwritten, and the outcome says it was not
    applied (so no children, retries or alarms follow it)."""
    (ga, ja), (gb, jb) = await _groups(store)
    run_a, run_b = await _run(store, ga, ja), await _run(store, gb, jb)
    real = logs_module._existing_ids

    async def fooled(conn: AsyncConnection, log_ids: Sequence[int], *, lock: bool) -> Any:
        return {i: (code, ga) for i, (code, _) in (await real(conn, log_ids, lock=lock)).items()}

    monkeypatch.setattr(logs_module, "_existing_ids", fooled)
    outcomes = await store.logs.record_results([_done(run_b, "forged"), _done(run_a, "own")],
                                               guard=GroupGuard(only=frozenset({ga})))
    assert outcomes == [ResultOutcome.NOT_FOUND, ResultOutcome.APPLIED]
    entry_b, entry_a = await store.logs.get(run_b), await store.logs.get(run_a)
    assert entry_b is not None and entry_b.handle_code == 0
    assert entry_a is not None and entry_a.handle_code == 200


async def test_a_flood_of_unknown_ids_takes_no_write_transaction(
        store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    (ga, _), _ = await _groups(store)
    writes = _count_writes(store, monkeypatch)
    outcomes = await store.logs.record_results([_done(10_000 + k, "x") for k in range(1000)],
                                               guard=GroupGuard(only=frozenset({ga})))
    assert set(outcomes) == {ResultOutcome.NOT_FOUND} and writes == []


@pytest.mark.parametrize("returning", [True, False], ids=["update-returning", "locked"])
async def test_one_result_alone_is_judged_as_in_a_batch(store: Store, returning: bool,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """A callback of one result takes the short path where UPDATE returns rows (one statement,
    no lock first): applied, repeat, unknown and another group's run come out as in a batch,
    and the guard still holds in the UPDATE when the read before it is fooled."""
    store.db.force_no_returning = not returning
    (ga, ja), (gb, jb) = await _groups(store)
    run_a, run_b = await _run(store, ga, ja), await _run(store, gb, jb)
    own = GroupGuard(only=frozenset({ga}))
    record = store.logs.record_results
    assert await record([_done(run_a, "m" * 20_000)], guard=own) == [ResultOutcome.APPLIED]
    assert await record([_done(run_a, "again")], guard=own) == [ResultOutcome.REPEAT]
    assert await record([_done(run_a, "again")]) == [ResultOutcome.REPEAT]
    assert await record([_done(run_b + 1000, "unknown")]) == [ResultOutcome.NOT_FOUND]
    assert await record([_done(run_b, "forged")], guard=own) == [ResultOutcome.NOT_FOUND]
    real = logs_module._existing_ids

    async def fooled(conn: AsyncConnection, log_ids: Sequence[int], *, lock: bool) -> Any:
        return {i: (code, ga) for i, (code, _) in (await real(conn, log_ids, lock=lock)).items()}

    monkeypatch.setattr(logs_module, "_existing_ids", fooled)
    assert await record([_done(run_b, "forged")], guard=own) == [ResultOutcome.NOT_FOUND]
    entry_a, entry_b = await store.logs.get(run_a), await store.logs.get(run_b)
    assert entry_a is not None and (entry_a.handle_code, entry_a.handle_msg) == (200, "m" * 15_000)
    assert entry_a.handle_time_ms == int(WHEN.timestamp() * 1000)
    assert entry_b is not None and (entry_b.handle_code, entry_b.handle_msg) == (0, None)
    # Without a guard the run of any group is written.
    assert await record([_done(run_b, "ok")]) == [ResultOutcome.APPLIED]


async def test_results_the_batch_read_already_shows_take_no_write(
        store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    """An executor sending its results again: runs read with a result are repeats without a
    write; a run of another group stays not found."""
    (ga, ja), (gb, jb) = await _groups(store)
    run, other = await _run(store, ga, ja), await _run(store, gb, jb)
    assert await store.logs.record_results([_done(run, "first"), _done(other, "b")]) == [
        ResultOutcome.APPLIED, ResultOutcome.APPLIED]
    seen, _ = await store.logs.callback_targets([run, other], parents=False)
    writes = _count_writes(store, monkeypatch)
    record = store.logs.record_results
    assert await record([_done(run, "again")], seen=seen) == [ResultOutcome.REPEAT]
    twice = [_done(run, "again"), _done(run, "and again")]
    assert await record(twice, seen=seen) == [ResultOutcome.REPEAT] * 2
    assert writes == []
    only_a = GroupGuard(only=frozenset({ga}))
    assert await record([_done(other, "forged")], guard=only_a, seen=seen) == [ResultOutcome.NOT_FOUND]
    entry = await store.logs.get(run)
    assert entry is not None and entry.handle_msg == "first"
    assert writes == []


async def test_a_callbacks_targets_are_read_in_one_go(store: Store) -> None:
    """The read before a callback's write: the runs that exist (with their result and group)
    and which ids are distributed parents, also one whose run row is gone."""
    (ga, ja), _ = await _groups(store)
    plain, parent = await _run(store, ga, ja), await _run(store, ga, ja)
    assert await store.distributed.start_sharded(parent, ja, ga, "h", 2, None, "0%", 0, 1_773_144_000_000)
    orphan = parent + 50  # a parent row whose run is not in the log
    assert await store.distributed.start_sharded(orphan, ja, ga, "h", 2, None, "0%", 0, 1_773_144_000_000)
    await store.logs.record_results([_done(plain, "done")])
    ids = [plain, parent, orphan, plain + 1000]
    seen, parents = await store.logs.callback_targets(ids, parents=True)
    assert seen == {plain: (200, ga), parent: (0, ga)} and parents == {parent, orphan}
    assert await store.logs.callback_targets(ids, parents=False) == (seen, set())


@pytest.mark.parametrize("returning", [True, False], ids=["update-returning", "no-returning"])
async def test_a_first_result_is_written_without_a_read_only_when_it_may_be(
        store: Store, returning: bool) -> None:
    """``record_first_result``: a run's first result of a group the guard allows, written by the
    UPDATE alone; anything else (a repeat, an unknown run, another group's, a distributed
    parent's root task, or no UPDATE ... RETURNING) writes nothing and is left to
    record_results."""
    store.db.force_no_returning = not returning
    writes = (await store.db.capabilities()).update_returning  # MariaDB: never
    (ga, ja), (gb, jb) = await _groups(store)
    run_a, run_b, parent = await _run(store, ga, ja), await _run(store, gb, jb), await _run(store, ga, ja)
    assert await store.distributed.start_sharded(parent, ja, ga, "h", 2, None, "0%", 0, 1_773_144_000_000)
    first = store.logs.record_first_result
    for guard in (GroupGuard(only=frozenset({ga})), GroupGuard(excluded=frozenset({gb}))):
        assert not await first(_done(run_b, "forged"), guard)
        assert not await first(_done(run_b + 1000, "unknown"), guard)
        assert not await first(_done(parent, "root task"), guard)
    assert (await first(_done(run_a, "own"), GroupGuard(only=frozenset({ga}))) is not None) is writes
    assert not await first(_done(run_a, "again"), None)
    entries = {i: await store.logs.get(i) for i in (run_a, run_b, parent)}
    assert {i: (e.handle_code, e.handle_msg) for i, e in entries.items() if e is not None} == {
        run_a: (200, "own") if writes else (0, None), run_b: (0, None), parent: (0, None)}


async def test_a_first_result_returns_what_parent_links_reads_of_its_run(store: Store) -> None:
    """The lone result's write returns its run's parent link (the job's child jobs and recovery
    alarm, the run's child-fire tree) equal to what ``parent_links`` reads after it, and none
    for a run whose job was deleted."""
    if not (await store.db.capabilities()).update_returning:
        pytest.skip("without UPDATE ... RETURNING a lone result is written the batch's way")
    (ga, ja), (gb, jb) = await _groups(store)
    child = await store.jobs.create(JobInfo(job_group=ga, job_desc="child", executor_handler="h"))
    parent_job = await store.jobs.create(JobInfo(job_group=ga, job_desc="parent", executor_handler="h",
                                                 child_jobid=f"{child}, 999999", alarm_recovery=True))
    (tree_run,) = await store.logs.insert_fires([NewLog(ga, parent_job, NOW, executor_handler="h",
                                                        trigger_type="PARENT", trigger_code=200,
                                                        root_run_id=7, child_depth=2)])
    assert tree_run is not None
    plain, orphan = await _run(store, ga, ja), await _run(store, gb, jb)
    await store.jobs.delete(jb)
    written = {run: await store.logs.record_first_result(_done(run, "ok"), None)
               for run in (tree_run, plain, orphan)}
    read = await store.logs.parent_links([tree_run, plain, orphan])
    assert written == {tree_run: FirstResult(read[tree_run]), plain: FirstResult(read[plain]),
                       orphan: FirstResult(None)}
    assert orphan not in read
    link = read[tree_run]
    assert (link.child_jobid, link.alarm_recovery) == (f"{child}, 999999", True)
    assert (link.link.job_id, link.link.job_group, link.link.root_run_id, link.link.child_depth) == (
        parent_job, ga, 7, 2)


async def test_a_lone_result_and_a_batch_of_the_same_runs_write_each_result_once_in_either_order(
        store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    """The lone result's UPDATE (``record_first_result``) against a batch (``record_results``) of
    the same runs, as two callbacks carrying the same results would, both ways round: written
    alone between the batch's read and its write (the batch then finds them answered), and
    tried alone while the batch's write holds them (it then writes nothing; on SQLite, whose
    writes run one at a time, after it)."""
    if not (await store.db.capabilities()).update_returning:
        pytest.skip("without UPDATE ... RETURNING a lone result is written the batch's way")
    (ga, ja), _ = await _groups(store)
    guard = GroupGuard(only=frozenset({ga}))
    before = [await _run(store, ga, ja) for _ in range(3)]  # written alone after the batch's read
    during = [await _run(store, ga, ja) for _ in range(3)]  # tried alone inside the batch's write
    real = logs_module._existing_ids
    lone_before: list[FirstResult | None] = []
    lone_during: list[asyncio.Task[FirstResult | None]] = []

    async def read_then_lone(conn: AsyncConnection, log_ids: Sequence[int], *, lock: bool) -> Any:
        found = await real(conn, log_ids, lock=lock)
        if not lock and not lone_before:
            lone_before.extend([await store.logs.record_first_result(_done(r, "lone"), guard)
                                for r in before])
        elif lock and not lone_during:  # the batch holds these rows until it commits
            lone_during.extend(asyncio.create_task(store.logs.record_first_result(_done(r, "lone"), guard))
                               for r in during)
        return found

    monkeypatch.setattr(logs_module, "_existing_ids", read_then_lone)
    outcomes = await store.logs.record_results([_done(r, "batch") for r in before + during], guard=guard)
    assert [r is not None for r in lone_before] == [True] * 3
    if not lone_during:  # SQLite: no locked read, its writes run one at a time: after the batch
        lone_during.extend(asyncio.create_task(store.logs.record_first_result(_done(r, "lone"), guard))
                           for r in during)
    assert [await asyncio.wait_for(task, 10) for task in lone_during] == [None] * 3
    assert outcomes == [ResultOutcome.REPEAT] * 3 + [ResultOutcome.APPLIED] * 3
    for run in before + during:
        entry = await store.logs.get(run)
        assert entry is not None and entry.handle_msg == ("lone" if run in before else "batch")
