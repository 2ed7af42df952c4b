"""Broker dispatch, the executor's side: runs taken from RabbitMQ (docs/dispatch.md, "Broker mode").

A broker executor registers ``broker://<name>/`` with its usual heartbeat and polls the
admin for everything but runs (kills, log reads, beats, idle beats, /received: executor/pull.py).
Its runs come from two queues (jobring.protocol.broker): its group's queue, shared with the
other broker executors of its appname, and its own. A delivery carries one run or a batch of
runs (jobring.protocol.broker.run_bodies); each delivery is:

1. decoded (a body that is no run is rejected, not requeued, with a log line);
2. its runs this executor accepted before are dropped (a redelivery: the broker delivers at
   least once; the run-id deduplication of executor/received.py runs each once);
3. given back to the queue once (requeued) when there is no free slot for each of its other
   runs (``slots`` runs taken from the broker and not yet finished), so that an executor with
   room may take it; delivered again, it is held until there is;
4. accepted as ``/run`` accepts them, all in one step (none is accepted while another waits),
   recorded in the received-runs file (one write), then acknowledged. A refused run (an
   unknown handler, ...) is sent to the admin as a failed result; the others of the batch run.

So a delivery is acknowledged only once its runs are accepted and recorded: an executor killed
before that leaves it unacknowledged and the broker gives it to another executor. The
prefetch (``slots`` messages, over both queues) bounds what waits here for a slot; it returns
to the queue when this executor stops or dies.

The connection is kept by jobring.protocol.broker.KeptConnection (reconnect with backoff, the
loss and the return logged).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from jobring.configbase import ConfigError
from jobring.core.addresses import broker_name
from jobring.executor.http.decode import trigger_of
from jobring.executor.received import MSG_ALREADY_RECEIVED, run_key
from jobring.executor.worker import MSG_NOT_ACCEPTING
from jobring.protocol.broker import KeptConnection, executor_queue, group_queue, queue_arguments, run_bodies
from jobring.protocol.models import HandleCallbackParam, ProtocolError, ReturnT, TriggerParam

try:  # `pip install 'jobring[amqp]'`: a push or pull executor does without it
    import aio_pika
except ImportError:  # pragma: no cover - exercised by the plain-install test
    aio_pika = None  # type: ignore[assignment]

if TYPE_CHECKING:
    from aio_pika.abc import AbstractIncomingMessage

    from jobring.executor.config import ExecutorSettings
    from jobring.executor.worker import JobRunner

log = logging.getLogger(__name__)

Report = Callable[[HandleCallbackParam], None]
FAIL_CODE = 500


class RunSlots:
    """The runs taken from the broker and not finished yet (at most ``size``).

    Wraps the executor's result reporting: a result of a run it holds frees its slot."""

    def __init__(self, size: int, report: Report) -> None:
        self.size = size
        self._report = report
        self._held: set[int] = set()  # log ids
        self._free = asyncio.Event()
        self._free.set()

    @property
    def held(self) -> int:
        return len(self._held)

    def report(self, result: HandleCallbackParam) -> None:
        self._report(result)
        self.release(result.log_id)

    def release(self, log_id: int) -> None:
        if log_id in self._held:
            self._held.discard(log_id)
            self._free.set()

    def fits(self, runs: int) -> bool:
        """Whether ``runs`` more runs may be held now (see :meth:`take`)."""
        return not self._held or len(self._held) + runs <= self.size

    def release_all(self, log_ids: list[int]) -> None:
        for log_id in log_ids:
            self.release(log_id)

    async def take(self, log_ids: list[int]) -> None:
        """Hold a slot for each run of ``log_ids`` (one message's), once there is room for all
        of them (or, for a message larger than every slot, once none is held)."""
        while not self.fits(len(log_ids)):
            self._free.clear()
            await self._free.wait()
        self._held.update(log_ids)


class Runs:
    """What the consumer needs of the job runner (executor/worker.py): ``accept_all`` accepts
    (or refuses) several runs in one step, ``record`` writes the accepted ones to the
    received-runs file."""

    def __init__(self, accept_all: Callable[[list[TriggerParam]], Awaitable[list[ReturnT]]],
                 seen: Callable[[tuple[int, int]], bool], closing: Callable[[], bool],
                 record: Callable[[], None] = lambda: None) -> None:
        self.accept_all = accept_all
        self.seen = seen
        self.closing = closing
        self.record = record


def start_consumer(settings: ExecutorSettings, address: str, runner: JobRunner, slots: RunSlots
                   ) -> BrokerConsumer:
    """The consumer of the broker executor at ``address`` (``broker://<name>/``), started."""
    assert settings.dispatch_broker is not None  # checked with the settings
    runs = Runs(runner.run_all, lambda key: key in runner.received, lambda: runner.closing,
                runner.received.flush)
    consumer = BrokerConsumer(settings.dispatch_broker, settings.app_name, broker_name(address), runs, slots,
                              connect_timeout_s=settings.admin_timeout_s)
    consumer.start()
    return consumer


