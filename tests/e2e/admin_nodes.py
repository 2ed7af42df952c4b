"""Helpers for end-to-end admin tests: admin node processes and a recording executor.

``start_admin`` runs ``jobring admin`` as a real process on a free loopback port and waits
for ``/health``; ``RecordingExecutor`` is a minimal executor (HTTP/1.1 on loopback) that
answers every ``/run`` with success and records the call with its arrival time.
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import sys
import time
from collections.abc import Coroutine
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import orjson
from sqlalchemy import bindparam, select, update

from jobring.admin.store import Store
from jobring.admin.store.records import JobGroup, JobInfo
from jobring.admin.store.tables import job_info, job_log

TOKEN = "e2e-admin-token-0123"
ADMIN_PASSWORD = "e2e-password-1234"
START_LIMIT_S = 90.0  # the admin imports FastAPI, migrates and hashes a password on a busy box


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class AdminNode:
    proc: asyncio.subprocess.Process
    port: int
    node_id: str
    log_file: Path

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def log_text(self) -> str:
        return self.log_file.read_text(encoding="utf-8", errors="replace")


PORT_TAKEN = "is in use"  # the admin's refusal when its port was taken (jobring.listen)


async def start_admin(database_url: str, node_id: str, workdir: Path, *extra: str,
                      env: dict[str, str] | None = None, port: int | None = None) -> AdminNode:
    """An admin process, healthy. Without ``port`` a free one is picked, and picked again when
    another process took it before the admin bound it (an outgoing connection's ephemeral port
    can be the one just found free: seen with the chaos lanes' parallel clusters)."""
    if port is not None:
        return await _start_admin(database_url, node_id, workdir, *extra, env=env, port=port)
    for _ in range(2):
        try:
            return await _start_admin(database_url, node_id, workdir, *extra, env=env, port=free_port())
        except AssertionError as refused:
            if PORT_TAKEN not in str(refused):
                raise
    return await _start_admin(database_url, node_id, workdir, *extra, env=env, port=free_port())


async def _start_admin(database_url: str, node_id: str, workdir: Path, *extra: str,
                       env: dict[str, str] | None, port: int) -> AdminNode:
    log_file = workdir / f"admin-{node_id}.log"
    environ = {k: v for k, v in os.environ.items() if not k.startswith("JOBRING_")}
    # The global executor token is opted into (executors here share it); ``env`` may override
    # it, e.g. with "" to run without one.
    environ.update(JOBRING_ACCESS_TOKEN=TOKEN, JOBRING_ADMIN_PASSWORD=ADMIN_PASSWORD, JOBRING_NODE_ID=node_id)
    environ.update(env or {})
    with log_file.open("wb") as out:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-c", "import sys; from jobring.cli import main; sys.exit(main())",
            "admin", "--database-url", database_url, "--port", str(port), *extra,
            stdout=out, stderr=out, env=environ, cwd=str(workdir),
        )
    node = AdminNode(proc, port, node_id, log_file)
    try:
        await wait_healthy(node)
    except BaseException:
        await kill(node)
        raise
    return node


async def wait_healthy(node: AdminNode) -> dict[str, Any]:
    deadline = time.monotonic() + START_LIMIT_S
    async with httpx.AsyncClient() as client:
        while True:
            if node.proc.returncode is not None:
                code = node.proc.returncode
                raise AssertionError(f"admin {node.node_id} exited {code}:\n{node.log_text()}")
            try:
                response = await client.get(node.base_url + "/health", timeout=2.0)
                if response.status_code == 200:
                    body: dict[str, Any] = response.json()
                    return body
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise AssertionError(f"admin {node.node_id} not healthy in time:\n{node.log_text()}")
            await asyncio.sleep(0.1)


async def stop(node: AdminNode, limit_s: float = 30.0) -> int:
    """SIGTERM and wait; returns the exit code (kills after ``limit_s``)."""
    if node.proc.returncode is None:
        node.proc.send_signal(signal.SIGTERM)
        try:
            await asyncio.wait_for(node.proc.wait(), limit_s)
        except TimeoutError:
            await kill(node)
            text = node.log_text()
            raise AssertionError(f"admin {node.node_id} did not stop on SIGTERM:\n{text}") from None
    assert node.proc.returncode is not None
    return node.proc.returncode


