"""An admin stops within seconds of SIGTERM while its database does not answer at all (a
frozen host: connections stay open, nothing comes back), on PostgreSQL and MariaDB."""

from __future__ import annotations

import asyncio
import signal
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from sqlalchemy.engine import make_url

from jobring.admin.store import Store
from tests.e2e.admin_nodes import (
    RecordingExecutor,
    add_manual_group,
    free_port,
    kill,
    start_admin,
    start_jobs_together,
)
from tests.e2e.databases import server_database

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]

# The admin's shutdown budget (runtime.STOP_BUDGET_S) plus a moment per step and process exit.
STOP_WITHIN_S = 15.0


class FreezingProxy:
    """Forwards 127.0.0.1:<port> to the database; once frozen, nothing goes through either
    way and no connection is closed (new ones are accepted and hang as well)."""

    def __init__(self, host: str, port: int) -> None:
        self.target = (host, port)
        self.port = free_port()
        self.frozen = asyncio.Event()
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self._tasks: set[asyncio.Task[None]] = set()

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", self.port)

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        for writer in self._writers:
            writer.transport.abort()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._writers.add(writer)
        if self.frozen.is_set():
            return  # accepted, never answered
        up_reader, up_writer = await asyncio.open_connection(*self.target)
        self._writers.add(up_writer)
        for task in (asyncio.create_task(self._pipe(reader, up_writer)),
                     asyncio.create_task(self._pipe(up_reader, writer))):
            self._tasks.add(task)

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while data := await reader.read(65536):
            if self.frozen.is_set():
                await asyncio.Event().wait()  # held forever: the host froze
            writer.write(data)
            await writer.drain()
        writer.transport.abort()


@pytest.fixture(params=["postgresql", "mariadb"])
async def server_url(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[str]:
    async for url in server_database(request.param, tmp_path):
        yield url


async def test_sigterm_stops_the_admin_while_the_database_hangs(server_url: str, tmp_path: Path) -> None:
    target = make_url(server_url)
    proxy = FreezingProxy(target.host or "127.0.0.1", int(target.port or 0))
    await proxy.start()
    executor = RecordingExecutor()
    await executor.start()
    store = await Store.open(server_url)
    node = None
    try:
        group_id = await add_manual_group(store, executor.address)
        await start_jobs_together(store, group_id, 10, 50, 1_500)
        url = target.set(host="127.0.0.1", port=proxy.port).render_as_string(False)
        node = await start_admin(url, "node-a", tmp_path)
        await asyncio.sleep(3.5)  # holding and firing the jobs
        assert executor.calls, node.log_text()[-2_000:]
        proxy.frozen.set()
        await asyncio.sleep(1.0)  # statements in flight now hang
        started = time.monotonic()
        node.proc.send_signal(signal.SIGTERM)
        try:
            await asyncio.wait_for(node.proc.wait(), STOP_WITHIN_S)
        except TimeoutError:
            pytest.fail(f"no exit within {STOP_WITHIN_S} s of SIGTERM:\n{node.log_text()[-3_000:]}")
        took = time.monotonic() - started
        assert took < STOP_WITHIN_S
        assert "stopped" in node.log_text()  # through the shutdown, not killed
    finally:
        if node is not None:
            await kill(node)
        await proxy.close()
        await executor.stop()
        await store.close()
