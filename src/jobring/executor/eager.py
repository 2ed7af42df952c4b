"""Run a coroutine's first step at once, and make a task only if it has to wait.

Most executor coroutines on the hot path (answering /run, a trivial async handler) finish
without ever suspending; creating an asyncio task for them costs a task object, a context
copy and an extra event loop iteration per run. Python 3.12 has eager task factories; this
is the small part of that idea the executor needs on 3.11.

The first step runs outside any task (``asyncio.current_task()`` is the caller's task or
None there), so only coroutines that do not rely on their own task before their first
suspension may be started this way.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import types
from collections.abc import Coroutine, Generator
from typing import Any, TypeVar

__all__ = ["first_step", "resume", "start_eagerly"]

T = TypeVar("T")
log = logging.getLogger(__name__)


def first_step(coro: Coroutine[Any, Any, T]) -> tuple[bool, Any]:
    """Run ``coro`` up to its first suspension: ``(True, result)`` when it finished, else
    ``(False, what it yielded)`` for :func:`resume`. Its exceptions propagate."""
    try:
        yielded = coro.send(None)
    except StopIteration as stop:
        return True, stop.value
    return False, yielded


@types.coroutine
def resume(coro: Coroutine[Any, Any, T], yielded: Any) -> Generator[Any, Any, T]:
    """Continue a coroutine suspended by :func:`first_step` (await it, or make it a task)."""
    while True:
        try:
            value = yield yielded
        except GeneratorExit:
            coro.close()
            raise
        except BaseException as exc:  # cancellation and errors thrown by the task go on inside
            try:
                yielded = coro.throw(exc)
            except StopIteration as stop:
                return stop.value  # type: ignore[no-any-return]
        else:
            try:
                yielded = coro.send(value)
            except StopIteration as stop:
                return stop.value  # type: ignore[no-any-return]


def start_eagerly(
    loop: asyncio.AbstractEventLoop,
    coro: Coroutine[Any, Any, T],
    context: contextvars.Context,
    name: str | None = None,
) -> asyncio.Future[T]:
    """Like ``loop.create_task(coro, context=context)``, with the first step run now.

    Returns a finished future when the coroutine did not suspend, else a task (cancellable
    like any task) running the rest in ``context``.
    """
    try:
        done, value = context.run(first_step, coro)
    except (KeyboardInterrupt, SystemExit):
        raise
    except BaseException as exc:
        future: asyncio.Future[T] = loop.create_future()
        if isinstance(exc, asyncio.CancelledError):
            future.cancel()
        else:
            future.set_exception(exc)
        return future
    if done:
        future = loop.create_future()
        future.set_result(value)
        return future
    task = loop.create_task(resume(coro, value), name=name, context=context)
    task.add_done_callback(lambda t: _cancel_unstarted(t, coro), context=context)
    return task


def _cancel_unstarted(task: asyncio.Future[Any], coro: Coroutine[Any, Any, Any]) -> None:
    # A task cancelled before its first step never runs resume(): the coroutine would stay
    # suspended. Give it the CancelledError it would have got from a normal task.
    if not task.cancelled() or getattr(coro, "cr_frame", None) is None or getattr(coro, "cr_running", True):
        return
    try:
        coro.throw(asyncio.CancelledError())
    except (StopIteration, asyncio.CancelledError):
        return
    except Exception:
        log.warning("a cancelled job coroutine failed while stopping", exc_info=True)
        return
    log.warning("a cancelled job coroutine ignored its cancellation; closing it")
    coro.close()
