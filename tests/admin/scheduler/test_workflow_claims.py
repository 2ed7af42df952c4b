"""A workflow node attempt's claim while its admin is still firing it (security review finding
4): an admin whose fire takes longer than ``stale_ms`` (here: FAILOVER probing an executor that
does not answer yet) renews its claim, so no other admin takes the attempt over; and one whose
claim was taken over all the same does not send its /run (with XXL-JOB executors, which cannot
say whether they got a run, the node would run twice). Two drivers (two admin nodes, each
with its own trigger service) over one store, a manual clock and an executor double."""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import pytest
from sqlalchemy.exc import OperationalError

from jobring.admin.services.workflows import WorkflowDriver
from jobring.admin.store import Store
from jobring.admin.store.workflows import NodeRunRecord, NodeRunState, WorkflowRecord
from jobring.admin.trigger.trigger import FireRequest, TriggerService
from jobring.admin.trigger.unsure import MSG_NOT_EXISTS, UnsureFires
from jobring.core.enums import TriggerType
from jobring.core.workflow import parse_workflow
from jobring.protocol.models import FAIL_CODE, ReturnT, msg_uri_not_found
from tests.admin.trigger_kit import HOSTS, T0, Env, make_env

STALE_MS = 30_000
WAIT_S = 5


@dataclass
class Admins:
    env: Env
    b_trigger: TriggerService
    a: WorkflowDriver
    b: WorkflowDriver
    unsure: UnsureFires
    probing: asyncio.Event  # the first executor is being asked (FAILOVER's beat)
    answer_probe: asyncio.Event  # ... and answers

    def runs(self) -> list[tuple[str, int]]:
        """(params, log id) of every /run the executors got."""
        return [(c.body["executorParams"], c.body["logId"]) for c in self.env.double.runs()]

    async def workflow(self) -> WorkflowRecord:
        job = await self.env.job(executor_route_strategy="FAILOVER")
        graph = parse_workflow({"nodes": [{"key": "A", "job_id": job.id, "params": "A"}], "edges": []})
        wf = await self.env.store.workflows.create("w", self.env.group_id, "", graph.to_json(), None, T0)
        record = await self.env.store.workflows.get(wf)
        assert record is not None
        return record

    async def attempt(self, run_id: int) -> NodeRunRecord:
        (attempt,) = await self.env.store.workflows.node_runs(run_id)
        return attempt

    async def a_is_probing(self, workflow: WorkflowRecord) -> tuple[asyncio.Task[Any], int]:
        """Admin A starts a run; its node's fire is recorded and waits for the first executor's
        beat. Returns the start's task and the run's id."""
        start = asyncio.create_task(self.a.start_run(workflow, {}, "alice"))
        await asyncio.wait_for(self.probing.wait(), WAIT_S)
        (run,), _ = await self.env.store.workflows.list_runs(workflow_id=workflow.id)
        return start, run.id


@pytest.fixture
async def admins(sqlite_store: Store) -> AsyncIterator[Admins]:
    env = await make_env(sqlite_store, HOSTS)
    b_trigger = env.service("node-b")
    probing, answer_probe = asyncio.Event(), asyncio.Event()

    async def first_beat_waits(body: dict[str, Any]) -> ReturnT:
        if not probing.is_set():  # the first probe only: a slow executor
            probing.set()
            await answer_probe.wait()
        return ReturnT.success()

    async def xxl_received(body: dict[str, Any]) -> ReturnT:
        return ReturnT(FAIL_CODE, msg_uri_not_found("/received"))  # an XXL-JOB executor

    async def xxl_log(body: dict[str, Any]) -> ReturnT:
        return ReturnT.success({"logContent": f"readLog fail, {MSG_NOT_EXISTS}"})

    env.double.answer(env.double.address(0), "beat", first_beat_waits)
    for address in env.double.addresses:
        env.double.answer(address, "received", xxl_received)
        env.double.answer(address, "log", xxl_log)
    unsure = UnsureFires(sqlite_store, b_trigger, b_trigger.dispatcher._client)  # noqa: SLF001
    a = WorkflowDriver(sqlite_store, env.trigger, None, env.clock, node_id="node-a", stale_ms=STALE_MS)
    b = WorkflowDriver(sqlite_store, b_trigger, None, env.clock, node_id="node-b", stale_ms=STALE_MS,
                       unsure=unsure)
    try:
        yield Admins(env, b_trigger, a, b, unsure, probing, answer_probe)
    finally:
        answer_probe.set()
        await a.wait_idle()
        await b.wait_idle()
        await unsure.close()
        await b_trigger.close()
        await env.trigger.close()


