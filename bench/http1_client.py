"""CPU per call of the admin's HTTP/1.1 client alone (no sockets, no executor): one POST
and the parse of a Java-executor-like answer over an in-memory connection, and the parse
alone. Process CPU time, so the numbers hold on a busy machine better than wall time.

    .venv/bin/python bench/http1_client.py [--calls 10000] [--rounds 7]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from collections.abc import Callable

from jobring.http1.client import Http1Client
from jobring.http1.wire import HIGH_WATER, MAX_BODY, MAX_HEAD, Connection

# As a Java (Spring Boot / netty) executor answers a /run.
ANSWER = (b"HTTP/1.1 200 \r\nContent-Type: text/html;charset=UTF-8\r\nContent-Length: 23\r\n"
          b"Date: Tue, 24 Nov 2026 00:00:00 GMT\r\nKeep-Alive: timeout=60\r\nConnection: keep-alive\r\n\r\n"
          b'{"code":200,"msg":null}')


class _Echo(asyncio.Transport):
    """Answers every write with ANSWER on the next loop turn."""

    def __init__(self, protocol: asyncio.Protocol) -> None:
        super().__init__()
        self._protocol = protocol

    def write(self, data: bytes | bytearray | memoryview) -> None:
        asyncio.get_running_loop().call_soon(self._protocol.data_received, ANSWER)

    def close(self) -> None:
        pass


async def _connect(factory: Callable[[], asyncio.Protocol], host: str, port: int
                   ) -> tuple[asyncio.BaseTransport, asyncio.Protocol]:
    protocol = factory()
    transport = _Echo(protocol)
    protocol.connection_made(transport)
    return transport, protocol


async def _calls(client: Http1Client, n: int) -> float:
    start = time.process_time()
    for _ in range(n):
        await client.post_now("http://e1:9999/run", b'{"jobId":1,"logId":2}', b"XXL-JOB-ACCESS-TOKEN: t\r\n")
    return (time.process_time() - start) / n * 1e6


async def _parses(n: int) -> float:
    conn = Connection(MAX_HEAD, MAX_BODY, HIGH_WATER)
    conn.connection_made(_Echo(conn))
    start = time.process_time()
    for _ in range(n):
        conn.data_received(ANSWER)
        await conn.answer()
    return (time.process_time() - start) / n * 1e6


async def main(calls: int, rounds: int) -> None:
    client = Http1Client({"Content-Type": "application/json;charset=UTF-8"}, connect_timeout=3.0,
                         read_timeout=3.0, keepalive_s=15.0, connect=_connect)
    per_call, per_parse = [], []
    for _ in range(rounds):
        per_call.append(await _calls(client, calls))
        per_parse.append(await _parses(calls))
    await client.aclose()
    print(f"Http1Client post_now + answer: median {statistics.median(per_call):.1f} us CPU per call "
          f"(min {min(per_call):.1f})")
    print(f"answer parse alone           : median {statistics.median(per_parse):.2f} us CPU per answer "
          f"(min {min(per_parse):.2f})")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--calls", type=int, default=10000)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    asyncio.run(main(args.calls, args.rounds))