async def kill(node: AdminNode) -> None:
    if node.proc.returncode is None:
        node.proc.kill()
        await node.proc.wait()


@dataclass
class RunCall:
    log_id: int
    job_id: int
    at_ms: int
    params: str = ""
    logical_time: int | None = None  # jobring's logicalTime field
    data_interval_start: int | None = None


@dataclass
class RecordingExecutor:
    """Answers ``/run`` (and anything else) with ReturnT success; records /run calls.

    ``dialect`` says how it answers an admin that asks whether it received a run (after a
    takeover, trigger/unsure.py): "jobring" answers ``/received`` from the runs it got
    and takes a repeated run id as already received (not run, not recorded again), as the
    jobring executor does; "xxl" does not know ``/received`` and answers ``/log`` like
    xxl-job-core (a log file per run it got, ``readLog fail, logFile not exists`` else),
    and would run a repeated run id again (recorded again: a double)."""

    calls: list[RunCall] = field(default_factory=list)
    port: int = 0
    dialect: str = "jobring"
    repeats: int = 0  # repeated run ids answered "already received" (jobring dialect)
    asked: int = 0  # /received or /log questions
    # Every answer held back this long (recorded at once): a node killed now has fires the
    # executor received and the node never heard confirmed, whatever the instant of the kill.
    answer_delay_ms: int = 0
    _server: asyncio.Server | None = None
    _seen: set[int] = field(default_factory=set)
    # The admins' open (kept-alive) connections: closed by stop(), not left for the garbage
    # collector (an unclosed transport warns, and warnings fail whichever test is running).
    _transports: set[asyncio.Transport] = field(default_factory=set)
    # For doubles that call the admin back (results, registry): their background tasks and
    # client, ended by stop().
    _tasks: set[asyncio.Task[None]] = field(default_factory=set)
    _http: httpx.AsyncClient | None = None

    @property
    def address(self) -> str:
        return f"http://127.0.0.1:{self.port}/"

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(lambda: _RecordingProtocol(self), "127.0.0.1", 0)
        self.port = int(self._server.sockets[0].getsockname()[1])

    def _spawn(self, work: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def stop(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._http is not None:
            await self._http.aclose()
        if self._server is not None:
            self._server.close()
            for transport in list(self._transports):
                transport.abort()
            self._transports.clear()
            await self._server.wait_closed()

    def record(self, path: bytes, body: bytes) -> bytes:
        """Handle one request; the ReturnT body to answer."""
        name = path.rstrip(b"/").rsplit(b"/", 1)[-1]
        if name == b"run":
            param = orjson.loads(body)
            log_id = int(param["logId"])
            if self.dialect == "jobring" and log_id in self._seen:
                self.repeats += 1
                return orjson.dumps({"code": 200, "msg": "already received"})
            self._seen.add(log_id)
            self.calls.append(RunCall(log_id, int(param["jobId"]), time.time_ns() // 1_000_000,
                                      param.get("executorParams") or "", param.get("logicalTime"),
                                      param.get("dataIntervalStart")))
        elif name == b"received":
            self.asked += 1
            if self.dialect != "jobring":
                refusal = "invalid request, uri-mapping(/received) not found."
                return orjson.dumps({"code": 500, "msg": refusal})
            runs = orjson.loads(body)["runs"]
            got = sorted({int(r[0]) for r in runs} & self._seen)
            return orjson.dumps({"code": 200, "msg": None, "content": {"received": got}})
        elif name == b"log" and self.dialect == "xxl":
            self.asked += 1
            if int(orjson.loads(body)["logId"]) in self._seen:
                content = {"fromLineNum": 1, "toLineNum": 1, "logContent": "job execute start\n",
                           "isEnd": False}
            else:
                content = {"fromLineNum": 1, "toLineNum": 0, "logContent": "readLog fail, logFile not exists",
                           "isEnd": True}
            return orjson.dumps({"code": 200, "msg": None, "content": content})
        return _OK


_OK = b'{"code":200,"msg":null}'


def _response(body: bytes) -> bytes:
    return (b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: "
            + str(len(body)).encode() + b"\r\n\r\n" + body)


_RESPONSE = _response(_OK)


class _RecordingProtocol(asyncio.Protocol):
    def __init__(self, owner: RecordingExecutor) -> None:
        self.owner = owner
        self.buffer = b""
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        self.owner._transports.add(transport)

    def connection_lost(self, exc: Exception | None) -> None:
        if self.transport is not None:
            self.owner._transports.discard(self.transport)

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        while (head_end := self.buffer.find(b"\r\n\r\n")) >= 0:
            head = self.buffer[:head_end]
            length = 0
            for line in head.split(b"\r\n")[1:]:
                name, _, value = line.partition(b":")
                if name.strip().lower() == b"content-length":
                    length = int(value.strip())
            end = head_end + 4 + length
            if len(self.buffer) < end:
                return
            path = head.split(b" ", 2)[1]
            answer = self.owner.record(path, self.buffer[head_end + 4:end])
            self.buffer = self.buffer[end:]
            assert self.transport is not None
            response = _RESPONSE if answer is _OK else _response(answer)
            if self.owner.answer_delay_ms:
                # One delay for every answer keeps them in request order on the connection.
                delay_s = self.owner.answer_delay_ms / 1000
                asyncio.get_running_loop().call_later(delay_s, self._write, response)
            else:
                self.transport.write(response)

    def _write(self, response: bytes) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.write(response)


async def add_manual_group(store: Store, address: str) -> int:
    group = JobGroup(app_name="e2e-exec", title="e2e", address_type=1, address_list=address)
    return await store.groups.create(group, datetime(2024, 1, 1))


def fix_rate(group_id: int, next_ms: int, seconds: int = 1, **changes: Any) -> JobInfo:
    values: dict[str, Any] = {
        "job_group": group_id, "job_desc": "e2e", "schedule_type": "FIX_RATE", "schedule_conf": str(seconds),
        "misfire_strategy": "DO_NOTHING", "executor_route_strategy": "FIRST", "executor_handler": "hello",
        "executor_block_strategy": "SERIAL_EXECUTION", "glue_type": "BEAN", "trigger_status": 1,
        "trigger_next_time": next_ms}
    values.update(changes)
    return JobInfo(**values)


async def start_jobs_together(store: Store, group_id: int, count: int, spacing_ms: int,
                              lead_ms: int) -> tuple[list[int], int]:
    """Create ``count`` stopped 1 s FIX_RATE jobs, then start them all in one transaction with
    first instants ``first + i * spacing_ms``, ``first`` being ``lead_ms`` after that commit.

    Inserting the jobs one by one takes seconds on a loaded box; planned from before the
    inserts, the first instants of the last jobs could pass before the jobs even exist."""
    ids = [await store.jobs.create(fix_rate(group_id, 0, trigger_status=0)) for _ in range(count)]
    stmt = (update(job_info).where(job_info.c.id == bindparam("job_id"))
            .values(trigger_status=1, trigger_next_time=bindparam("next_ms")))
    async with store.engine.begin() as conn:
        first = now_ms() + lead_ms
        await conn.execute(stmt, [{"job_id": job_id, "next_ms": first + i * spacing_ms}
                                  for i, job_id in enumerate(ids)])
    return ids, first


async def fired(store: Store) -> list[Any]:
    """Every log row: job_id, planned_time, trigger_type, admin_node, trigger_code, dispatch_time."""
    async with store.engine.connect() as conn:
        return list((await conn.execute(
            select(job_log.c.id, job_log.c.job_id, job_log.c.planned_time, job_log.c.trigger_type,
                   job_log.c.admin_node, job_log.c.trigger_code, job_log.c.dispatch_time,
                   job_log.c.handle_code)
            .order_by(job_log.c.job_id, job_log.c.planned_time))).all())


def now_ms() -> int:
    return time.time_ns() // 1_000_000
