"""JobHandler validation and call shape; JobContext logging, failure, cancellation; RunLogHandler."""

from __future__ import annotations

import functools
import logging
from datetime import UTC, datetime

import pytest

from jobring.executor.context import JobCancelled, JobContext, JobHandler, RunLogHandler, current_context


class Lines:
    def __init__(self) -> None:
        self.lines: list[str] = []

    def write_line(self, line: str) -> None:
        self.lines.append(line)


def plain_format(source: str, lineno: int, thread: str, message: str) -> str:
    return f"[{source}]-[{lineno}]-[{thread}] {message}"


def make_ctx(sink: Lines, label: str | None = "worker-1") -> JobContext:
    return JobContext(job_id=3, params="a=b", log_id=9, log_date_time=1795350973184, shard_index=1,
                      shard_total=4, sink=sink, line_format=plain_format, thread_label=label)


def with_ctx(ctx: JobContext) -> None:
    del ctx


def without_ctx() -> None:
    return None


def keyword_only(*, verbose: bool = False) -> None:
    del verbose


class Jobs:
    def method(self, ctx: JobContext) -> None:
        del ctx


@pytest.mark.parametrize(
    ("func", "wants"),
    [
        (with_ctx, True),
        (without_ctx, False),
        (keyword_only, False),
        (Jobs().method, True),
        (functools.partial(with_ctx), True),
        (lambda *args: None, True),
    ],
)
def test_handler_asks_for_context_when_it_has_a_parameter(func: object, wants: bool) -> None:
    assert JobHandler("h", func).wants_context is wants  # type: ignore[arg-type]


def test_handler_kind_and_validation() -> None:
    async def coro(ctx: JobContext) -> None:
        del ctx

    assert JobHandler("a", coro).is_async and not JobHandler("s", with_ctx).is_async
    with pytest.raises(ValueError, match="name"):
        JobHandler("", with_ctx)
    with pytest.raises(TypeError, match="not callable"):
        JobHandler("x", "nope")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="isolation"):
        JobHandler("x", with_ctx, isolation="fork")  # type: ignore[arg-type]
    JobHandler("p", with_ctx, isolation="process")  # a top-level function is fine


def test_context_fields_log_fail_and_cancel() -> None:
    sink = Lines()
    ctx = make_ctx(sink)
    assert (ctx.job_id, ctx.params, ctx.log_id, ctx.shard_index, ctx.shard_total) == (3, "a=b", 9, 1, 4)
    assert ctx.trigger_time == datetime.fromtimestamp(1795350973.184, tz=UTC)
    ctx.log("value %s and %d", "x", 2)
    ctx.log("no args: 100%")
    assert sink.lines[0].startswith("[tests.executor.test_context#test_context_fields_log_fail_and_cancel]-[")
    assert sink.lines[0].endswith("]-[worker-1] value x and 2") and sink.lines[1].endswith(" no args: 100%")
    assert ctx.fail_message is None
    ctx.fail("bad input")
    assert ctx.fail_message == "bad input"
    assert not ctx.cancelled
    ctx.mark_cancelled()
    assert ctx.cancelled
    with pytest.raises(JobCancelled):
        ctx.log("after cancel")
    ctx.write("engine#x", 0, "engine lines still go through")
    assert len(sink.lines) == 3


def test_current_context_and_logging_handler() -> None:
    sink = Lines()
    ctx = make_ctx(sink, label=None)
    logger = logging.getLogger("tests.context.user")
    handler = RunLogHandler()
    logger.addHandler(handler)
    logger.propagate = False
    try:
        assert current_context() is None
        logger.warning("before the run")
        token = ctx.activate()
        try:
            assert current_context() is ctx
            logger.warning("inside %s", "the run")
            try:
                raise KeyError("k")
            except KeyError:
                logger.exception("with traceback")
        finally:
            ctx.deactivate(token)
        logger.warning("after the run")
    finally:
        logger.removeHandler(handler)
        logger.propagate = True
    assert current_context() is None
    assert len(sink.lines) == 2
    assert sink.lines[0].startswith("[tests.context.user#test_current_context_and_logging_handler]-[")
    assert sink.lines[0].endswith("-[MainThread] inside the run")
    assert "Traceback (most recent call last)" in sink.lines[1] and "KeyError: 'k'" in sink.lines[1]


def test_logical_time_and_data_interval() -> None:
    ctx = make_ctx(Lines())
    assert ctx.logical_time is None and ctx.data_interval is None  # an admin that sends none
    day = 86_400_000
    ctx = JobContext(job_id=3, params="", log_id=9, log_date_time=1795350973184, shard_index=0, shard_total=1,
                     sink=Lines(), line_format=plain_format, logical_time_ms=1772330400000,
                     data_interval_start_ms=1772330400000 - day)
    assert ctx.logical_time == datetime(2026, 3, 1, 2, tzinfo=UTC)
    assert ctx.data_interval == (datetime(2026, 2, 28, 2, tzinfo=UTC), datetime(2026, 3, 1, 2, tzinfo=UTC))
    ctx.data_interval_start_ms = None
    assert ctx.data_interval == (None, datetime(2026, 3, 1, 2, tzinfo=UTC))
