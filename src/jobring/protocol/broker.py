"""Broker dispatch: what the admin and broker executors agree on (docs/dispatch.md, "Broker mode").

A run for a broker executor (``broker://<name>/``) travels in an AMQP message whose body is
the ``/run`` body (the TriggerParam JSON), or a batch of them (:func:`batch_body`), published
persistent through the default exchange to:

* the group's queue, :func:`group_queue`, which every broker executor of the appname
  consumes: any of them may take the run, and a run left unacknowledged by an executor that
  died goes to another;
* the chosen executor's own queue, :func:`executor_queue`, when the run must run there (its
  route strategy chose that executor on purpose, core.routing.PINNED_STRATEGIES, or it is one
  shard of a SHARDING_BROADCAST fire).

An executor's own queue is ``jobring.runs.<appname>@<name>``: ``@`` is in no appname and no
broker executor's name, so no queue of one group is spelled as a queue of another (app names
may hold ``.``: with ``.at.`` as the separator, executor ``bar`` of app ``foo`` consumed the
group queue of app ``foo.at.bar``), and :func:`permission_pattern` covers one group's queues only.

Both sides declare the queues with the same arguments (a mismatch closes the channel): the
group queue durable and without expiry; an executor's queue durable, deleted by the broker
after :data:`EXECUTOR_QUEUE_EXPIRES_MS` without a consumer (an executor that never comes
back; its runs follow the lost-run rules).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
from collections.abc import Awaitable, Callable
from typing import Any

import orjson

log = logging.getLogger(__name__)

QUEUE_PREFIX = "jobring.runs."
_OWN = "@"  # between the appname and an executor's name: in neither
# An executor's own queue outlives a restart of the executor, not its retirement.
EXECUTOR_QUEUE_EXPIRES_MS = 600_000
MAX_QUEUE_NAME = 255  # AMQP short string


def group_queue(app_name: str) -> str:
    """The queue every broker executor of ``app_name`` consumes."""
    return _checked(QUEUE_PREFIX + _app(app_name))


def executor_queue(app_name: str, name: str) -> str:
    """The queue of the broker executor ``broker://<name>/`` of ``app_name``."""
    if _OWN in name:
        raise ValueError(f"a broker executor's name may not hold {_OWN!r}: {name[:40]!r}")
    return _checked(f"{QUEUE_PREFIX}{_app(app_name)}{_OWN}{name}")


def permission_pattern(app_name: str) -> str:
    """The RabbitMQ permission regex (configure, write, read) that covers ``app_name``'s
    queues and no other group's (docs/dispatch.md, "Security")."""
    return f"^{re.escape(QUEUE_PREFIX + _app(app_name))}({_OWN}.*)?$"


def _app(app_name: str) -> str:
    if _OWN in app_name or not app_name:
        raise ValueError(f"an appname for the broker must be non-empty without {_OWN!r}: {app_name[:40]!r}")
    return app_name


def queue_arguments(own: bool) -> dict[str, Any]:
    """The declaration arguments of an executor's ``own`` queue, or of a group queue (the
    same on both sides)."""
    return {"x-expires": EXECUTOR_QUEUE_EXPIRES_MS} if own else {}


def _checked(queue: str) -> str:
    if len(queue.encode()) > MAX_QUEUE_NAME:
        raise ValueError(f"queue name longer than {MAX_QUEUE_NAME} bytes: {queue[:40]}...")
    return queue


def run_routing(body: bytes) -> tuple[str, bool]:
    """(message id, whether the run is one shard of a broadcast) of a ``/run`` body: the id
    is ``<logId>-<logDateTime>`` (the run's identity on the executor)."""
    param = orjson.loads(body)
    total = param.get("broadcastTotal", 1)
    return f"{param.get('logId', 0)}-{param.get('logDateTime', 0)}", isinstance(total, int) and total > 1


