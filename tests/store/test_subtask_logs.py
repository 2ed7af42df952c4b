"""A sub-task's log lines are stored with its result on every backend, kept while it is
dispatched again, and cleared by "retry failed" (the next attempt's lines replace them)."""

from __future__ import annotations

from datetime import datetime

from jobring.admin.store import JobInfo, NewLog, Store
from jobring.admin.store.subtasks import NewSubTask, TaskUpdate
from jobring.core.distributed import Finished

T0 = 1_773_144_000_000


async def test_log_lines_stored_with_the_result(store: Store) -> None:
    job = await store.jobs.create(JobInfo(job_group=3, job_desc="m", executor_handler="root"))
    run = await store.logs.insert(NewLog(job_group=3, job_id=job, trigger_time=datetime(2026, 3, 10),
                                         trigger_code=200))
    tasks = [NewSubTask(f"r/0.{i}", "leaf") for i in range(2)]
    await store.distributed.add_map_call(run, "r", tasks, None, T0)
    await store.distributed.root_finished([(run, True, None)], T0)
    ok, bad = await store.distributed.claim(run, [("http://a/", 5)], T0)
    await store.distributed.apply([
        TaskUpdate(ok.id, Finished(1, True), "1", log="[a.py:3] [t] counted 1"),
        TaskUpdate(bad.id, Finished(1, False), message="boom", log="[a.py:5] [t] x\ny"),
    ], T0)
    rows = {t.task_key: t for t in await store.distributed.page(run)}
    assert (rows["r/0.0"].log, rows["r/0.1"].log, rows["r/0.1"].message) == (
        "[a.py:3] [t] counted 1", "[a.py:5] [t] x\ny", "boom")
    assert (await store.distributed.retry_failed(run, T0))[0] == 1
    rows = {t.task_key: t for t in await store.distributed.page(run)}
    assert (rows["r/0.0"].log, rows["r/0.1"].log) == ("[a.py:3] [t] counted 1", None)
