"""RabbitMQ for the broker dispatch tests (docs/dispatch.md, "Broker mode").

``amqp_url()`` is the local broker (``JOBRING_TEST_AMQP_URL``, default guest on
127.0.0.1:5672); when nothing listens there the test is skipped with the reason, or fails
when ``CI=true``. Each test uses an appname of its own (so queues of its own) and deletes
its queues at the end (``delete_queues``).
"""

from __future__ import annotations

import os
import secrets
import socket
from urllib.parse import urlsplit

import aio_pika
import pytest

from tests.dbs import must_fail_when_unavailable

AMQP_URL = os.environ.get("JOBRING_TEST_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/")


def amqp_url() -> str:
    """The test broker's URL; skips (fails on CI) when it does not answer."""
    parts = urlsplit(AMQP_URL)
    try:
        with socket.create_connection((parts.hostname or "127.0.0.1", parts.port or 5672), timeout=2):
            pass
    except OSError as exc:
        reason = f"RabbitMQ not reachable at {parts.hostname}:{parts.port or 5672} ({exc})"
        if must_fail_when_unavailable():
            pytest.fail(f"{reason} (CI=true: RabbitMQ must be available)", pytrace=False)
        pytest.skip(reason)
    return AMQP_URL


def unique_app(prefix: str = "t-broker") -> str:
    return f"{prefix}-{secrets.token_hex(4)}"


async def delete_queues(url: str, *names: str) -> None:
    """Delete the test's queues (those that exist)."""
    connection = await aio_pika.connect(url, timeout=5)
    try:
        for name in names:
            channel = await connection.channel()
            await channel.queue_delete(name)
            await channel.close()
    finally:
        await connection.close()
