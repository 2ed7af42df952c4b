"""The executor's HTTP side under its historical import path.

The code lives in :mod:`jobring.executor.http`: ``app`` (the ASGI endpoints), ``decode``
(request bodies to protocol models), ``protocol`` and ``limits`` (the standalone server).
"""

from __future__ import annotations

from jobring.executor.http.app import (
    MSG_JOB_BUSY,
    MSG_NOT_STARTED,
    ExecutorEndpoints,
    LogReader,
    RunService,
)
from jobring.executor.http.decode import MAX_BODY_BYTES, decode_trigger, read_body
from jobring.executor.http.limits import ServerLimits
from jobring.executor.http.protocol import KEEP_ALIVE_TIMEOUT_S, LINGER_S, ExecutorHttpServer

__all__ = [
    "KEEP_ALIVE_TIMEOUT_S",
    "LINGER_S",
    "MAX_BODY_BYTES",
    "MSG_JOB_BUSY",
    "MSG_NOT_STARTED",
    "ExecutorEndpoints",
    "ExecutorHttpServer",
    "LogReader",
    "RunService",
    "ServerLimits",
    "decode_trigger",
    "read_body",
]
