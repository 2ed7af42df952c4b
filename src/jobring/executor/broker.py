"""Broker dispatch, the executor's side: runs taken from RabbitMQ (docs/dispatch.md, "Broker mode").

A broker executor registers ``broker://<name>/`` with its usual heartbeat and polls the
admin for everything but runs (kills, log reads, beats, idle beats, /received: executor/pull.py).
Its runs come from two queues (jobring.protocol.broker): its group's queue, shared with the
other broker executors of its appname, and its own. Each delivery is:

1. decoded (a body that is no run is rejected, not requeued, with a log line);
2. dropped with an ack when this executor accepted the run before (a redelivery: the broker
   delivers at least once; the run-id deduplication of executor/received.py runs it once);
3. held until a slot is free (``slots`` runs taken from the broker and not yet finished);
4. accepted as ``/run`` accepts it (recorded in the received-runs file), then acknowledged. A
   refusal (an unknown handler, ...) is sent to the admin as a failed result, then acked.

So a delivery is acknowledged only once the run is accepted and recorded: an executor killed
before that leaves it unacknowledged and the broker gives it to another executor. The
prefetch (``slots``, over both queues) bounds what waits here for a slot; it returns to the
queue when this executor stops or dies.

The connection is kept by a task that reconnects with backoff and logs the loss and the return.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from jobring.configbase import ConfigError
from jobring.core.addresses import broker_name
from jobring.executor.http.decode import decode_trigger
from jobring.executor.received import MSG_ALREADY_RECEIVED, run_key
from jobring.protocol.broker import executor_queue, group_queue, queue_arguments
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
_FIRST_RETRY_S = 0.2
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

    async def take(self, log_id: int) -> None:
        while len(self._held) >= self.size:
            self._free.clear()
            await self._free.wait()
        self._held.add(log_id)


class Runs:
    """What the consumer needs of the job runner (executor/worker.py)."""

    def __init__(self, accept: Callable[[TriggerParam], Awaitable[ReturnT]],
                 seen: Callable[[tuple[int, int]], bool], closing: Callable[[], bool]) -> None:
        self.accept = accept
        self.seen = seen
        self.closing = closing


def start_consumer(settings: ExecutorSettings, address: str, runner: JobRunner, slots: RunSlots
                   ) -> BrokerConsumer:
    """The consumer of the broker executor at ``address`` (``broker://<name>/``), started."""
    assert settings.dispatch_broker is not None  # checked with the settings
    runs = Runs(runner.run, lambda key: key in runner.received, lambda: runner.closing)
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
        self._max_backoff_s = max_backoff_s
        self._connect_timeout_s = connect_timeout_s
        self._task: asyncio.Task[None] | None = None
        self._connection: Any = None
        self.connected = asyncio.Event()
        self._closing = False
        self.taken = 0  # deliveries accepted and acknowledged
        self.duplicates = 0  # redeliveries of runs accepted before
        self.refused = 0
        self._taking: set[tuple[int, int]] = set()  # runs between delivery and acceptance
        self.last_error: str | None = None

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._keep_connected(), name="jobring-broker-consumer")

    async def stop(self) -> None:
        """Stop taking runs; what waits here unacknowledged goes back to the queues."""
        self._closing = True
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        await self._drop()

    async def _drop(self) -> None:
        self.connected.clear()
        connection, self._connection = self._connection, None
        if connection is not None and not connection.is_closed:
            with contextlib.suppress(Exception):
                await connection.close()

    async def _keep_connected(self) -> None:
        retry_s, failing = _FIRST_RETRY_S, False
        while True:
            lost = asyncio.Event()
            try:
                await self._connect(lost)
            except (TimeoutError, OSError, aio_pika.exceptions.AMQPError) as exc:
                self.last_error = f"{type(exc).__name__}: {exc}"
                await self._drop()
                if not failing:
                    log.warning("broker unreachable (%s); retrying with backoff", self.last_error)
                failing = True
                await asyncio.sleep(retry_s)
                retry_s = min(retry_s * 2, self._max_backoff_s)
                continue
            log.info("broker connected: taking runs from %s", ", ".join(self.queues))
            retry_s, failing = _FIRST_RETRY_S, False
            await lost.wait()
            if not self._closing:
                log.warning("broker connection lost; reconnecting (unacknowledged runs go back to the queue)")
            await self._drop()

    async def _connect(self, lost: asyncio.Event) -> None:
        connection = self._connection = await aio_pika.connect(self.url, timeout=self._connect_timeout_s)
        connection.close_callbacks.add(lambda *_: lost.set())
        channel = await connection.channel(publisher_confirms=False)
        channel.close_callbacks.add(lambda *_: lost.set())
        # One budget over both queues: at most `slots` deliveries wait here unacknowledged.
        await channel.set_qos(prefetch_count=self._slots.size, global_=True)
        for index, name in enumerate(self.queues):
            queue = await channel.declare_queue(name, durable=True, arguments=queue_arguments(index == 1))
            await queue.consume(self._on_message)
        self.connected.set()

    async def _on_message(self, message: AbstractIncomingMessage) -> None:
        try:
            param = decode_trigger(message.body)
        except (ProtocolError, ValueError) as exc:
            log.error("broker: a message that is no run (%s) rejected: %r", exc, message.body[:200])
            await message.reject(requeue=False)
            return
        key = run_key(param.log_id, param.log_date_time)
        if self._runs.seen(key) or key in self._taking:
            # Accepted before, or being accepted from another delivery of the same message.
            self.duplicates += 1
            await message.ack()
            return
        self._taking.add(key)
        try:
            await self._slots.take(param.log_id)
            if self._closing or self._runs.closing() or message.channel.is_closed:
                self._slots.release(param.log_id)
                return  # not acknowledged: the broker delivers it again (here or elsewhere)
            try:
                answer = await self._runs.accept(param)
            except BaseException:
                self._slots.release(param.log_id)
                raise
        finally:
            self._taking.discard(key)
        if not answer.ok or answer.msg == MSG_ALREADY_RECEIVED:
            self._slots.release(param.log_id)
        if not answer.ok:
            # /run's refusal would be the trigger's answer; here it is the run's result.
            self.refused += 1
            self._slots.report(HandleCallbackParam(param.log_id, param.log_date_time, FAIL_CODE,
                                                   f"executor refused the run: {answer.msg}"))
        self.taken += 1
        with contextlib.suppress(aio_pika.exceptions.AMQPError, aio_pika.exceptions.ChannelInvalidStateError):
            await message.ack()