# -- batches: several runs in one message ------------------------------------------------------
# A message whose content type is RUNS_CONTENT_TYPE carries a JSON array of /run bodies (the
# publisher joins runs headed for the same queue in the same event-loop step, at most
# BATCH_MAX); any other message carries one /run body. An executor acknowledges a batch once
# every run in it is accepted (or refused and reported) and recorded.
RUNS_CONTENT_TYPE = "application/vnd.jobring.runs+json"
RUN_CONTENT_TYPE = "application/json"
BATCH_MAX = 64


def batch_body(bodies: list[bytes]) -> tuple[bytes, str]:
    """The message body and content type of ``bodies`` (each one /run body), joined without
    decoding them again."""
    if len(bodies) == 1:
        return bodies[0], RUN_CONTENT_TYPE
    return b"[" + b",".join(bodies) + b"]", RUNS_CONTENT_TYPE


def run_bodies(body: bytes, content_type: str | None) -> list[Any]:
    """The decoded /run bodies (JSON objects) of one message (:func:`batch_body`'s inverse);
    ValueError when it holds no run, or more than ``BATCH_MAX`` (no publisher makes such a
    batch, and a consumer takes one message even when it is larger than its free slots)."""
    decoded = orjson.loads(body)
    if content_type == RUNS_CONTENT_TYPE:
        if not isinstance(decoded, list) or not decoded:
            raise ValueError("a batch of runs must be a non-empty JSON array")
        if len(decoded) > BATCH_MAX:
            raise ValueError(f"a batch of {len(decoded)} runs: at most {BATCH_MAX} travel in one message")
        return decoded
    return [decoded]


# -- a kept connection ---------------------------------------------------------------------------

FIRST_RETRY_S = 0.2


class KeptConnection:
    """Keeps one broker connection up, for the admin's publisher and an executor's consumer.

    ``open_link(lost)`` connects (and sets ``lost`` when the connection or channel closes);
    ``close_link()`` drops what it opened. A failure to connect that is ``transient`` is
    retried with backoff (``FIRST_RETRY_S`` doubling to ``max_backoff_s``) with one log line
    until it works; a loss is logged and followed by a reconnect. ``up`` is set while connected.
    """

    def __init__(self, what: str, open_link: Callable[[asyncio.Event], Awaitable[None]],
                 close_link: Callable[[], Awaitable[None]], transient: tuple[type[BaseException], ...], *,
                 max_backoff_s: float = 2.0, on_loss: str = "") -> None:
        self.what = what
        self._open = open_link
        self._close = close_link
        self._transient = transient
        self._max_backoff_s = max_backoff_s
        self._on_loss = on_loss
        self.up = asyncio.Event()
        self.last_error: str | None = None
        self._task: asyncio.Task[None] | None = None
        self.closing = False

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._keep(), name=f"jobring-{self.what.replace(' ', '-')}")

    async def stop(self) -> None:
        self.closing = True
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        self.up.clear()
        await self._close()

    def lost(self) -> None:
        """The caller saw the link fail (a closed channel): no use until it is back."""
        self.up.clear()

    async def _keep(self) -> None:
        retry_s, failing = FIRST_RETRY_S, False
        while True:
            lost = asyncio.Event()
            try:
                await self._open(lost)
            except self._transient as exc:
                self.last_error = f"{type(exc).__name__}: {exc}"
                await self._close()
                if not failing:
                    log.warning("%s: broker unreachable (%s); retrying with backoff", self.what,
                                self.last_error)
                failing = True
                await asyncio.sleep(retry_s)
                retry_s = min(retry_s * 2, self._max_backoff_s)
                continue
            self.up.set()
            log.info("%s: broker connected", self.what)
            retry_s, failing = FIRST_RETRY_S, False
            await lost.wait()
            self.up.clear()
            if not self.closing:
                log.warning("%s: broker connection lost; reconnecting%s", self.what, self._on_loss)
            await self._close()
