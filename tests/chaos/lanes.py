"""Runs the selected chaos scenarios in the background, a few at a time, so the suite takes
about the time of its longest lanes rather than the sum of all scenarios.

Each scenario runs on PostgreSQL and MariaDB at once; ``lanes`` scenarios run together, in
the order given (the tests' order, so the first test waits the least). Everything runs on a
private event loop in a thread; ``close`` cancels what is still running (the clusters kill
their processes and drop their databases on the way out) and waits for it.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import threading
from pathlib import Path

from tests.chaos.harness import SERVER_BACKENDS, Verdict
from tests.chaos.scenarios import Timing, run_scenario

Outcome = dict[str, Verdict | BaseException]


class ScenarioLanes:
    def __init__(self, names: list[str], workdir: Path, timing: Timing, lanes: int = 2) -> None:
        self.names = names
        self.workdir = workdir
        self.timing = timing
        self.lanes = lanes
        self.futures = {name: concurrent.futures.Future[Outcome]() for name in names}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._main: asyncio.Task[None] | None = None
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, name="chaos-lanes", daemon=True)

    def start(self) -> None:
        self._thread.start()
        self._ready.wait(10)

    def result(self, name: str, timeout_s: float) -> Outcome:
        return self.futures[name].result(timeout_s)

    def close(self) -> None:
        # Cancelled only when a scenario is still running (a test failed or timed out): once
        # every result is in, the loop is about to end on its own.
        unfinished = not all(future.done() for future in self.futures.values())
        if unfinished and self._thread.is_alive() and self._loop is not None and self._main is not None:
            with contextlib.suppress(RuntimeError):  # the loop ended meanwhile: nothing to cancel
                self._loop.call_soon_threadsafe(self._main.cancel)
        self._thread.join(120)
        for future in self.futures.values():
            future.cancel()

    def _run(self) -> None:
        with contextlib.suppress(asyncio.CancelledError):  # close() cancelled what still ran
            asyncio.run(self._all())

    async def _all(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._main = asyncio.current_task()
        self._ready.set()
        slots = asyncio.Semaphore(self.lanes)

        async def one(name: str) -> None:
            async with slots:
                results = await asyncio.gather(
                    *(run_scenario(name, b, self.workdir, self.timing) for b in SERVER_BACKENDS),
                    return_exceptions=True)
            self.futures[name].set_result(dict(zip(SERVER_BACKENDS, results, strict=True)))

        tasks = [asyncio.create_task(one(name)) for name in self.names]
        try:
            await asyncio.gather(*tasks)
        except asyncio.CancelledError:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            raise
