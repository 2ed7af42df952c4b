"""Contract tests of ``store.logs`` on every backend."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import text

from jobring.admin.store import (
    ClearRule,
    Conflict,
    DayCount,
    HandleResult,
    JobGroup,
    JobInfo,
    LogStatus,
    NewLog,
    ResultOutcome,
    RunCursor,
    Store,
    TriggerResult,
    create_engine,
)
from jobring.admin.store.log_conditions import unalarmed_failure_statements
from jobring.admin.store.run_estimate import round_estimate
from jobring.admin.store.tables import job_log

NOW = datetime(2026, 3, 10, 12, 0, 0)


async def _job(store: Store) -> tuple[int, int]:
    group = await store.groups.create(JobGroup(app_name="logs-app", title="Logs"), NOW)
    job = await store.jobs.create(JobInfo(job_group=group, job_desc="j", executor_handler="h"))
    return group, job


def _fire(group: int, job: int, planned: int | None, at: datetime = NOW, **fields: object) -> NewLog:
    return NewLog(group, job, at, executor_handler="h", trigger_type="CRON", planned_time=planned, **fields)  # type: ignore[arg-type]


async def test_insert_and_get(store: Store) -> None:
    group, job = await _job(store)
    log_id = await store.logs.insert(_fire(group, job, None, executor_param="x" * 600, admin_node="n1"))
    log = await store.logs.get(log_id)
    assert log is not None
    assert (log.job_id, log.job_group, log.trigger_time, log.handle_code, log.alarm_status) == (
        job,
        group,
        NOW,
        0,
        0,
    )
    assert log.executor_param == "x" * 512  # capped at the column size, not rejected by the server
    assert log.admin_node == "n1" and log.planned_time is None
    assert await store.logs.get(log_id + 1000) is None
    await store.logs.insert(_fire(group, job, 5_000))
    with pytest.raises(Conflict):
        await store.logs.insert(_fire(group, job, 5_000))


@pytest.mark.parametrize("returning", [True, False], ids=["returning", "per-row"])
async def test_insert_fires_skips_recorded_planned_fires(store: Store, returning: bool) -> None:
    store.db.force_no_returning = not returning
    group, job = await _job(store)
    first = await store.logs.insert_fires([_fire(group, job, 1_000), _fire(group, job, 2_000)])
    assert all(isinstance(i, int) for i in first) and first[0] != first[1]
    again = await store.logs.insert_fires(
        [
            _fire(group, job, 2_000),  # already recorded
            _fire(group, job, 3_000),
            _fire(group, job, None),  # manual trigger: no identity, always inserted
            _fire(group, job, 3_000),  # duplicate inside the batch
            _fire(group, job, None),
        ]
    )
    assert again[0] is None and again[3] is None
    assert isinstance(again[1], int) and isinstance(again[2], int) and isinstance(again[4], int)
    assert len({again[1], again[2], again[4], *first}) == 5
    logs = await store.logs.for_job(job)
    assert sorted(lg.planned_time or 0 for lg in logs) == [0, 0, 1_000, 2_000, 3_000]
    by_id = {lg.id: lg for lg in logs}
    assert by_id[again[1]].planned_time == 3_000  # type: ignore[index]
    assert await store.logs.insert_fires([]) == []


async def test_insert_fires_large_batch(store: Store) -> None:
    group, job = await _job(store)
    rows = [_fire(group, job, 10_000 + i) for i in range(700)]
    ids = await store.logs.insert_fires(rows)
    assert len(set(ids)) == 700 and None not in ids
    logs = {lg.id: lg.planned_time for lg in await store.logs.for_job(job)}
    assert [logs[i] for i in ids if i is not None] == [r.planned_time for r in rows]


async def test_update_trigger_results(store: Store) -> None:
    group, job = await _job(store)
    a, b = await store.logs.insert_fires([_fire(group, job, 1), _fire(group, job, 2)])
    assert a is not None and b is not None
    count = await store.logs.update_trigger_results(
        [
            TriggerResult(a, "http://10.0.0.1:9999/", 200, "ok", dispatch_time=1_700_000_000_123),
            TriggerResult(b, None, 500, "no executor online", executor_sharding_param="0/2"),
            TriggerResult(b + 999, None, 500, "gone"),
        ]
    )
    assert count == 2
    la, lb = await store.logs.get(a), await store.logs.get(b)
    assert la is not None and lb is not None
    assert (la.executor_address, la.trigger_code, la.trigger_msg, la.dispatch_time) == (
        "http://10.0.0.1:9999/",
        200,
        "ok",
        1_700_000_000_123,
    )
    assert (lb.trigger_code, lb.executor_sharding_param, lb.dispatch_time) == (500, "0/2", None)
    await store.logs.update_trigger_results([TriggerResult(b, None, 500, "ü" * 20_000)])
    capped = await store.logs.get(b)
    assert capped is not None and capped.trigger_msg == "ü" * 15_000
    assert capped.executor_sharding_param == "0/2"  # not given this time: kept


async def test_append_trigger_msg_touches_only_the_message(store: Store) -> None:
    group, job = await _job(store)
    a, b, c = await store.logs.insert_fires([_fire(group, job, planned) for planned in (1, 2, 3)])
    assert a is not None and b is not None and c is not None
    # The run was read with trigger code 0; its dispatch is confirmed before the mark lands.
    await store.logs.update_trigger_results([TriggerResult(a, "http://10.0.0.1:9999/", 200, "sent")])
    await store.logs.update_trigger_results([TriggerResult(c, None, 500, "ü" * 15_000)])
    assert await store.logs.append_trigger_msg([a, b, c, c + 999], "\n\nmark") == 3
    la, lb, lc = await store.logs.get(a), await store.logs.get(b), await store.logs.get(c)
    assert la is not None and lb is not None and lc is not None
    assert (la.trigger_code, la.executor_address) == (200, "http://10.0.0.1:9999/")
    assert la.trigger_msg == "sent\n\nmark"
    assert (lb.trigger_code, lb.trigger_msg) == (0, "\n\nmark")  # a run without a message yet
    assert lc.trigger_msg == "ü" * 15_000  # already at the cap: stays within it
    assert await store.logs.append_trigger_msg([], "x") == 0


async def test_record_results_once_per_log(store: Store) -> None:
    group, job = await _job(store)
    a, b = await store.logs.insert_fires([_fire(group, job, 1), _fire(group, job, 2)])
    assert a is not None and b is not None
    when = datetime(2026, 3, 10, 12, 0, 5, 999_000, tzinfo=UTC)
    outcomes = await store.logs.record_results(
        [
            HandleResult(a, 200, "done", when),
            HandleResult(a, 500, "late repeat", when),
            HandleResult(b, 500, "é" * 20_000, when),
            HandleResult(b + 10_000, 200, None, when),
        ]
    )
    assert outcomes == [
        ResultOutcome.APPLIED,
        ResultOutcome.REPEAT,
        ResultOutcome.APPLIED,
        ResultOutcome.NOT_FOUND,
    ]
    la, lb = await store.logs.get(a), await store.logs.get(b)
    assert la is not None and lb is not None
    assert (la.handle_code, la.handle_msg, la.handle_time) == (200, "done", datetime(2026, 3, 10, 12, 0, 5))
    assert lb.handle_msg == "é" * 15_000
    assert await store.logs.record_results([HandleResult(a, 500, "again", when)]) == [ResultOutcome.REPEAT]


async def _seed_statuses(store: Store, group: int, job: int) -> dict[str, int]:
    ids = await store.logs.insert_fires([_fire(group, job, p, NOW - timedelta(hours=p)) for p in range(1, 6)])
    names = ["ok", "handle_fail", "trigger_fail", "running", "pending"]
    mapping = dict(zip(names, [i for i in ids if i is not None], strict=True))
    await store.logs.update_trigger_results(
        [
            TriggerResult(mapping["ok"], "a:1", 200, ""),
            TriggerResult(mapping["handle_fail"], "a:1", 200, ""),
            TriggerResult(mapping["trigger_fail"], None, 500, "no address"),
            TriggerResult(mapping["running"], "a:2", 200, ""),
        ]
    )
    await store.logs.record_results(
        [HandleResult(mapping["ok"], 200, None, NOW), HandleResult(mapping["handle_fail"], 500, "boom", NOW)]
    )
    return mapping


async def test_list_filters_and_paging(store: Store) -> None:
    group, job = await _job(store)
    other_group = await store.groups.create(JobGroup(app_name="other", title="O"), NOW)
    other_job = await store.jobs.create(JobInfo(job_group=other_group, job_desc="o"))
    ids = await _seed_statuses(store, group, job)
    await store.logs.insert(_fire(other_group, other_job, None, NOW - timedelta(days=3)))

    everything = await store.logs.list(limit=3)
    assert everything.total == 6 and len(everything.items) == 3
    assert everything.items[0].trigger_time >= everything.items[-1].trigger_time  # type: ignore[operator]
    assert (await store.logs.list(group_ids=[group])).total == 5
    assert (await store.logs.list(group_ids=[])).total == 0
    assert (await store.logs.list(job_id=other_job)).total == 1
    assert {lg.id for lg in (await store.logs.list(status=LogStatus.SUCCESS)).items} == {ids["ok"]}
    fail = {lg.id for lg in (await store.logs.list(status=LogStatus.FAIL)).items}
    assert fail == {ids["handle_fail"], ids["trigger_fail"]}
    assert {lg.id for lg in (await store.logs.list(status=LogStatus.RUNNING)).items} == {ids["running"]}
    window = await store.logs.list(trigger_from=NOW - timedelta(hours=3), trigger_to=NOW - timedelta(hours=2))
    assert {lg.id for lg in window.items} == {ids["trigger_fail"], ids["handle_fail"]}
    page2 = await store.logs.list(group_ids=[group], offset=4, limit=2)
    assert page2.total == 5 and len(page2.items) == 1


async def test_keyset_paging_walks_every_row_once_with_ties(store: Store) -> None:
    group, job = await _job(store)
    # Three runs per trigger instant: the cursor must break ties by id.
    times = [NOW - timedelta(minutes=m) for m in range(4) for _ in range(3)]
    await store.logs.insert_fires([_fire(group, job, None, at) for at in times])
    expected = [lg.id for lg in (await store.logs.list(limit=100)).items]
    seen: list[int] = []
    cursor = None
    while True:
        page = await store.logs.list(limit=5, before=cursor)
        assert page.total == 12 and page.total_exact  # the cursor does not narrow the total
        seen += [lg.id for lg in page.items]
        if len(page.items) < 5:
            break
        last = page.items[-1]
        assert last.trigger_time is not None
        cursor = RunCursor(last.trigger_time, last.id)
    assert seen == expected and len(set(seen)) == 12
    # newest first, ties newest id first
    assert seen == [lg.id for lg in sorted((await store.logs.list(limit=100)).items,
                                           key=lambda lg: (lg.trigger_time, lg.id), reverse=True)]
    # filters still apply after a cursor
    first = (await store.logs.list(limit=1, job_id=job)).items[0]
    after = await store.logs.list(job_id=job + 1000, before=RunCursor(first.trigger_time, first.id))  # type: ignore[arg-type]
    assert after.items == [] and after.total == 0


async def test_capped_count_says_when_the_total_is_estimated(store: Store) -> None:
    group, job = await _job(store)
    await store.logs.insert_fires([_fire(group, job, None, NOW - timedelta(seconds=s)) for s in range(30)])
    exact = await store.logs.list(limit=5, count_cap=30)
    assert (exact.total, exact.total_exact, len(exact.items)) == (30, True, 5)
    capped = await store.logs.list(limit=5, count_cap=10)
    assert not capped.total_exact and capped.total > 10 and len(capped.items) == 5
    assert [lg.id for lg in capped.items] == [lg.id for lg in exact.items]
    none = await store.logs.list(limit=5, count_cap=0, job_id=job + 1000)
    assert (none.total, none.total_exact, none.items) == (0, True, [])


async def test_failed_unalarmed_and_alarm_cas(store: Store) -> None:
    group, job = await _job(store)
    ids = await _seed_statuses(store, group, job)
    failed = await store.logs.failed_unalarmed(100)
    assert [lg.id for lg in failed] == sorted([ids["handle_fail"], ids["trigger_fail"]])
    target = ids["handle_fail"]
    assert await store.logs.set_alarm_status(target, 0, -1) is True
    assert await store.logs.set_alarm_status(target, 0, -1) is False  # someone else holds it
    assert [lg.id for lg in await store.logs.failed_unalarmed(100)] == [ids["trigger_fail"]]
    assert await store.logs.set_alarm_status(target, -1, 2) is True
    log = await store.logs.get(target)
    assert log is not None and log.alarm_status == 2
    assert len(await store.logs.failed_unalarmed(1)) == 1


async def test_failed_unalarmed_codes_at_the_edges_of_success(store: Store) -> None:
    # The query asks "not 0 and not 200" as index ranges: every edge of those ranges counts.
    group, job = await _job(store)
    codes = [(200, 0), (200, 200), (0, 0), (-1, 0), (1, 0), (199, 0), (201, 0), (500, 0),
             (200, -1), (200, 1), (200, 199), (200, 201), (200, 502)]
    ids = {}
    for trigger_code, handle_code in codes:
        ids[(trigger_code, handle_code)] = await store.logs.insert(
            _fire(group, job, None, trigger_code=trigger_code, handle_code=handle_code))
    failed = [lg.id for lg in await store.logs.failed_unalarmed(100)]
    expected = sorted(i for (t, h), i in ids.items() if t not in (0, 200) or h not in (0, 200))
    assert failed == expected and len(failed) == 10
    # the limit keeps the lowest ids across both code columns; after_id pages on
    assert [lg.id for lg in await store.logs.failed_unalarmed(3)] == expected[:3]
    assert [lg.id for lg in await store.logs.failed_unalarmed(100, after_id=expected[4])] == expected[5:]


async def test_lost_runs(store: Store) -> None:
    group, job = await _job(store)
    ids = await _seed_statuses(store, group, job)  # "running" is on a:2, triggered NOW-4h
    cutoff = NOW - timedelta(minutes=10)
    assert [lg.id for lg in await store.logs.lost_runs(cutoff, ["a:2"])] == []
    assert [lg.id for lg in await store.logs.lost_runs(cutoff, ["a:1"])] == [ids["running"]]
    assert [lg.id for lg in await store.logs.lost_runs(cutoff, [])] == [ids["running"]]
    assert await store.logs.lost_runs(NOW - timedelta(hours=5), []) == []


async def test_delete_older_than_in_batches(store: Store) -> None:
    group, job = await _job(store)
    ids = await store.logs.insert_fires([_fire(group, job, d, NOW - timedelta(days=d)) for d in range(10)])
    deleted = await store.logs.delete_older_than(NOW - timedelta(days=6, hours=12), batch=2)
    assert deleted == 3
    remaining = {lg.id for lg in await store.logs.for_job(job)}
    assert remaining == set(ids[:7])  # type: ignore[arg-type]
    assert await store.logs.delete_older_than(NOW - timedelta(days=30)) == 0


async def test_clear_rules(store: Store) -> None:
    group, job = await _job(store)
    other_job = await store.jobs.create(JobInfo(job_group=group, job_desc="other"))
    await store.logs.insert_fires([_fire(group, job, d, NOW - timedelta(days=d)) for d in range(0, 40, 3)])
    await store.logs.insert_fires([_fire(group, other_job, 1, NOW - timedelta(days=400))])
    # older than 1 week, for one job only
    assert await store.logs.clear(ClearRule.OLDER_THAN_1_WEEK, NOW, job_id=job) == 11
    assert len(await store.logs.for_job(job)) == 3
    assert len(await store.logs.for_job(other_job)) == 1
    await store.logs.insert_fires([_fire(group, job, 100 + i, NOW) for i in range(1_100)])
    assert await store.logs.clear(ClearRule.KEEP_LAST_1K, NOW, group_id=group) == 1_104 - 1_000
    assert (await store.logs.list(group_ids=[group])).total == 1_000
    assert await store.logs.clear(ClearRule.KEEP_LAST_1K, NOW, group_id=group) == 0
    assert await store.logs.clear(ClearRule.ALL, NOW, group_id=group, job_id=job) == 1_000
    assert (await store.logs.list()).total == 0
    assert ClearRule.from_reference_type(5) is ClearRule.KEEP_LAST_1K
    with pytest.raises(ValueError):
        ClearRule.from_reference_type(10)


async def test_counts_by_day(store: Store) -> None:
    group, job = await _job(store)
    ids = await _seed_statuses(store, group, job)  # all on 2026-03-10 between 07:00 and 11:00
    await store.logs.insert(_fire(group, job, None, datetime(2026, 3, 8, 23, 59, 59)))
    del ids
    days = await store.logs.counts_by_day(datetime(2026, 3, 8), datetime(2026, 3, 10, 18))
    assert days == [
        DayCount(datetime(2026, 3, 8), 1, 0, 0),
        DayCount(datetime(2026, 3, 9), 0, 0, 0),
        DayCount(datetime(2026, 3, 10), 2, 1, 2),  # running: triggered-200 and not-yet-triggered
    ]


async def test_fail_monitor_query_reads_by_index_not_by_id(store: Store) -> None:
    # 20,000 successful runs (alarm_status stays 0 on success) and a few failures: the plan
    # must use the (alarm_status, code) indexes, never a walk of the whole table in id order.
    group, job = await _job(store)
    async with store.engine.begin() as conn:
        await conn.execute(job_log.insert(), [
            {"job_group": group, "job_id": job, "trigger_code": 200,
             "handle_code": 500 if i % 1000 == 0 else 200}
            for i in range(20_000)
        ])
        analyze = {"mariadb": "ANALYZE TABLE xxl_job_log"}.get(store.backend, "ANALYZE xxl_job_log")
        await conn.execute(text(analyze))
    explain = {"sqlite": "EXPLAIN QUERY PLAN "}.get(store.backend, "EXPLAIN ")
    code_indexes = (("ix_job_log_alarm", "I_handle_code"), ("ix_job_log_alarm_trigger",))
    for stmt, indexes in zip(unalarmed_failure_statements(0, 1000, store.backend), code_indexes, strict=True):
        sql = str(stmt.compile(store.engine.sync_engine, compile_kwargs={"literal_binds": True}))
        async with store.engine.connect() as conn:
            rows = (await conn.execute(text(explain + sql))).all()
        plan = "\n".join(" ".join(str(c) for c in row) for row in rows)
        assert any(index in plan for index in indexes), plan
        assert "Seq Scan" not in plan and "pkey" not in plan and "SCAN xxl_job_log" not in plan, plan
    assert len(await store.logs.failed_unalarmed(1000)) == 20


async def test_child_fires_of_a_root_run_never_exceed_the_budget(store: Store) -> None:
    group, job = await _job(store)
    root = await store.logs.insert(_fire(group, job, None))
    child = await store.logs.insert(_fire(group, job, None, root_run_id=root, child_depth=1))
    stored = await store.logs.get(child)
    assert stored is not None and (stored.root_run_id, stored.child_depth, stored.child_fires) == (root, 1, 0)
    assert await store.logs.reserve_child_fires(root, 3, 5) == 3
    assert await store.logs.reserve_child_fires(root, 3, 5) == 2
    assert await store.logs.reserve_child_fires(root, 1, 5) == 0
    assert await store.logs.reserve_child_fires(root + 1000, 1, 5) == 0  # no such root run
    # Several nodes (separate engines) at once: together they get exactly what is left.
    other = await store.logs.insert(_fire(group, job, None))
    url = store.engine.url.render_as_string(hide_password=False)
    stores = [Store(create_engine(url)) for _ in range(4)]
    try:
        granted = await asyncio.gather(*(s.logs.reserve_child_fires(other, 3, 10) for s in stores * 2))
    finally:
        for s in stores:
            await s.close()
    assert sum(granted) == 10
    entry = await store.logs.get(other)
    assert entry is not None and entry.child_fires == 10


async def test_an_estimated_total_is_extrapolated_from_time_and_oldest_first_pages_back(store: Store) -> None:
    group, job = await _job(store)
    # 600 runs a minute apart: the newest 11 span 10 minutes, all of them 599.
    await store.logs.insert_fires([_fire(group, job, None, NOW - timedelta(minutes=m)) for m in range(600)])
    capped = await store.logs.list(limit=5, count_cap=10)
    assert not capped.total_exact and capped.total == 660  # 11 x 599 / 10 = 658.9, two digits
    newest = await store.logs.list(limit=600)
    oldest = await store.logs.list(limit=3, oldest_first=True)
    assert [e.id for e in oldest.items] == [e.id for e in reversed(newest.items)][:3]
    last = oldest.items[-1]
    assert last.trigger_time is not None
    more = await store.logs.list(limit=3, oldest_first=True, before=RunCursor(last.trigger_time, last.id))
    assert [e.id for e in more.items] == [e.id for e in reversed(newest.items)][3:6]


def test_estimates_keep_two_significant_digits() -> None:
    assert [round_estimate(v) for v in (7, 99, 1234, 50_191, 999_999)] == [7, 99, 1200, 50_000, 1_000_000]


async def test_links_of_many_runs(store: Store) -> None:
    # The callbacks read which job, group and child-fire tree each run of a batch belongs to.
    group, job = await _job(store)
    first = await store.logs.insert(_fire(group, job, 1_000))
    second = await store.logs.insert(_fire(group, job, 2_000))
    await store.logs.record_results([HandleResult(second, 200, "ok", NOW)])
    links = await store.logs.links([first, second, second + 1000])
    assert set(links) == {first, second}
    assert (links[first].job_id, links[first].job_group, links[first].child_depth) == (job, group, 0)
    assert await store.logs.links([]) == {}
