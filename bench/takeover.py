"""Takeover after a SIGKILL: two admin processes on a fresh database, ``--jobs`` FIX_RATE 1 s
jobs, the node holding more of them killed; prints the fires lost and doubled after the kill
and how long the survivor took to dispatch the victim's jobs (see tests/e2e/takeover_kit.py).

    .venv/bin/python bench/takeover.py --backend postgresql --jobs 300

To measure another checkout, put its ``src`` first: ``PYTHONPATH=/path/to/checkout/src``
(the admin processes inherit it).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
from pathlib import Path

import jobring

sys.path.append(str(Path(__file__).resolve().parent.parent))  # tests: databases, admin processes
from tests.dbs import acreate_test_database, adrop_test_database  # noqa: E402
from tests.e2e.takeover_kit import run_takeover  # noqa: E402


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", default="postgresql", choices=["postgresql", "mariadb", "sqlite"])
    parser.add_argument("--jobs", type=int, default=300)
    parser.add_argument("--after-ms", type=int, default=15_000, help="run this long after the kill")
    parser.add_argument("--logs", type=Path, help="keep the admin logs in this directory")
    parser.add_argument("--env", action="append", default=[], metavar="NAME=VALUE",
                        help="admin setting, e.g. JOBRING_LOOP__FENCE_AHEAD_MS=300 (repeatable)")
    args = parser.parse_args()
    print(f"jobring from {Path(jobring.__file__).parent}")
    with tempfile.TemporaryDirectory(prefix="jobring-takeover-") as tmp:
        url = await acreate_test_database(args.backend, tmp)
        try:
            logs = args.logs or Path(tmp)
            logs.mkdir(parents=True, exist_ok=True)
            env = dict(item.split("=", 1) for item in args.env)
            result = await run_takeover(url, logs, args.jobs, after_ms=args.after_ms, env=env)
        finally:
            await adrop_test_database(url)
    print(f"{args.backend}: {result.summary()}")


if __name__ == "__main__":
    asyncio.run(main())
