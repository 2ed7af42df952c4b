"""Map: limits on ``ctx.map(items, "sub_task")``, sub-task identities, and how the reduce
receives the results.

Limits (a call over any of them is refused whole, with :class:`MapLimitError` naming it):

=========================  ============  =================================================
limit                      value         what
=========================  ============  =================================================
``MAX_MAP_ITEMS``          1,000         items in one ``map`` call (the executor library
                                         sends a larger list in calls of this size)
``MAX_ITEM_BYTES``         65,536        one item as compact JSON (UTF-8)
``MAX_MAP_CALL_BYTES``     4 MiB         all items of one call as JSON
``MAX_SUBTASKS``           1,000,000     sub-tasks of one run, every depth together
``MAX_MAP_DEPTH``          5             nesting: the root task maps depth-1 sub-tasks,
                                         those may map depth 2, ... up to 5
=========================  ============  =================================================

A sub-task's key is its parent's key, the parent's ``map`` call number (0, 1, ... per
attempt of the parent) and its index in that call: ``r/0.17`` is item 17 of the root's first
call, ``r/0.17/2.3`` one of that sub-task's own. With ``(run, key)`` a unique key of the
sub-task table, a parent that is dispatched again after its executor died and repeats its
calls creates no sub-task twice (a handler's calls must come in the same order each time).

The reduce handler gets the results inline up to ``REDUCE_INLINE_RESULTS``; above that it
gets an iterator that reads them in pages of ``REDUCE_PAGE_SIZE`` (ordered by key).
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass

from jobring.core.fielderror import FieldError

__all__ = [
    "MAX_ITEM_BYTES",
    "MAX_MAP_CALL_BYTES",
    "MAX_MAP_DEPTH",
    "MAX_MAP_ITEMS",
    "MAX_SUBTASKS",
    "REDUCE_INLINE_RESULTS",
    "REDUCE_PAGE_SIZE",
    "RESERVED_TASK_NAMES",
    "ROOT_KEY",
    "MapLimitError",
    "SubTask",
    "call_batches",
    "depth_of",
    "plan_map",
    "reduce_pages",
    "subtask_key",
]

MAX_MAP_ITEMS = 1_000
MAX_ITEM_BYTES = 64 * 1024
MAX_MAP_CALL_BYTES = 4 * 1024 * 1024
MAX_SUBTASKS = 1_000_000
MAX_MAP_DEPTH = 5
REDUCE_INLINE_RESULTS = 10_000
REDUCE_PAGE_SIZE = 1_000

ROOT_KEY = "r"
RESERVED_TASK_NAMES = frozenset({"root", "reduce"})
_TASK_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_.-]{0,63}")
_KEY = re.compile(r"r(/\d+\.\d+)*")


class MapLimitError(FieldError):
    """A ``map`` call refused: ``limit`` is the constant's name (or what is malformed),
    ``field`` the request field at fault."""

    def __init__(self, limit: str, field: str, message: str) -> None:
        super().__init__(field, message)
        self.limit = limit


@dataclass(frozen=True, slots=True)
class SubTask:
    """A sub-task to store: its key, the handler name it runs, its depth and item as JSON."""

    key: str
    task_name: str
    depth: int
    item_json: str


def depth_of(key: str) -> int:
    """A task key's depth (the root task is 0)."""
    if not _KEY.fullmatch(key):
        raise MapLimitError("key", "parent_key", f"not a task key: {key!r}")
    return key.count("/")


def subtask_key(parent_key: str, call_seq: int, index: int) -> str:
    return f"{parent_key}/{call_seq}.{index}"


def _encode(item: object, index: int) -> str:
    try:
        text = json.dumps(item, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    except (TypeError, ValueError) as exc:
        raise MapLimitError("json", "items", f"item {index} is not JSON: {exc}") from None
    if len(text.encode("utf-8")) > MAX_ITEM_BYTES:
        raise MapLimitError("MAX_ITEM_BYTES", "items",
                            f"item {index} is over MAX_ITEM_BYTES ({MAX_ITEM_BYTES} bytes as JSON)")
    return text


def plan_map(
    parent_key: str, call_seq: int, task_name: str, items: Sequence[object], *, subtasks_so_far: int
) -> tuple[SubTask, ...]:
    """Check one ``map`` call of the task ``parent_key`` against every limit and give the
    sub-tasks it creates. ``subtasks_so_far`` is the run's count before this call."""
    if not _TASK_NAME.fullmatch(task_name) or task_name in RESERVED_TASK_NAMES:
        raise MapLimitError("task_name", "task_name", f"{task_name!r} is not a usable task name "
                            "(a letter, then up to 63 letters, digits, '_', '.', '-'; not root or reduce)")
    if call_seq < 0:
        raise MapLimitError("call_seq", "call_seq", "cannot be negative")
    depth = depth_of(parent_key) + 1
    if depth > MAX_MAP_DEPTH:
        raise MapLimitError("MAX_MAP_DEPTH", "parent_key",
                            f"a depth-{depth - 1} task cannot map: MAX_MAP_DEPTH is {MAX_MAP_DEPTH}")
    if len(items) > MAX_MAP_ITEMS:
        raise MapLimitError("MAX_MAP_ITEMS", "items",
                            f"{len(items)} items in one call: MAX_MAP_ITEMS is {MAX_MAP_ITEMS}")
    if subtasks_so_far + len(items) > MAX_SUBTASKS:
        raise MapLimitError("MAX_SUBTASKS", "items", f"the run would have {subtasks_so_far + len(items)} "
                            f"sub-tasks: MAX_SUBTASKS is {MAX_SUBTASKS}")
    encoded = [_encode(item, i) for i, item in enumerate(items)]
    size = sum(len(text.encode("utf-8")) for text in encoded) + max(len(encoded) - 1, 0) + 2  # [a,b]
    if size > MAX_MAP_CALL_BYTES:
        raise MapLimitError("MAX_MAP_CALL_BYTES", "items",
                            f"the call's items are {size} bytes as JSON: "
                            f"MAX_MAP_CALL_BYTES is {MAX_MAP_CALL_BYTES}")
    return tuple(SubTask(subtask_key(parent_key, call_seq, i), task_name, depth, text)
                 for i, text in enumerate(encoded))


def call_batches(count: int, size: int = MAX_MAP_ITEMS) -> list[range]:
    """How the executor library splits a ``map`` of ``count`` items into calls."""
    if size < 1:
        raise ValueError("a batch holds at least one item")
    return [range(start, min(start + size, count)) for start in range(0, count, size)]


def reduce_pages(count: int) -> list[range] | None:
    """None when the reduce gets its ``count`` results inline, else the pages its iterator reads."""
    if count <= REDUCE_INLINE_RESULTS:
        return None
    return call_batches(count, REDUCE_PAGE_SIZE)
