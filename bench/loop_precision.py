"""The scheduling loop alone: timer precision with real claims/advances but a no-op fire sink.

    .venv/bin/python bench/loop_precision.py --jobs 100 1000 --seconds 12

N FIX_RATE 1 s jobs (first instants 7 ms apart) on a new SQLite file; the loop claims and
advances them through the real store, and the fire sink only records when it was called.
Lateness = sink call time - planned instant (the first fifth of the fires is warm-up).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.e2e.admin_nodes import fix_rate  # noqa: E402

from jobring.admin.loop.adapters import StoreLeases  # noqa: E402
from jobring.admin.loop.loop import ScheduleLoop  # noqa: E402
from jobring.admin.loop.ports import PlannedFire  # noqa: E402
from jobring.admin.loop.timers import LoopTimers  # noqa: E402
from jobring.admin.store import Store  # noqa: E402
from jobring.core.clock import SystemClock  # noqa: E402
from jobring.core.schedule import parse_schedule  # noqa: E402


async def measure(jobs: int, seconds: float) -> str:
    folder = Path(tempfile.mkdtemp(prefix="jobring-loop-"))
    store = await Store.open(f"sqlite+aiosqlite:///{folder / 'loop.db'}")
    clock = SystemClock()
    start = clock.now_ms() + 2_000
    for i in range(jobs):
        await store.jobs.create(fix_rate(1, start + (i * 7) % 1_000))
    lateness: list[int] = []

    async def sink(fires: Sequence[PlannedFire]) -> None:
        now = clock.now_ms()
        lateness.extend(now - f.planned_ms for f in fires)

    loop = ScheduleLoop(StoreLeases(store, "bench"), sink, LoopTimers(clock), parse_schedule)
    await loop.start()
    await asyncio.sleep(seconds)
    await loop.stop()
    await store.close()
    kept = sorted(lateness[len(lateness) // 5:])
    if not kept:
        return f"| {jobs} | 0 | - | - | - |"
    return (f"| {jobs} | {len(kept)} | {kept[len(kept) // 2]} | {kept[int(len(kept) * 0.99)]} | "
            f"{kept[-1]} |")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, nargs="+", default=[100, 1000])
    parser.add_argument("--seconds", type=float, default=12.0)
    args = parser.parse_args()
    print("| jobs | fires measured | p50 ms | p99 ms | max ms |")
    print("|---|---|---|---|---|")
    for jobs in args.jobs:
        print(asyncio.run(measure(jobs, args.seconds)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
