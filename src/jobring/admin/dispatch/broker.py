"""Broker dispatch, the admin's side: runs for ``broker://`` executors published to RabbitMQ.

One connection and one channel with publisher confirms per admin node, kept up by
:class:`jobring.protocol.broker.KeptConnection` (reconnect with backoff, a log line when it is
lost and one when it is back). A publish is complete when the broker confirms it (the message
is persistent and its queue durable: the broker has it on disk).

Runs headed for the same queue in the same event-loop step travel in one message (a batch of
at most ``BATCH_MAX``, jobring.protocol.broker): a burst of fires costs the broker, the
client and the executors one message, one confirm and one acknowledgement per batch instead
of per run, and at low load a run travels alone with no added wait. Every run of a batch
awaits the batch's confirm; many batches are in flight at once. A message no queue takes
(its queue was deleted) comes back as returned and fails its runs: never dropped without a
word.

A publish made while the connection is down waits for it up to its timeout; one whose
confirm was lost with the connection is published again after the reconnect (the same run:
the executor's run-id deduplication keeps it from running twice there). What cannot be
published within the timeout fails as :class:`BrokerUnavailable`, which the trigger records
as a failed trigger (retries apply), as for an executor that refuses connections; a confirm
that does not come within it (the message may be queued) is ``timeout``: the lost-run and
unsure-fire rules apply, as to a push call whose answer was lost.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass, field

import aio_pika
import aiormq
from aio_pika.abc import AbstractChannel, AbstractConnection, DeliveryMode

from jobring.http1.client import HttpError
from jobring.protocol.broker import BATCH_MAX, KeptConnection, batch_body, queue_arguments

log = logging.getLogger(__name__)

# What says the channel or connection went away under a call: publish again after the reconnect.
_LINK_ERRORS = (aiormq.exceptions.AMQPError, aio_pika.exceptions.ChannelInvalidStateError, OSError,
                RuntimeError)


class BrokerUnavailable(HttpError):
    """A run not published (``timeout``: published, its confirm never came)."""


@dataclass
class _Batch:
    """Runs for one queue, sent as one message once the event-loop step that gathered them ends."""

    channel: AbstractChannel
    deadline: float  # the earliest of its runs' deadlines: how long its confirm is awaited
    confirmed: asyncio.Future[None]
    bodies: list[bytes] = field(default_factory=list)


class BrokerPublisher:
    """Publishes runs to the broker at ``url`` (``amqp://user:password@host:port/vhost``)."""

    def __init__(self, url: str, *, max_backoff_s: float = 2.0, connect_timeout_s: float = 3.0,
                 batch_max: int = BATCH_MAX) -> None:
        self.url = url
        self._connect_timeout_s = connect_timeout_s
        self._batch_max = max(1, batch_max)
        self._channel: AbstractChannel | None = None
        self._connection: AbstractConnection | None = None
        self._link = KeptConnection(f"publisher {_safe(url)}", self._open, self._drop,
                                    (TimeoutError, OSError, aiormq.exceptions.AMQPError),
                                    max_backoff_s=max_backoff_s)
        self._declared: set[str] = set()
        self._open_batches: dict[str, _Batch] = {}
        self._sending: set[asyncio.Task[None]] = set()
        self.published = 0  # runs confirmed
        self.messages = 0  # messages confirmed (batches and single runs)
        self.failed = 0
        self._last_error: str | None = None

    @property
    def connected(self) -> bool:
        return self._link.up.is_set()

    @property
    def last_error(self) -> str | None:
        return self._last_error or self._link.last_error

    def start(self) -> None:
        """Connect in the background (the admin starts whether the broker is up or not)."""
        self._link.start()

    async def aclose(self) -> None:
        await self._link.stop()
        for task in list(self._sending):
            task.cancel()
        for task in list(self._sending):
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _open(self, lost: asyncio.Event) -> None:
        connection = self._connection = await aio_pika.connect(self.url, timeout=self._connect_timeout_s)
        channel = await connection.channel(publisher_confirms=True, on_return_raises=True)
        connection.close_callbacks.add(lambda *_: lost.set())
        channel.close_callbacks.add(lambda *_: lost.set())
        self._declared.clear()
        self._channel = channel

    async def _drop(self) -> None:
        connection, self._connection, self._channel = self._connection, None, None
        if connection is not None and not connection.is_closed:
            try:
                await connection.close()
            except Exception as exc:  # noqa: BLE001 - a connection already failing; it is dropped anyway
                log.debug("broker publisher: closing the lost connection: %s", exc)

    async def publish(self, queue: str, body: bytes, *, own: bool, timeout_s: float) -> None:
        """Publish one run to ``queue`` (an executor's ``own`` queue or a group queue) and wait
        for the broker's confirm; :class:`BrokerUnavailable` if it cannot be had in ``timeout_s``."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        sent = False  # a publish whose confirm was lost: perhaps queued
        while True:
            channel = self._channel
            if channel is None or not self._link.up.is_set():
                await self._wait_up(deadline, sent)
                continue
            try:
                if queue not in self._declared:
                    await channel.declare_queue(queue, durable=True, arguments=queue_arguments(own),
                                                timeout=max(0.01, deadline - loop.time()))
                    self._declared.add(queue)
                sent = True
                # Shielded: a run whose trigger is cancelled leaves the others of its batch alone.
                await asyncio.shield(self._batched(channel, queue, body, deadline))
            except TimeoutError:
                self._fail("no confirm")
                raise BrokerUnavailable("BrokerTimeout", f"the broker did not confirm within {timeout_s:g} s",
                                        timeout=True) from None
            except aio_pika.exceptions.PublishError as exc:
                self._fail(str(exc))
                raise BrokerUnavailable("BrokerReturned", f"the broker returned the run: {exc}",
                                        timeout=False) from None
            except _LINK_ERRORS as exc:
                # The connection or channel went away during the call: wait for the reconnect,
                # then publish again (the same run id).
                self._last_error = f"{type(exc).__name__}: {exc}"
                if not channel.is_closed:
                    self._fail(self._last_error)
                    raise BrokerUnavailable(type(exc).__name__, str(exc), timeout=sent) from None
                if self._channel is channel:
                    self._link.lost()
                await self._wait_up(deadline, sent)
                continue
            self.published += 1
            return

    def _batched(self, channel: AbstractChannel, queue: str, body: bytes, deadline: float
                 ) -> asyncio.Future[None]:
        """Add the run to the open batch of ``queue`` (a new one when there is none, it is full,
        or it was for an older channel); the batch's confirm."""
        batch = self._open_batches.get(queue)
        if batch is None or batch.channel is not channel or len(batch.bodies) >= self._batch_max:
            confirmed = asyncio.get_running_loop().create_future()
            batch = self._open_batches[queue] = _Batch(channel, deadline, confirmed)
            task = asyncio.create_task(self._send(queue, batch))  # runs after this loop step
            self._sending.add(task)
            task.add_done_callback(self._sending.discard)
        batch.bodies.append(body)
        batch.deadline = min(batch.deadline, deadline)
        return batch.confirmed

    async def _send(self, queue: str, batch: _Batch) -> None:
        if self._open_batches.get(queue) is batch:
            del self._open_batches[queue]  # closed: later runs start the next batch
        body, content_type = batch_body(batch.bodies)
        message = aio_pika.Message(body, delivery_mode=DeliveryMode.PERSISTENT, content_type=content_type)
        loop = asyncio.get_running_loop()
        try:
            await batch.channel.default_exchange.publish(message, routing_key=queue, mandatory=True,
                                                         timeout=max(0.01, batch.deadline - loop.time()))
        except asyncio.CancelledError:
            if not batch.confirmed.done():
                batch.confirmed.set_exception(RuntimeError("the publisher closed"))
            raise
        except Exception as exc:  # noqa: BLE001 - handed to every run of the batch (publish sorts it)
            if not batch.confirmed.done():
                batch.confirmed.set_exception(exc)
        else:
            self.messages += 1
            if not batch.confirmed.done():
                batch.confirmed.set_result(None)

    async def _wait_up(self, deadline: float, sent: bool) -> None:
        remaining = deadline - asyncio.get_running_loop().time()
        if remaining > 0:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._link.up.wait(), remaining)
            if self._link.up.is_set() and self._channel is not None:
                return
        error = self.last_error or "not connected"
        self._fail(error)
        raise BrokerUnavailable("BrokerUnavailable", f"broker {_safe(self.url)} unavailable: {error}",
                                timeout=sent)

    def _fail(self, error: str) -> None:
        self.failed += 1
        self._last_error = error


def _safe(url: str) -> str:
    """``url`` without its password and query (log lines, and trigger messages, which every
    reader of the group sees). The user info ends at the host's last ``@`` (a password may
    hold an unescaped one); query values (TLS options, perhaps a password) are dropped."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        return "******"
    end = len(rest)
    for stop in "/?#":
        index = rest.find(stop, rest.rfind("@") + 1)
        if index >= 0:
            end = min(end, index)
    netloc, tail = rest[:end], rest[end:]
    creds, at, host = netloc.rpartition("@")
    user = creds.split(":", 1)[0]
    path = tail.split("?", 1)[0].split("#", 1)[0]
    return f"{scheme}://{user}{at}{host}{path}"
