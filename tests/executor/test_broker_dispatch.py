"""Broker dispatch against a real RabbitMQ: the admin's publisher (through ExecutorClient, as
the trigger calls it) and the executor's consumer (docs/dispatch.md, "Broker mode").

Skipped with the reason when RabbitMQ does not answer on 127.0.0.1:5672; failed with CI=true."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aio_pika
import pytest

from jobring.admin.dispatch.broker import BrokerPublisher
from jobring.admin.dispatch.client import ExecutorClient
from jobring.executor.broker import BrokerConsumer, Runs, RunSlots
from jobring.executor.context import JobContext
from jobring.executor.executor import Executor
from jobring.executor.received import run_key
from jobring.protocol.broker import BATCH_MAX, batch_body, executor_queue, group_queue
from jobring.protocol.models import HandleCallbackParam, ReturnT, TriggerParam, dumps
from tests.broker_kit import amqp_url, delete_queues, unique_app
from tests.e2e.waiting import eventually
from tests.executor.fake_admin import FakeAdmin

pytestmark = pytest.mark.timeout(30)


@dataclass
class FakeRunner:
    """Accepts every run (or refuses with ``refuse``) and remembers it, as JobRunner does."""

    refuse: str | None = None
    refuse_ids: set[int] = field(default_factory=set)  # refused with ``refuse`` (all when empty)
    accepted: list[int] = field(default_factory=list)
    received: set[tuple[int, int]] = field(default_factory=set)
    arrived: asyncio.Event = field(default_factory=asyncio.Event)

    async def accept_all(self, params: list[TriggerParam]) -> list[ReturnT]:
        self.arrived.set()
        return [self._accept(param) for param in params]

    def _accept(self, param: TriggerParam) -> ReturnT:
        if self.refuse is not None and (not self.refuse_ids or param.log_id in self.refuse_ids):
            return ReturnT.fail(self.refuse)
        self.accepted.append(param.log_id)
        self.received.add(run_key(param.log_id, param.log_date_time))
        return ReturnT.success()

    def runs(self) -> Runs:
        return Runs(self.accept_all, lambda key: key in self.received, lambda: False)


@dataclass
class Setup:
    url: str
    app: str
    client: ExecutorClient
    reports: list[HandleCallbackParam]


@pytest.fixture
async def setup() -> AsyncIterator[Setup]:
    url = amqp_url()
    app = unique_app()
    publisher = BrokerPublisher(url)
    publisher.start()
    client = ExecutorClient(access_token=None, broker=publisher)
    try:
        yield Setup(url, app, client, [])
    finally:
        await client.aclose()
        await delete_queues(url, group_queue(app), executor_queue(app, "a"), executor_queue(app, "b"))


def body(log_id: int, *, shard: tuple[int, int] = (0, 1)) -> bytes:
    param = TriggerParam(job_id=7, executor_handler="hello", log_id=log_id, log_date_time=1_800_000_000_000,
                         broadcast_index=shard[0], broadcast_total=shard[1])
    return dumps(param.to_dict())


async def consumer(s: Setup, name: str, runner: FakeRunner, slots: int = 1000) -> BrokerConsumer:
    made = BrokerConsumer(s.url, s.app, name, runner.runs(), RunSlots(slots, s.reports.append))
    made.start()
    await asyncio.wait_for(made.connected.wait(), 10)
    return made


async def until(check: Callable[[], bool], what: str, timeout_s: float = 10.0) -> None:
    async def answer() -> bool | None:
        return True if check() else None

    await eventually(what, answer, timeout_s, every_s=0.01)


async def test_runs_published_many_at_once_are_each_accepted_once(setup: Setup) -> None:
    runner = FakeRunner()
    taker = await consumer(setup, "a", runner)
    try:
        answers = await asyncio.gather(*(setup.client.run_body_now("broker://a/", body(i), None, setup.app)
                                         for i in range(1, 301)))
        assert all(a.ok for a in answers) and answers[0].msg == "queued on the broker"
        # The same run published again (an admin that could not know it arrived): dropped.
        again = await setup.client.run_body_now("broker://a/", body(5), None, setup.app)
        assert again.ok
        await until(lambda: taker.duplicates == 1 and len(runner.accepted) == 300, "300 runs and 1 duplicate")
        assert sorted(runner.accepted) == list(range(1, 301))
    finally:
        await taker.stop()


async def test_a_run_waits_unacknowledged_for_a_free_slot_and_goes_to_another_executor(setup: Setup) -> None:
    slow, other = FakeRunner(), FakeRunner()
    first = await consumer(setup, "a", slow, slots=1)
    try:
        for log_id in (1, 2):
            assert (await setup.client.run_body_now("broker://a/", body(log_id), None, setup.app)).ok
        await until(lambda: slow.accepted == [1], "the first run")
        # No free slot: run 2 is given back once, then (the only executor) waits here unacknowledged.
        await until(lambda: first.given_back == 1, "run 2 given back once")
        await asyncio.sleep(0.2)
        assert slow.accepted == [1] and first.given_back == 1
        # This executor stops with run 2 unacknowledged: the broker gives it to another.
        await first.stop()
        second = await consumer(setup, "b", other)
        try:
            await until(lambda: other.accepted == [2], "run 2 on the other executor")
        finally:
            await second.stop()
    finally:
        await first.stop()


async def test_a_result_frees_the_slot(setup: Setup) -> None:
    runner = FakeRunner()
    slots = RunSlots(1, setup.reports.append)
    taker = BrokerConsumer(setup.url, setup.app, "a", runner.runs(), slots)
    taker.start()
    try:
        await asyncio.wait_for(taker.connected.wait(), 10)
        for log_id in (1, 2):
            assert (await setup.client.run_body_now("broker://a/", body(log_id), None, setup.app)).ok
        await until(lambda: runner.accepted == [1], "the first run")
        slots.report(HandleCallbackParam(1, 1_800_000_000_000, 200))
        await until(lambda: runner.accepted == [1, 2], "the second run once the first ended")
        assert [r.log_id for r in setup.reports] == [1]
    finally:
        await taker.stop()


async def test_a_refused_run_comes_back_as_a_failed_result(setup: Setup) -> None:
    runner = FakeRunner(refuse="job handler [hello] not found.")
    taker = await consumer(setup, "a", runner)
    try:
        assert (await setup.client.run_body_now("broker://a/", body(9), None, setup.app)).ok
        await until(lambda: len(setup.reports) == 1, "the refusal's result")
        (result,) = setup.reports
        assert result.log_id == 9 and result.handle_code == 500
        assert result.handle_msg == "executor refused the run: job handler [hello] not found."
    finally:
        await taker.stop()


async def test_a_broadcast_shard_goes_to_its_executor_only(setup: Setup) -> None:
    at_a, at_b = FakeRunner(), FakeRunner()
    a = await consumer(setup, "a", at_a)
    b = await consumer(setup, "b", at_b)
    try:
        for index, name in enumerate(("a", "b", "a")):
            answer = await setup.client.run_body_now(f"broker://{name}/", body(10 + index, shard=(index, 3)),
                                                     None, setup.app)
            assert answer.ok
        await until(lambda: len(at_a.accepted) + len(at_b.accepted) == 3, "the three shards")
        assert sorted(at_a.accepted) == [10, 12] and at_b.accepted == [11]
    finally:
        await a.stop()
        await b.stop()


async def test_a_pinned_run_goes_to_the_chosen_executor_only(setup: Setup) -> None:
    """Runs routed by a strategy that chooses one executor (FIRST, CONSISTENT_HASH, ...) go to
    its own queue; the others to the group's queue, where any executor may take them."""
    at_a, at_b = FakeRunner(), FakeRunner()
    a = await consumer(setup, "a", at_a)
    b = await consumer(setup, "b", at_b)
    try:
        pinned = await asyncio.gather(*(setup.client.run_body_now("broker://b/", body(i), None, setup.app,
                                                                  pinned=True) for i in range(1, 41)))
        assert all(answer.ok for answer in pinned)
        await until(lambda: len(at_b.accepted) == 40, "the 40 pinned runs on b")
        assert at_a.accepted == []
        spread = await asyncio.gather(*(setup.client.run_body_now("broker://b/", body(i), None, setup.app,
                                                                  pinned=False) for i in range(41, 241)))
        assert all(answer.ok for answer in spread)
        await until(lambda: len(at_a.accepted) + len(at_b.accepted) == 240, "the 200 group runs")
    finally:
        await a.stop()
        await b.stop()


