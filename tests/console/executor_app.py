"""The executor the console's browser tests run as a real process (`jobring executor`)."""

from __future__ import annotations

import asyncio

from jobring import Executor, JobContext

# The admin address, port and token come from the command line.
executor = Executor(app_name="console-e2e", admin_addresses=["http://127.0.0.1:1/"], access_token="-")

XSS = '<img src=x onerror="alert(1)"><script>alert(2)</script>'


@executor.job("hello")
def hello(ctx: JobContext) -> None:
    ctx.log("hello from the console test, params=%s", ctx.params)
    ctx.log("second line")


@executor.job("long")
async def long(ctx: JobContext) -> None:
    """Logs a line every 0.2 s for up to a minute (killed by the test)."""
    for i in range(300):
        ctx.log("tick %d", i)
        await asyncio.sleep(0.2)


@executor.job("xss")
def xss(ctx: JobContext) -> None:
    ctx.log("log line %s", XSS)
    ctx.fail(f"handle message {XSS}")
