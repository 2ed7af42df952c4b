"""Child jobs: one root trigger may cause at most ``child_fire_budget`` child fires through
its whole tree (retries of child runs stay in the tree), and cycles are refused when saved,
also through several jobs, other groups, and updates validated at the same moment."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, replace

import pytest

from jobring.admin.alarms import Alarmer, AlarmService
from jobring.admin.monitors.failures import FailMonitor
from jobring.admin.services.callbacks import CallbackService
from jobring.admin.store import Store
from jobring.admin.store.records import JobInfo, LogEntry
from jobring.admin.trigger.trigger import FireRequest
from jobring.core.enums import TriggerType
from jobring.protocol.models import HandleCallbackParam
from tests.admin.api_harness import api_env
from tests.admin.trigger_kit import HOSTS, T0, Env, make_env

BUDGET = 5


@dataclass
class Tree:
    env: Env
    callbacks: CallbackService


@pytest.fixture
async def tree(sqlite_store: Store) -> AsyncIterator[Tree]:
    env = await make_env(sqlite_store, HOSTS)
    callbacks = CallbackService(sqlite_store, env.trigger, env.clock, child_fire_budget=BUDGET)
    try:
        yield Tree(env, callbacks)
    finally:
        await callbacks.close()
        await env.trigger.close()


async def _succeed(tree: Tree, runs: list[LogEntry]) -> None:
    await tree.callbacks.handle([HandleCallbackParam(r.id, T0, 200, "ok") for r in runs])
    await tree.callbacks.wait_idle()


async def _child_runs(env: Env, jobs: list[JobInfo]) -> list[LogEntry]:
    return [r for job in jobs for r in await env.store.logs.for_job(job.id) if r.trigger_type == "PARENT"]


async def test_a_fanning_tree_stops_at_the_budget_of_its_root_trigger(tree: Tree) -> None:
    env = tree.env
    leaves = [await env.job(job_desc=f"leaf {n}") for n in range(3)]
    middles = [await env.job(job_desc=f"middle {n}", child_jobid=",".join(str(j.id) for j in leaves))
               for n in range(3)]
    root_job = await env.job(child_jobid=",".join(str(j.id) for j in middles))
    root = (await env.trigger.fire(FireRequest(root_job, TriggerType.CRON))).log_ids[0]
    await _succeed(tree, [e for e in [await env.store.logs.get(root)] if e is not None])
    middle_runs = await _child_runs(env, middles)
    assert len(middle_runs) == 3 and {(r.root_run_id, r.child_depth) for r in middle_runs} == {(root, 1)}
    await _succeed(tree, middle_runs)
    leaf_runs = await _child_runs(env, leaves)
    # 3 + 9 children were asked for; the budget of the root trigger allows 5.
    assert len(leaf_runs) == BUDGET - 3
    assert {(r.root_run_id, r.child_depth) for r in leaf_runs} == {(root, 2)}
    root_entry = await env.store.logs.get(root)
    assert root_entry is not None and root_entry.child_fires == BUDGET
    messages = [(await env.store.logs.get(r.id)).handle_msg or "" for r in middle_runs]  # type: ignore[union-attr]
    # The first middle run fired 2 of its 3 children, the other two none.
    refused = [m.count("used up their budget of 5 child fires") for m in messages]
    assert sorted(refused) == [1, 3, 3], messages
    assert f"root run {root}" in messages[0] and "JOBRING_CHILD_FIRE_BUDGET" in messages[0]
    # Another trigger of the root job has a budget of its own.
    second = (await env.trigger.fire(FireRequest(root_job, TriggerType.MANUAL))).log_ids[0]
    await _succeed(tree, [e for e in [await env.store.logs.get(second)] if e is not None])
    assert len(await _child_runs(env, middles)) == 6


async def test_a_cycle_stored_before_it_was_refused_stops_at_the_budget(tree: Tree) -> None:
    env = tree.env
    first = await env.job(job_desc="a")
    second = await env.job(job_desc="b", child_jobid=str(first.id))
    # As an adopted database may hold it: a -> b -> a.
    await env.store.jobs.update(_with_children(first, second.id))
    run = (await env.trigger.fire(FireRequest(first, TriggerType.MANUAL))).log_ids[0]
    pending = [await env.store.logs.get(run)]
    for _ in range(BUDGET + 3):
        current = [p for p in pending if p is not None]
        if not current:
            break
        before = {r.id for r in await _child_runs(env, [first, second])}
        await _succeed(tree, current)
        pending = [r for r in await _child_runs(env, [first, second]) if r.id not in before]
    assert len(await _child_runs(env, [first, second])) == BUDGET


def _with_children(job: JobInfo, *children: int) -> JobInfo:
    return replace(job, child_jobid=",".join(map(str, children)))


async def test_a_retried_child_run_stays_in_its_tree(tree: Tree) -> None:
    env = tree.env
    grandchild = await env.job(job_desc="grandchild")
    child = await env.job(job_desc="child", child_jobid=str(grandchild.id), executor_fail_retry_count=1)
    root_job = await env.job(child_jobid=str(child.id))
    root = (await env.trigger.fire(FireRequest(root_job, TriggerType.CRON))).log_ids[0]
    await _succeed(tree, [e for e in [await env.store.logs.get(root)] if e is not None])
    (child_run,) = await _child_runs(env, [child])
    await tree.callbacks.handle([HandleCallbackParam(child_run.id, T0, 500, "failed")])
    monitor = FailMonitor(env.store, env.trigger, AlarmService(env.store, Alarmer([])), env.clock)
    await monitor.tick()
    retry = next(r for r in await env.store.logs.for_job(child.id) if r.trigger_type == "RETRY")
    assert (retry.root_run_id, retry.child_depth) == (root, 1)
    await _succeed(tree, [retry])
    (grand_run,) = await _child_runs(env, [grandchild])
    assert (grand_run.root_run_id, grand_run.child_depth) == (root, 2)
    root_entry = await env.store.logs.get(root)
    assert root_entry is not None and root_entry.child_fires == 2


async def test_cycles_are_refused_through_several_jobs_and_hidden_groups(sqlite_store: Store) -> None:
    async with api_env(sqlite_store) as env:
        a = await env.add_job(env.group_a, job_desc="a")
        b = await env.add_job(env.group_a, job_desc="b")
        hidden = await env.add_job(env.group_b, job_desc="other team's", child_jobid=str(a))
        async with env.client("admin") as admin:
            # An admin chained b to a job of group B (which links back to a).
            assert (await admin.patch(f"/jobs/{b}", json={"child_job_ids": [hidden]})).status_code == 200
        async with env.client("op_in") as http:
            refused = await http.patch(f"/jobs/{a}", json={"child_job_ids": [b]})
            assert refused.status_code == 409 and refused.json()["field"] == "child_job_ids", refused.text
            assert str(hidden) not in refused.text  # the hidden job is not named
        stored = await env.store.jobs.get(a)
        assert stored is not None and stored.child_jobid is None


async def test_a_cycle_closed_by_two_updates_at_once_is_undone(
    sqlite_store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    from jobring.admin.api.management import jobservice
    from jobring.admin.api.management.declared import executor_principal
    from jobring.admin.services.validation import FieldError

    async with api_env(sqlite_store) as env:
        a = await env.store.jobs.get(await env.add_job(env.group_a, job_desc="a"))
        b = await env.store.jobs.get(await env.add_job(env.group_a, job_desc="b"))
        assert a is not None and b is not None
        validate = jobservice.validate_job

        async def validated_then_raced(*args: object, **kwargs: object) -> None:
            await validate(*args, **kwargs)  # type: ignore[arg-type]
            # The other request, validated at the same moment, writes a -> b now.
            await env.store.jobs.update(_with_children(a, b.id))

        monkeypatch.setattr(jobservice, "validate_job", validated_then_raced)
        with pytest.raises(FieldError):
            await jobservice.update_job(env.services, b, _with_children(b, a.id),
                                        executor_principal(env.group_a, "app-a"))
        stored = await env.store.jobs.get(b.id)
        assert stored is not None and stored.child_jobid is None


async def test_a_new_job_named_by_a_stored_child_list_cannot_close_a_cycle(sqlite_store: Store) -> None:
    async with api_env(sqlite_store) as env:
        probe = await env.add_job(env.group_a, job_desc="probe")
        # An adopted database may list an id that is not used yet: the next job's.
        parent = await env.add_job(env.group_a, job_desc="parent", child_jobid=str(probe + 2))
        async with env.client("op_in") as http:
            made = await http.post("/jobs", json={"job_group": env.group_a, "job_desc": "new",
                                                  "executor_handler": "h", "child_job_ids": [parent]})
        assert made.status_code == 409 and made.json()["field"] == "child_job_ids", made.text
        assert await env.store.jobs.get(probe + 2) is None