async def test_a_batch_larger_than_any_publisher_makes_is_rejected_unrun(setup: Setup) -> None:
    # Whoever may write to the group's queue (the admin, or any executor of the group with its
    # broker credentials) could otherwise start thousands of runs at once past the slots: a
    # message larger than the free slots is taken once none is held.
    runner = FakeRunner()
    taker = await consumer(setup, "a", runner, slots=4)
    try:
        huge, kind = batch_body([body(i) for i in range(1, BATCH_MAX + 2)])
        connection = await aio_pika.connect(setup.url, timeout=5)
        async with connection:
            channel = await connection.channel(publisher_confirms=True)
            await channel.default_exchange.publish(aio_pika.Message(huge, content_type=kind),
                                                   routing_key=group_queue(setup.app))
        assert (await setup.client.run_body_now("broker://a/", body(1_000), None, setup.app)).ok
        await until(lambda: 1_000 in runner.accepted, "the run published after the batch")
        assert runner.accepted == [1_000]
    finally:
        await taker.stop()


async def test_a_batch_with_a_refused_run_runs_the_others_and_reports_the_refusal(setup: Setup) -> None:
    runner = FakeRunner(refuse="job handler [hello] not found.", refuse_ids={3})
    taker = await consumer(setup, "a", runner)
    try:
        assert (await setup.client.run_body_now("broker://a/", body(1), None, setup.app)).ok  # queue declared
        # Published in one loop step: one message carrying the five runs.
        answers = await asyncio.gather(*(setup.client.run_body_now("broker://a/", body(i), None, setup.app)
                                         for i in range(2, 7)))
        assert all(answer.ok for answer in answers)
        assert setup.client.broker is not None and setup.client.broker.messages == 2
        await until(lambda: len(runner.accepted) == 5 and len(setup.reports) == 1, "5 runs and 1 refusal")
        assert sorted(runner.accepted) == [1, 2, 4, 5, 6] and setup.reports[0].log_id == 3
        assert taker.taken == 6 and taker.refused == 1
    finally:
        await taker.stop()


