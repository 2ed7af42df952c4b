"""The SQLite write gate: a process's bulk writes one at a time, in arrival order, each begun
only when no ordinary write is queued or in progress (or after its yield); ordinary writes one
at a time in arrival order too, in their own queue; a writer that gives up leaves no hole."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from sqlalchemy import text

from jobring.admin.store import create_engine
from jobring.admin.store.engine import Db
from jobring.admin.store.write_gate import WriteGate


async def _queued(gate: WriteGate, count: int) -> None:
    # Every started writer has reached the queue (no timing: the loop runs them until they wait).
    for _ in range(100):
        if gate.waiting == count:
            return
        await asyncio.sleep(0)
    raise AssertionError(f"{gate.waiting} writers queued, expected {count}")


async def test_bulk_writes_take_turns_in_arrival_order() -> None:
    gate = WriteGate()
    order: list[str] = []
    inside = 0

    async def writer(name: str) -> None:
        nonlocal inside
        async with gate.turn(bulk=True):
            inside += 1
            assert inside == 1
            order.append(name)
            await asyncio.sleep(0)  # another writer gets the loop, not the turn
            inside -= 1

    async with gate.turn(bulk=True):
        started = [asyncio.create_task(writer(f"bulk-{i}")) for i in range(4)]
        await _queued(gate, 4)
    await asyncio.gather(*started)
    assert order == ["bulk-0", "bulk-1", "bulk-2", "bulk-3"]
    assert gate.waiting == 0


async def _queued_ordinary(gate: WriteGate, count: int) -> None:
    for _ in range(100):
        if gate.waiting_ordinary == count:
            return
        await asyncio.sleep(0)
    raise AssertionError(f"{gate.waiting_ordinary} ordinary writers queued, expected {count}")


async def test_ordinary_writes_take_turns_in_arrival_order() -> None:
    # The turn passes on as a write ends (in SQLite's busy handler the next one slept up to
    # 25 ms between tries: a workflow node start's p99, bench/RESULTS.md issue 21 wfpath).
    gate = WriteGate()
    order: list[str] = []
    inside = 0

    async def writer(name: str) -> None:
        nonlocal inside
        async with gate.turn():
            inside += 1
            assert inside == 1
            order.append(name)
            await asyncio.sleep(0)
            inside -= 1

    async with gate.turn():
        started = [asyncio.create_task(writer(f"write-{i}")) for i in range(4)]
        await _queued_ordinary(gate, 4)
    await asyncio.gather(*started)
    assert order == ["write-0", "write-1", "write-2", "write-3"]
    assert gate.waiting_ordinary == 0
    with pytest.raises(TimeoutError, match="turn to write to"):
        async with gate.turn(), gate.turn(timeout_s=0.01):
            pass
    async with gate.turn(timeout_s=0.01):  # and the gate is free again
        pass


async def test_a_bulk_write_begins_after_the_ordinary_writes_queued_or_in_progress() -> None:
    gate = WriteGate()
    order: list[str] = []

    async def bulk() -> None:
        async with gate.turn(bulk=True):
            order.append("bulk")

    async def ordinary(name: str) -> None:
        async with gate.turn():
            order.append(name)

    first = gate.turn()
    await first.__aenter__()
    second = asyncio.create_task(ordinary("second"))
    await _queued_ordinary(gate, 1)
    work = asyncio.create_task(bulk())
    for _ in range(10):
        await asyncio.sleep(0)
    assert order == []
    await first.__aexit__(None, None, None)
    await asyncio.gather(second, work)
    assert order == ["second", "bulk"]


async def test_a_bulk_write_does_not_wait_past_its_yield_for_ordinary_ones() -> None:
    gate = WriteGate(yield_s=0.01)
    # An ordinary write that lasts, and a bulk one inside it.
    async with gate.turn(), gate.turn(bulk=True):
        pass


async def test_a_cancelled_waiter_leaves_the_queue_and_the_turn_passes_on() -> None:
    gate = WriteGate()
    ran: list[str] = []

    async def writer(name: str) -> None:
        async with gate.turn(bulk=True):
            ran.append(name)

    async with gate.turn(bulk=True):
        first = asyncio.create_task(writer("first"))
        second = asyncio.create_task(writer("second"))
        await _queued(gate, 2)
        first.cancel()
        with pytest.raises(asyncio.CancelledError):
            await first
        assert gate.waiting == 1
    await second
    assert ran == ["second"]


async def test_a_waiter_cancelled_as_the_turn_reaches_it_hands_it_on() -> None:
    gate = WriteGate()
    ran: list[str] = []

    async def writer(name: str) -> None:
        async with gate.turn(bulk=True):
            ran.append(name)

    holder = gate.turn(bulk=True)
    await holder.__aenter__()
    first = asyncio.create_task(writer("first"))
    second = asyncio.create_task(writer("second"))
    await _queued(gate, 2)
    await holder.__aexit__(None, None, None)  # the turn is handed to "first" ...
    first.cancel()  # ... which is cancelled before it runs
    with pytest.raises(asyncio.CancelledError):
        await first
    await second
    assert ran == ["second"]
    async with gate.turn(bulk=True):  # and the gate is free again
        pass


@pytest.mark.parametrize("bulk", [False, True])
async def test_a_waiter_cancelled_then_passed_over_by_a_release_stays_cancelled(bulk: bool) -> None:
    # The waiter's future is cancelled at once by Task.cancel; the task only runs later. A
    # release in between pops the cancelled waiter and passes it over: the cancelled writer
    # must still end with CancelledError (it raised ValueError from deque.remove), and the
    # turn must reach the next writer.
    gate = WriteGate()
    ran: list[str] = []

    async def writer(name: str) -> None:
        async with gate.turn(bulk=bulk):
            ran.append(name)

    holder = gate.turn(bulk=bulk)
    await holder.__aenter__()
    first = asyncio.create_task(writer("first"))
    second = asyncio.create_task(writer("second"))
    await (_queued(gate, 2) if bulk else _queued_ordinary(gate, 2))
    first.cancel()  # its waiter is cancelled now; the task has not run yet ...
    await holder.__aexit__(None, None, None)  # ... when the release passes it over
    with pytest.raises(asyncio.CancelledError):
        await first
    await second
    assert ran == ["second"]
    async with gate.turn(bulk=bulk, timeout_s=0.01):  # and the gate is free again
        pass


async def test_waiting_past_the_limit_is_a_timeout_error() -> None:
    gate = WriteGate()
    async with gate.turn(bulk=True):
        with pytest.raises(TimeoutError, match="turn to write"):
            async with gate.turn(bulk=True, timeout_s=0.01):
                pass
        assert gate.waiting == 0
    async with gate.turn(bulk=True, timeout_s=0.01):
        pass


async def test_engines_on_one_sqlite_file_share_a_gate_and_writes_serialize(tmp_path: Path) -> None:
    first, second = (create_engine(f"sqlite:///{tmp_path / 'g.db'}") for _ in range(2))
    other = create_engine(f"sqlite:///{tmp_path / 'other.db'}")
    try:
        a, b, c = Db(first), Db(second), Db(other)
        assert a._gate is not None and a._gate is b._gate and c._gate is not a._gate
        async with a.write() as conn:
            await conn.execute(text("CREATE TABLE t (n INTEGER)"))

        async def add(db: Db, n: int, bulk: bool) -> None:
            async with db.write(bulk=bulk) as conn:
                await conn.execute(text("INSERT INTO t (n) VALUES (:n)"), {"n": n})

        await asyncio.gather(*(add(a if n % 2 else b, n, n % 3 == 0) for n in range(30)))
        async with a.read() as conn:
            assert (await conn.execute(text("SELECT count(*) FROM t"))).scalar() == 30
    finally:
        for engine in (first, second, other):
            await engine.dispose()


async def test_other_backends_have_no_gate() -> None:
    engine = create_engine("postgresql://u@127.0.0.1:1/none")
    try:
        assert Db(engine)._gate is None
    finally:
        await engine.dispose()