class BrokerConsumer:
    """Takes this executor's runs from the broker at ``url``."""

    def __init__(self, url: str, app_name: str, name: str, runs: Runs, slots: RunSlots, *,
                 max_backoff_s: float = 2.0, connect_timeout_s: float = 3.0) -> None:
        if aio_pika is None:
            raise ConfigError("dispatch=broker needs the AMQP client: pip install 'jobring[amqp]'")
        self.url = url
        self.queues = (group_queue(app_name), executor_queue(app_name, name))
        self._runs = runs
        self._slots = slots
        self._connect_timeout_s = connect_timeout_s
        self._connection: Any = None
        self._link = KeptConnection("consumer", self._connect, self._drop,
                                    (TimeoutError, OSError, aio_pika.exceptions.AMQPError),
                                    max_backoff_s=max_backoff_s,
                                    on_loss=" (unacknowledged runs go back to the queue)")
        self.connected = self._link.up
        self.taken = 0  # runs accepted and acknowledged
        self.duplicates = 0  # redeliveries of runs accepted before
        self.refused = 0
        self.given_back = 0  # deliveries requeued once for want of free slots
        self._taking: set[tuple[int, int]] = set()  # runs between delivery and acceptance

    @property
    def last_error(self) -> str | None:
        return self._link.last_error

    def start(self) -> None:
        self._link.start()

    async def stop(self) -> None:
        """Stop taking runs; what waits here unacknowledged goes back to the queues."""
        await self._link.stop()

    async def _drop(self) -> None:
        connection, self._connection = self._connection, None
        if connection is not None and not connection.is_closed:
            try:
                await connection.close()
            except Exception as exc:  # noqa: BLE001 - a connection already failing; it is dropped anyway
                log.debug("broker consumer: closing the lost connection: %s", exc)

    async def _connect(self, lost: asyncio.Event) -> None:
        connection = self._connection = await aio_pika.connect(self.url, timeout=self._connect_timeout_s)
        connection.close_callbacks.add(lambda *_: lost.set())
        channel = await connection.channel(publisher_confirms=False)
        channel.close_callbacks.add(lambda *_: lost.set())
        # One budget over both queues: at most `slots` messages wait here unacknowledged.
        await channel.set_qos(prefetch_count=self._slots.size, global_=True)
        for index, name in enumerate(self.queues):
            queue = await channel.declare_queue(name, durable=True, arguments=queue_arguments(index == 1))
            await queue.consume(self._on_message)
        log.info("broker: taking runs from %s", ", ".join(self.queues))

    async def _on_message(self, message: AbstractIncomingMessage) -> None:
        try:
            params = [trigger_of(run) for run in run_bodies(message.body, message.content_type)]
        except (ProtocolError, ValueError, TypeError) as exc:
            log.error("broker: a message that is no run (%s) rejected: %r", exc, message.body[:200])
            await message.reject(requeue=False)
            return
        fresh: dict[tuple[int, int], TriggerParam] = {}
        for param in params:
            key = run_key(param.log_id, param.log_date_time)
            if self._runs.seen(key) or key in self._taking or key in fresh:
                # Accepted before, or being accepted from another delivery of the same message.
                self.duplicates += 1
            else:
                fresh[key] = param
        if fresh and not message.redelivered and not self._slots.fits(len(fresh)):
            # No room here now: given back once, so that an executor with free slots may take
            # it; delivered again (here or there), it waits for slots where it lands.
            self.given_back += 1
            with contextlib.suppress(aio_pika.exceptions.AMQPError,
                                     aio_pika.exceptions.ChannelInvalidStateError):
                await message.reject(requeue=True)
            return
        if fresh and not await self._accept(message, fresh):
            return  # not acknowledged: the broker delivers it again (here or elsewhere)
        with contextlib.suppress(aio_pika.exceptions.AMQPError, aio_pika.exceptions.ChannelInvalidStateError):
            await message.ack()

    async def _accept(self, message: AbstractIncomingMessage, fresh: dict[tuple[int, int], TriggerParam]
                      ) -> bool:
        """Take slots for the ``fresh`` runs of one message, accept them all in one step and
        record them; False when this executor is stopping (nothing accepted)."""
        ids = [param.log_id for param in fresh.values()]
        self._taking.update(fresh)
        try:
            await self._slots.take(ids)
            if self._link.closing or self._runs.closing() or message.channel.is_closed:
                self._slots.release_all(ids)
                return False
            try:
                answers = await self._runs.accept_all(list(fresh.values()))
            except BaseException:
                self._slots.release_all(ids)
                raise
        finally:
            self._taking.difference_update(fresh)
        if answers and all(not a.ok and a.msg == MSG_NOT_ACCEPTING for a in answers):
            self._slots.release_all(ids)  # it began to stop while waiting: none accepted
            return False
        # Before the acknowledgement: once acked, the run is known here only by this record.
        self._runs.record()
        for param, answer in zip(fresh.values(), answers, strict=True):
            if not answer.ok or answer.msg == MSG_ALREADY_RECEIVED:
                self._slots.release(param.log_id)
            if not answer.ok:
                # /run's refusal would be the trigger's answer; here it is the run's result.
                self.refused += 1
                self._slots.report(HandleCallbackParam(param.log_id, param.log_date_time, FAIL_CODE,
                                                       f"executor refused the run: {answer.msg}"))
        self.taken += len(answers)
        return True