async def test_a_run_no_queue_takes_fails_its_trigger(setup: Setup) -> None:
    assert (await setup.client.run_body_now("broker://a/", body(1), None, setup.app)).ok
    await delete_queues(setup.url, group_queue(setup.app))  # deleted behind the publisher's back
    answer = await setup.client.run_body_now("broker://a/", body(2), None, setup.app)
    assert not answer.ok and "(BrokerReturned)" in (answer.msg or "")


async def test_an_unreachable_broker_fails_the_trigger_within_the_timeout() -> None:
    publisher = BrokerPublisher("amqp://guest:guest@127.0.0.1:9/")
    publisher.start()
    client = ExecutorClient(access_token=None, connect_timeout=0.3, read_timeout=0.2, broker=publisher)
    try:
        answer = await client.run_body_now("broker://a/", body(1), None, "app")
        assert not answer.ok and "unreachable (BrokerUnavailable)" in (answer.msg or "")
    finally:
        await client.aclose()


async def test_without_a_broker_a_broker_executor_is_unreachable() -> None:
    client = ExecutorClient(access_token=None)
    try:
        answer = await client.run_body_now("broker://a/", body(1), None, "app")
        assert not answer.ok and "(BrokerDisabled)" in (answer.msg or "")
        # Other calls go through the poll, as for a pull executor.
        beat = await client.beat("broker://a/", None, "app")
        assert not beat.ok and "Pull" in (beat.msg or "")
    finally:
        await client.aclose()


async def test_a_broker_executor_runs_what_the_admin_publishes_and_reports_it(setup: Setup, tmp_path: Path
                                                                             ) -> None:
    admin = FakeAdmin()
    await admin.start()
    executor = Executor(app_name=setup.app, admin_addresses=[admin.base_url], access_token="t" * 24,
                        dispatch="broker", dispatch_broker=setup.url, address="broker://a/",
                        log_path=str(tmp_path), beat_interval_s=30)

    @executor.job("hello")
    def hello(ctx: JobContext) -> None:
        ctx.log("hello over the broker")

    await executor.startup(binds=False)
    try:
        assert executor.address == "broker://a/"
        assert (await setup.client.run_body_now("broker://a/", body(1), None, setup.app)).ok
        unknown = TriggerParam(job_id=8, executor_handler="missing", log_id=2,
                               log_date_time=1_800_000_000_000)
        assert (await setup.client.run_body_now("broker://a/", dumps(unknown.to_dict()), None, setup.app)).ok

        def results(a: FakeAdmin) -> dict[int, dict[str, Any]]:
            return {item["logId"]: item for item in a.callbacks()}

        await admin.wait_for(lambda a: len(results(a)) == 2)
        done = results(admin)
        assert done[1]["handleCode"] == 200
        assert done[2]["handleCode"] == 500
        assert done[2]["handleMsg"].startswith("executor refused the run: job handler [missing] not found")
    finally:
        await executor.shutdown()
        await admin.stop()
