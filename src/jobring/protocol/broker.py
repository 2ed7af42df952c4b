"""Broker dispatch: what the admin and broker executors agree on (docs/dispatch.md, "Broker mode").

A run for a broker executor (``broker://<name>/``) is an AMQP message whose body is the
``/run`` body (the TriggerParam JSON), published persistent through the default exchange to:

* the group's queue, :func:`group_queue`, which every broker executor of the appname
  consumes: any of them may take the run, and a run left unacknowledged by an executor that
  died goes to another;
* the chosen executor's own queue, :func:`executor_queue`, when the run must run there (one
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

import re
from typing import Any

import orjson

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
