"""Starting the executor's standalone server on a loopback socket for the server tests, and
a run service that accepts every run."""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from jobring.executor.http.app import ExecutorEndpoints
from jobring.executor.http.limits import ServerLimits
from jobring.executor.http.protocol import ExecutorHttpServer
from jobring.protocol.edge import HeadLimits
from jobring.protocol.models import LogResult, ReturnT, TriggerParam


class Service:
    def __init__(self) -> None:
        self.ran: list[int] = []

    async def run(self, param: TriggerParam) -> ReturnT:
        self.ran.append(param.job_id)
        return ReturnT.success()

    def is_idle(self, job_id: int) -> bool:
        return True

    async def kill(self, job_id: int) -> ReturnT:
        return ReturnT.success()


def read_log(log_date_time: int, log_id: int, from_line: int) -> LogResult:
    raise AssertionError("no log reads in these tests")


async def listening(
    service: Service, *, token: str | None = None, limits: ServerLimits | None = None,
    head_limits: HeadLimits | None = None,
) -> tuple[ExecutorHttpServer, socket.socket]:
    """A started server (token ``token``) on a free loopback port; stop it, then close the socket."""
    endpoints = ExecutorEndpoints(token)
    endpoints.bind(service, read_log)
    server = ExecutorHttpServer(endpoints, limits=limits, head_limits=head_limits)
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen()
    sock.setblocking(False)
    await server.start(sock)
    return server, sock


@asynccontextmanager
async def started_servers() -> AsyncIterator[list[tuple[ExecutorHttpServer, socket.socket]]]:
    """A list to put :func:`listening` results in; each is stopped at the end."""
    started: list[tuple[ExecutorHttpServer, socket.socket]] = []
    try:
        yield started
    finally:
        for server, sock in started:
            await server.stop(grace_s=1)
            sock.close()
