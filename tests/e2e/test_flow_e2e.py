"""Flow control end to end on two admin nodes over PostgreSQL: a group's concurrency limit over
many runs due together is never exceeded (the executor's count, sampled every 10 ms) and
every run finishes; a group's rate limit holds across both nodes (one token bucket, not one
per node); priority and fair round-robin between two concurrency keys order the runs queued
behind a full limit, whichever node queued them."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from sqlalchemy import text

from jobring.admin.store import Store, create_engine
from jobring.admin.store.tables import flow_run
from jobring.core.flow.settings import FlowSettings
from tests.e2e.admin_nodes import AdminNode, add_manual_group, start_admin, stop
from tests.e2e.databases import server_database
from tests.e2e.flow_kit import WorkingExecutor, due_together, run_nodes, until
from tests.e2e.security_kit import login

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]


@pytest.fixture
async def server_url(tmp_path: Path) -> AsyncIterator[str]:
    async for url in server_database("postgresql", tmp_path):
        yield url


def _flow(**fields: object) -> str:
    text = FlowSettings(**fields).to_json()  # type: ignore[arg-type]
    assert text is not None
    return text


async def _two_nodes(url: str, work: Path) -> list[AdminNode]:
    first = await start_admin(url, "flow-a", work)
    try:
        second = await start_admin(url, "flow-b", work)
    except BaseException:
        await stop(first)
        raise
    return [first, second]


async def test_a_limit_over_many_due_runs_is_never_exceeded_on_two_nodes(server_url: str,
                                                                          tmp_path: Path) -> None:
    limit, count = 5, 120
    store = Store(create_engine(server_url))
    nodes = await _two_nodes(server_url, tmp_path)
    executor = WorkingExecutor(admin_urls=[n.base_url for n in nodes], work_ms=60)
    await executor.start()
    try:
        group = await add_manual_group(store, executor.address)
        await store.flow.set_group_flow(group, _flow(max_concurrent_runs=limit))
        # Spread over 2 s so that both nodes claim some of the jobs.
        jobs, _ = await due_together(store, group, count, lead_ms=6_000, spacing_ms=16)
        await until(lambda: len(executor.finished) >= count, 150, f"{count} runs to finish")
        assert executor.exact_peak <= limit and executor.peak <= limit, (executor.exact_peak, executor.peak)
        assert executor.exact_peak == limit  # the limit was used, not just respected
        assert sorted(job for job, _ in executor.order) == sorted(jobs)
        nodes_used = await run_nodes(store)
        assert set(nodes_used) == {"flow-a", "flow-b"}, nodes_used
        assert await store.flow.waiting_groups() == []
    finally:
        await executor.stop()
        for node in nodes:
            await stop(node)
        await store.close()


async def _record_admissions(store: Store) -> None:
    """A database trigger keeps each run's admission instant (``started_ms`` of its flow row, the
    instant its token was taken), which the admin deletes once the run has ended."""
    async with store.engine.begin() as conn:
        await conn.execute(text("CREATE TABLE test_admitted (log_id BIGINT, started_ms BIGINT)"))
        await conn.execute(text(
            "CREATE FUNCTION test_admitted() RETURNS trigger AS $$ BEGIN"
            " INSERT INTO test_admitted VALUES (NEW.log_id, NEW.started_ms); RETURN NEW; END $$"
            " LANGUAGE plpgsql"))
        await conn.execute(text(
            f"CREATE TRIGGER test_admitted AFTER INSERT OR UPDATE OF started_ms ON {flow_run.name}"
            " FOR EACH ROW WHEN (NEW.started_ms IS NOT NULL) EXECUTE FUNCTION test_admitted()"))


async def _admissions(store: Store) -> dict[int, int]:
    async with store.engine.connect() as conn:
        rows = (await conn.execute(text("SELECT log_id, started_ms FROM test_admitted"))).all()
    admitted = {int(log_id): int(at) for log_id, at in rows}
    assert len(admitted) == len(rows), sorted(rows)  # no run admitted (a token taken) twice
    return admitted


async def test_a_rate_limit_holds_across_two_nodes(server_url: str, tmp_path: Path) -> None:
    rate, count = 5, 40  # 5 starts a second (bursts of 5): 40 runs take at least 7 s
    store = Store(create_engine(server_url))
    nodes = await _two_nodes(server_url, tmp_path)
    executor = WorkingExecutor(admin_urls=[n.base_url for n in nodes], work_ms=10)
    await executor.start()
    try:
        await _record_admissions(store)
        group = await add_manual_group(store, executor.address)
        await store.flow.set_group_flow(group, _flow(rate_limit=rate, rate_period="second"))
        jobs, _ = await due_together(store, group, count, lead_ms=6_000, spacing_ms=50)
        await until(lambda: len(executor.finished) >= count, 150, f"{count} runs to finish")
        assert sorted(job for job, _ in executor.order) == sorted(jobs)
        assert set(await run_nodes(store)) == {"flow-a", "flow-b"}
        admitted = await _admissions(store)
        assert sorted(admitted) == sorted(run for _, run in executor.order)
        starts = sorted(admitted.values())
        # One bucket for both nodes: at most burst + floor(d * rate) admissions in any d ms (the
        # bucket's bound, at the instants the nodes took the tokens; checked there, as the
        # executor's arrival times also carry each dispatch's delay, unbounded on a loaded
        # machine). A bucket per node lets through twice that and finishes in half the time.
        took = starts[-1] - starts[0]
        assert took >= (count - rate) * 1000 // rate - 100, took
        for first, at in enumerate(starts):
            in_second = sum(1 for later in starts[first:] if later - at < 1_000)
            # The exact bound is rate + rate - 1; one more for the ms between two nodes'
            # clock reads and their commits.
            assert in_second <= 2 * rate, (first, in_second, starts)
        assert await store.flow.waiting_groups() == []
    finally:
        await executor.stop()
        for node in nodes:
            await stop(node)
        await store.close()


async def test_priority_and_fairness_between_keys_across_nodes(server_url: str, tmp_path: Path) -> None:
    store = Store(create_engine(server_url))
    nodes = await _two_nodes(server_url, tmp_path)
    executor = WorkingExecutor(admin_urls=[n.base_url for n in nodes], work_ms=30)
    await executor.start()
    https = [await login(node) for node in nodes]
    try:
        group = await add_manual_group(store, executor.address)
        await store.flow.set_group_flow(group, _flow(max_concurrent_runs=1))
        created = []
        bodies = ({"job_desc": "blocker"},
                  {"job_desc": "tenants", "flow": {"concurrency_key": "{{params.tenant}}"}},
                  {"job_desc": "urgent", "flow": {"priority": 3}})
        for body in bodies:
            answer = await https[0].post("/jobs", json={"job_group": group, "executor_handler": "h", **body})
            assert answer.status_code == 201, answer.text
            created.append(answer.json()["id"])
        blocker, tenants, urgent = created
        executor.held_jobs.add(blocker)
        assert (await https[0].post(f"/jobs/{blocker}/trigger", json={})).status_code == 200
        await until(lambda: executor.order, 30, "the blocker to run")
        # Queued behind the full limit, through both nodes: 4 runs of tenant a, then one of b,
        # then an urgent one.
        fires = [(tenants, "tenant=a")] * 4 + [(tenants, "tenant=b"), (urgent, "")]
        for n, (job, param) in enumerate(fires):
            answer = await https[n % 2].post(f"/jobs/{job}/trigger", json={"executor_param": param})
            assert answer.status_code == 200, answer.text
            assert answer.json()["trigger_msg"].startswith("queued: "), answer.text
        queued = (await https[1].get("/runs", params={"job_group": group, "state": "queued"})).json()
        assert queued["total"] == len(fires)
        executor.release()
        await until(lambda: len(executor.finished) >= len(fires) + 1, 60, "every run to finish")
        started = [job for job, _ in executor.order]
        params = {}
        for run in (await https[0].get("/runs", params={"job_group": group, "limit": 50})).json()["items"]:
            params[run["id"]] = run["executor_param"]
        keys = ["urgent" if job == urgent else params[run_id] for job, run_id in executor.order[1:]]
        assert started[0] == blocker
        # The urgent run first; then tenant b gets its turn right after tenant a's first run.
        assert keys == ["urgent", "tenant=a", "tenant=b", "tenant=a", "tenant=a", "tenant=a"], keys
        assert executor.exact_peak == 1
    finally:
        for http in https:
            await http.aclose()
        await executor.stop()
        for node in nodes:
            await stop(node)
        await store.close()
