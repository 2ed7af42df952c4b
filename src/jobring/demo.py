"""A demo executor with sample handlers (appname ``jobring-demo``).

Run it with ``python -m jobring.demo`` or ``jobring executor jobring.demo:executor``;
configure the admin and token with ``JOBRING_EXECUTOR_ADMIN_ADDRESSES`` and
``JOBRING_EXECUTOR_ACCESS_TOKEN`` (or ``--admin``/``--token``).
"""

from __future__ import annotations

import asyncio
import sys

from jobring.executor.context import JobContext
from jobring.executor.executor import Executor

executor = Executor(app_name="jobring-demo")


@executor.job("hello")
def hello(ctx: JobContext) -> None:
    """Logs its params."""
    ctx.log("hello from jobring, params=%s", ctx.params)


@executor.job("shard")
def shard(ctx: JobContext) -> None:
    """Logs which shard of a broadcast this run is."""
    ctx.log("shard %d of %d", ctx.shard_index, ctx.shard_total)


@executor.job("slow")
async def slow(ctx: JobContext) -> None:
    """Sleeps ``params`` seconds (default 5); a kill or timeout cancels the sleep."""
    try:
        seconds = float(ctx.params) if ctx.params.strip() else 5.0
    except ValueError:
        ctx.fail(f"params must be a number of seconds, got {ctx.params!r}")
        return
    ctx.log("sleeping %.1f s", seconds)
    await asyncio.sleep(seconds)
    ctx.log("awake")


@executor.job("fail")
def fail(ctx: JobContext) -> None:
    """Fails on purpose."""
    ctx.log("about to fail on purpose")
    ctx.fail("failed on purpose")


def main(argv: list[str] | None = None) -> int:
    from jobring.cli import main as cli_main

    return cli_main(["executor", "jobring.demo:executor", *(sys.argv[1:] if argv is None else argv)])


if __name__ == "__main__":
    sys.exit(main())
