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


@executor.job("report")
def report(ctx: JobContext) -> None:
    ctx.log("exporting orders, params=%s", ctx.params or "(none)")
    for region in ("eu-west", "us-east", "ap-south"):
        ctx.log("region %s: 1,204 rows written", region)
    ctx.log("report uploaded to s3://reports/daily.csv")


@executor.job("fail")
def fail(ctx: JobContext) -> None:
    ctx.log("connecting to the billing database")
    ctx.fail("billing database unreachable: connection timed out after 3 s")
