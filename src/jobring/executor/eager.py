"""Run a coroutine's first step at once, and make a task only if it has to wait.

Most executor coroutines on the hot path (answering a /run: accepted or refused at once) finish
without ever suspending; creating an asyncio task for them costs a task object, a context
copy and an extra event loop iteration per run. Python 3.12 has eager task factories; this
is the small part of that idea the executor needs on 3.11.

The first step runs outside any task (``asyncio.current_task()`` is the caller's task or
None there), so only coroutines that do not rely on their own task before their first
suspension may be started this way: the executor's own request handling, never job
handlers (``asyncio.timeout`` or a TaskGroup in a handler would bind to the wrong task).
"""

from __future__ import annotations

import types
from collections.abc import Coroutine, Generator
from typing import Any, TypeVar

__all__ = ["first_step", "resume"]

T = TypeVar("T")


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
