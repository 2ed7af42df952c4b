"""Broker dispatch, the admin's side: runs for ``broker://`` executors published to RabbitMQ.

One connection and one channel with publisher confirms per admin node. A publish is
complete when the broker confirms it (the message is persistent and its queue durable: the
broker has it on disk); many publishes are in flight at once (each fire awaits its own
confirm), which is where the throughput comes from (bench/RESULTS.md). A message no queue
takes (its queue was deleted) comes back as returned and fails the publish: never dropped
without a word.

The connection is kept by a task that reconnects with backoff (a log line when it is lost,
one when it is back). A publish made while it is down waits for it up to its timeout; one
whose confirm was lost with the connection is published again after the reconnect (the
same run: the executor's run-id deduplication keeps it from running twice there). What
cannot be published within the timeout fails as :class:`BrokerUnavailable`, which the
trigger records as a failed trigger (retries apply), as for an executor that refuses
connections; a confirm that does not come within it (the message may be queued) is
``timeout``: the lost-run and unsure-fire rules apply, as to a push call whose answer was lost.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable

import aio_pika
import aiormq
from aio_pika.abc import AbstractChannel, AbstractConnection, DeliveryMode

from jobring.http1.client import HttpError
from jobring.protocol.broker import queue_arguments

log = logging.getLogger(__name__)

_FIRST_RETRY_S = 0.2


class BrokerUnavailable(HttpError):
    """A run not published (``timeout``: published, its confirm never came)."""


class BrokerPublisher:
    """Publishes runs to the broker at ``url`` (``amqp://user:password@host:port/vhost``)."""

    def __init__(self, url: str, *, max_backoff_s: float = 2.0, connect_timeout_s: float = 3.0) -> None:
        self.url = url
        self._max_backoff_s = max_backoff_s
        self._connect_timeout_s = connect_timeout_s
        self._channel: AbstractChannel | None = None
        self._connection: AbstractConnection | None = None
        self._up = asyncio.Event()
        self._declared: set[str] = set()
        self._task: asyncio.Task[None] | None = None
        self._closing = False
        self.published = 0
        self.failed = 0
        self.last_error: str | None = None

    @property
    def connected(self) -> bool:
        return self._up.is_set()

    def start(self) -> None:
        """Connect in the background (the admin starts whether the broker is up or not)."""
        if self._task is None:
            self._task = asyncio.create_task(self._keep_connected(), name="jobring-broker-publisher")

    async def aclose(self) -> None:
        self._closing = True
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        await self._drop()

    async def _keep_connected(self) -> None:
        retry_s, failing = _FIRST_RETRY_S, False
        while True:
            lost = asyncio.Event()
            on_close = _setter(lost)
            try:
                connection = await aio_pika.connect(self.url, timeout=self._connect_timeout_s)
                channel = await connection.channel(publisher_confirms=True, on_return_raises=True)
            except (TimeoutError, OSError, aiormq.exceptions.AMQPError) as exc:
                self.last_error = f"{type(exc).__name__}: {exc}"
                if not failing:
                    log.warning("broker %s unreachable (%s); retrying with backoff", _safe(self.url),
                                self.last_error)
                failing = True
                await asyncio.sleep(retry_s)
                retry_s = min(retry_s * 2, self._max_backoff_s)
                continue
            connection.close_callbacks.add(on_close)
            channel.close_callbacks.add(on_close)
            self._connection, self._channel = connection, channel
            self._declared.clear()
            self._up.set()
            log.info("broker %s connected: publishing runs", _safe(self.url))
            retry_s, failing = _FIRST_RETRY_S, False
            await lost.wait()
            self._up.clear()
            if not self._closing:
                log.warning("broker %s connection lost; reconnecting", _safe(self.url))
            await self._drop()

    async def _drop(self) -> None:
        self._up.clear()
        connection, self._connection, self._channel = self._connection, None, None
        if connection is not None and not connection.is_closed:
            with contextlib.suppress(Exception):
                await connection.close()

    async def publish(self, queue: str, body: bytes, message_id: str, *, own: bool, timeout_s: float) -> None:
        """Publish one run to ``queue`` (an executor's ``own`` queue or a group queue) and wait
        for the broker's confirm; :class:`BrokerUnavailable` if it cannot be had in ``timeout_s``."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        sent = False  # a publish whose confirm was lost: perhaps queued
        while True:
            channel = self._channel
            if channel is None or not self._up.is_set():
                await self._wait_up(deadline, sent)
                continue
            try:
                if queue not in self._declared:
                    await channel.declare_queue(queue, durable=True, arguments=queue_arguments(own),
                                                timeout=max(0.01, deadline - loop.time()))
                    self._declared.add(queue)
                message = aio_pika.Message(body, delivery_mode=DeliveryMode.PERSISTENT, message_id=message_id,
                                           content_type="application/json")
                sent = True
                await channel.default_exchange.publish(message, routing_key=queue, mandatory=True,
                                                       timeout=max(0.01, deadline - loop.time()))
            except TimeoutError:
                self._fail("no confirm")
                raise BrokerUnavailable("BrokerTimeout", f"the broker did not confirm within {timeout_s:g} s",
                                        timeout=True) from None
            except aio_pika.exceptions.PublishError as exc:
                self._fail(str(exc))
                raise BrokerUnavailable("BrokerReturned", f"the broker returned the run: {exc}",
                                        timeout=False) from None
            except (aiormq.exceptions.AMQPError, aio_pika.exceptions.ChannelInvalidStateError, OSError,
                    RuntimeError) as exc:
                # The connection or channel went away during the call: wait for the reconnect,
                # then publish again (the same run id).
                self.last_error = f"{type(exc).__name__}: {exc}"
                if not channel.is_closed:
                    self._fail(self.last_error)
                    raise BrokerUnavailable(type(exc).__name__, str(exc), timeout=sent) from None
                if self._channel is channel:
                    self._up.clear()
                await self._wait_up(deadline, sent)
                continue
            self.published += 1
            return

    async def _wait_up(self, deadline: float, sent: bool) -> None:
        remaining = deadline - asyncio.get_running_loop().time()
        if remaining > 0:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._up.wait(), remaining)
            if self._up.is_set() and self._channel is not None:
                return
        self._fail(self.last_error or "not connected")
        raise BrokerUnavailable("BrokerUnavailable", f"broker {_safe(self.url)} unavailable: "
                                f"{self.last_error or 'not connected'}", timeout=sent)

    def _fail(self, error: str) -> None:
        self.failed += 1
        self.last_error = error


def _setter(event: asyncio.Event) -> Callable[..., None]:
    """A close callback that sets ``event``."""
    def closed(*_: object) -> None:
        event.set()
    return closed


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
