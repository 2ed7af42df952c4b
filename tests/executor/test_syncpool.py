"""The sync-handler pool: results and errors back on the loop, bounded threads, shutdown."""

from __future__ import annotations

import asyncio
import threading

import pytest

from jobring.executor.syncpool import SyncPool


async def test_results_and_errors_come_back_as_loop_futures() -> None:
    pool = SyncPool(4, "t")
    loop = asyncio.get_running_loop()
    try:
        assert await pool.submit(loop, lambda a, b: a + b, 2, 3) == 5
        with pytest.raises(ValueError, match="bad"):
            await pool.submit(loop, _raise, ValueError("bad"))
        with pytest.raises(RuntimeError, match="StopIteration"):  # a future cannot carry StopIteration
            await pool.submit(loop, _raise, StopIteration())
        assert pool.thread_count == 1  # one idle thread takes each next call
    finally:
        pool.shutdown()


async def test_threads_are_bounded_and_calls_wait_for_a_free_one() -> None:
    pool = SyncPool(2, "t")
    loop = asyncio.get_running_loop()
    gate = threading.Event()
    try:
        futures = [pool.submit(loop, gate.wait, 5.0) for _ in range(4)]
        assert pool.thread_count == 2
        gate.set()
        assert await asyncio.wait_for(asyncio.gather(*futures), 5.0) == [True] * 4
    finally:
        pool.shutdown()


async def test_shutdown_drops_calls_not_started_and_refuses_new_ones() -> None:
    pool = SyncPool(1, "t")
    loop = asyncio.get_running_loop()
    gate = threading.Event()
    started = pool.submit(loop, gate.wait, 5.0)
    queued = pool.submit(loop, lambda: "never")
    pool.shutdown()
    assert queued.cancelled()
    with pytest.raises(RuntimeError, match="shut down"):
        pool.submit(loop, lambda: None)
    gate.set()
    assert await asyncio.wait_for(started, 5.0) is True  # a running call finishes on its own


def _raise(exc: BaseException) -> None:
    raise exc