async def test_an_admin_firing_past_the_stale_claim_renews_it_and_is_not_taken_over(admins: Admins) -> None:
    assert admins.a.claim_keeper.interval_s == STALE_MS / 3 / 1000  # how often it renews
    start, run_id = await admins.a_is_probing(await admins.workflow())
    for _ in range(4):  # held well past the stale claim, renewed every third of it
        admins.env.clock.advance(STALE_MS // 3)
        await admins.a.claim_keeper.tick()
        await admins.b.tick()  # the survivor's sweep: the claim is never stale
    attempt = await admins.attempt(run_id)
    assert (attempt.state, attempt.claimed_by) == (NodeRunState.FIRING, "node-a")
    assert attempt.claimed_at == T0 + 4 * (STALE_MS // 3)
    assert admins.runs() == []
    admins.answer_probe.set()
    await asyncio.wait_for(start, WAIT_S)
    attempt = await admins.attempt(run_id)
    assert (attempt.state, attempt.claimed_by) == (NodeRunState.RUNNING, "node-a")
    assert admins.runs() == [("A", attempt.log_id)]
    await admins.b.tick()
    await admins.unsure.wait_idle()
    assert len(admins.runs()) == 1


async def test_an_admin_whose_claim_was_taken_over_does_not_send(admins: Admins) -> None:
    start, run_id = await admins.a_is_probing(await admins.workflow())
    # A's renewals did not happen (its loop stalled, its writes failed): the claim goes stale,
    # and the survivor takes the attempt over with the run A recorded, asks the executors
    # (XXL-JOB ones: no log file for it) and sends it.
    admins.env.clock.advance(STALE_MS + 1)
    await admins.b.tick()
    await asyncio.wait_for(admins.unsure.wait_idle(), WAIT_S)
    attempt = await admins.attempt(run_id)
    assert (attempt.state, attempt.claimed_by) == (NodeRunState.RUNNING, "node-b")
    assert admins.runs() == [("A", attempt.log_id)]
    # A's probe answers at last: A finds its claim gone and does not send.
    admins.answer_probe.set()
    await asyncio.wait_for(start, WAIT_S)
    assert admins.runs() == [("A", attempt.log_id)]
    entry = await admins.env.store.logs.get(attempt.log_id or 0)
    assert entry is not None and entry.trigger_code == 200 and entry.executor_address is not None


async def test_an_admin_not_renewed_for_a_while_renews_its_claim_before_sending(admins: Admins) -> None:
    start, run_id = await admins.a_is_probing(await admins.workflow())
    admins.env.clock.advance(STALE_MS // 2)  # no renewal meanwhile, and no other admin took it
    admins.answer_probe.set()
    await asyncio.wait_for(start, WAIT_S)
    attempt = await admins.attempt(run_id)
    assert (attempt.state, attempt.claimed_by) == (NodeRunState.RUNNING, "node-a")
    assert attempt.claimed_at == T0 + STALE_MS // 2  # renewed by the check before the /run
    assert admins.runs() == [("A", attempt.log_id)]


async def test_a_fire_with_a_send_check_is_fired_alone(admins: Admins) -> None:
    # A check that says no raises for the whole batch: the other fires' answers would be lost.
    job = await admins.env.job()

    async def yes() -> bool:
        return True

    request = FireRequest(job, TriggerType.WORKFLOW, send_check=yes)
    with pytest.raises(ValueError, match="fired alone"):
        await admins.env.trigger.fire_batch([request, FireRequest(job, TriggerType.MANUAL)])
    assert admins.runs() == []


async def test_an_admin_does_not_take_over_an_attempt_it_is_still_firing(admins: Admins) -> None:
    start, run_id = await admins.a_is_probing(await admins.workflow())
    # A's renewals did not happen (its writes failed): the claim is stale, and A's own sweep
    # finds it. Taking it over, A marked the attempt running with the run its first fire had
    # recorded, and that fire's check then refused to send: the node was sent by no one.
    admins.env.clock.advance(STALE_MS + 1)
    await admins.a.tick()
    attempt = await admins.attempt(run_id)
    assert (attempt.state, attempt.claimed_by) == (NodeRunState.FIRING, "node-a")
    admins.answer_probe.set()
    await asyncio.wait_for(start, WAIT_S)
    attempt = await admins.attempt(run_id)
    assert (attempt.state, attempt.claimed_by) == (NodeRunState.RUNNING, "node-a")
    assert admins.runs() == [("A", attempt.log_id)]


def _db_error(text: str) -> OperationalError:
    return OperationalError("UPDATE ...", {}, sqlite3.OperationalError(text))


async def _fire_renewing_with(admins: Admins, monkeypatch: pytest.MonkeyPatch, renew: Any) -> int:
    """A's node fire, past half the stale time (its check before the /run renews the claim),
    with ``renew`` in place of the claims' renewal; the run's id once the fire is over."""
    start, run_id = await admins.a_is_probing(await admins.workflow())
    admins.env.clock.advance(STALE_MS // 2)
    monkeypatch.setattr(admins.env.store.workflows, "keep_claims", renew)
    admins.answer_probe.set()
    with contextlib.suppress(OperationalError):
        await asyncio.wait_for(start, WAIT_S)
    return run_id


async def test_a_locked_database_at_the_check_before_sending_is_tried_again(
        admins: Admins, monkeypatch: pytest.MonkeyPatch) -> None:
    renew = admins.env.store.workflows.keep_claims
    failures = [_db_error("database is locked")]

    async def locked_once(ids: list[int], node: str, now_ms: int) -> set[int]:
        if failures:
            raise failures.pop()
        return await renew(ids, node, now_ms)

    run_id = await _fire_renewing_with(admins, monkeypatch, locked_once)
    assert failures == []
    attempt = await admins.attempt(run_id)
    assert (attempt.state, attempt.claimed_by) == (NodeRunState.RUNNING, "node-a")
    assert admins.runs() == [("A", attempt.log_id)]  # sent after the second try


async def test_a_lasting_error_at_the_check_before_sending_sends_nothing(
        admins: Admins, monkeypatch: pytest.MonkeyPatch) -> None:
    calls = []

    async def broken(ids: list[int], node: str, now_ms: int) -> set[int]:
        calls.append(now_ms)
        raise _db_error("no such table: x")

    await _fire_renewing_with(admins, monkeypatch, broken)
    assert len(calls) == 1  # not a transient error: not tried again
    assert admins.runs() == []  # and nothing sent


async def test_the_check_before_sending_is_not_tried_again_past_a_third_of_the_stale_time(
        admins: Admins, monkeypatch: pytest.MonkeyPatch) -> None:
    calls = []

    async def locked_slowly(ids: list[int], node: str, now_ms: int) -> set[int]:
        calls.append(now_ms)
        admins.env.clock.advance(STALE_MS // 3)  # the busy wait of a locked SQLite file
        raise _db_error("database is locked")

    await _fire_renewing_with(admins, monkeypatch, locked_slowly)
    assert len(calls) == 1  # another admin may have taken it over by now: left to it
    assert admins.runs() == []
