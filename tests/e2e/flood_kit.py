"""Floods of an executor's port (issue #19 item 7(c)), shared by the end-to-end test and
``bench/executor_flood.py``: idle connections held from several loopback addresses (re-opened
as the server closes them), token-less ``POST /run`` with large bodies, and the executor's
memory sampled meanwhile."""

from __future__ import annotations

import selectors
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import psutil

from tests.e2e.edge_kit import exchange, parse

# 127.0.0.0/8 is loopback on Linux: each address is another client to the executor.
SOURCES = tuple(f"127.0.0.{n}" for n in range(1, 10))


class IdleFlood:
    """Holds ``count`` idle connections to ``port`` (round robin over ``SOURCES``) from a
    thread; each one the server closes is replaced by a new one until :meth:`stop`."""

    def __init__(self, port: int, count: int) -> None:
        self.port = port
        self.count = count
        self.opened = 0
        self.closed_by_server = 0
        self.connect_failures = 0
        self.held_at_full = threading.Event()  # ``count`` connections were open at once
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="idle-flood", daemon=True)

    def __enter__(self) -> IdleFlood:
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(30)

    def _connect(self) -> socket.socket | None:
        source = SOURCES[self.opened % len(SOURCES)]
        sock = socket.socket()
        try:
            sock.settimeout(2)
            sock.bind((source, 0))
            sock.connect(("127.0.0.1", self.port))
            sock.setblocking(False)
        except OSError:
            sock.close()
            self.connect_failures += 1
            return None
        self.opened += 1
        return sock

    def _run(self) -> None:
        held = selectors.DefaultSelector()
        try:
            while not self._stop.is_set():
                while len(held.get_map()) < self.count and not self._stop.is_set():
                    sock = self._connect()
                    if sock is not None:
                        held.register(sock, selectors.EVENT_READ)
                if len(held.get_map()) >= self.count:
                    self.held_at_full.set()
                for key, _ in held.select(timeout=0.05):
                    ready = key.fileobj
                    assert isinstance(ready, socket.socket)
                    try:
                        data = ready.recv(4096)
                    except OSError:
                        data = b""
                    if not data:
                        self.closed_by_server += 1
                        held.unregister(ready)
                        ready.close()
        finally:
            for key in list(held.get_map().values()):
                held.unregister(key.fileobj)
                key.fileobj.close()  # type: ignore[union-attr]
            held.close()


def tokenless_run(port: int, body_bytes: int) -> tuple[int, object]:
    """``POST /run`` without the access token and with a body of ``body_bytes``; the status and
    the JSON answer."""
    head = (b"POST /run HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nConnection: close\r\n"
            b"Content-Length: %d\r\n\r\n" % body_bytes)
    status, _, answer = parse(exchange(port, head + b" " * body_bytes, timeout_s=60))
    return status, answer


def tokenless_runs(port: int, count: int, body_bytes: int) -> list[tuple[int, object]]:
    """``count`` of :func:`tokenless_run` at once."""
    with ThreadPoolExecutor(count) as pool:
        return list(pool.map(lambda _: tokenless_run(port, body_bytes), range(count)))


@dataclass
class RssSampler:
    """The peak resident memory of a process, sampled every 20 ms from a thread."""

    pid: int
    before: int = 0
    peak: int = 0

    def __post_init__(self) -> None:
        self._process = psutil.Process(self.pid)
        self.before = self.peak = self._process.memory_info().rss
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="rss-sampler", daemon=True)

    def __enter__(self) -> RssSampler:
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._stop.set()
        self._thread.join(10)

    def _run(self) -> None:
        while not self._stop.wait(0.02):
            self.peak = max(self.peak, self._process.memory_info().rss)

    @property
    def growth_mb(self) -> float:
        return (self.peak - self.before) / (1 << 20)


def wait_for(flag: threading.Event, what: str, limit_s: float = 60.0) -> None:
    started = time.monotonic()
    if not flag.wait(limit_s):
        raise AssertionError(f"{what} not reached in {time.monotonic() - started:.0f} s")
