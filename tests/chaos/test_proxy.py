"""The chaos suite's database proxy: an admin that dies must not leave its database session
open behind the proxy (the server would keep its transaction and row locks)."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct

from tests.chaos.harness import DbProxy


async def test_a_client_reset_closes_the_upstream_session() -> None:
    upstream_closed = asyncio.Event()
    got_data = asyncio.Event()

    async def database(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        # Answers once, then waits for the next command as an idle server session does.
        await reader.readexactly(5)
        got_data.set()
        writer.write(b"answer that the client never reads")
        await writer.drain()
        with contextlib.suppress(ConnectionError):
            await reader.read()  # EOF or a reset: the session ends
        upstream_closed.set()
        writer.close()

    server = await asyncio.start_server(database, "127.0.0.1", 0)
    proxy = DbProxy("127.0.0.1", server.sockets[0].getsockname()[1])
    await proxy.open()
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", proxy.port)
        writer.write(b"query")
        await asyncio.wait_for(got_data.wait(), 5)
        await asyncio.sleep(0.05)  # the answer sits unread in the client's socket
        # As a SIGKILLed process: closed with unread data and SO_LINGER 0, a reset, not a FIN.
        sock = writer.get_extra_info("socket")
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        writer.transport.abort()
        await asyncio.wait_for(upstream_closed.wait(), 5)
    finally:
        await proxy.close()
        server.close()
        await server.wait_closed()
