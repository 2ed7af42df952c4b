"""``ctx.workflow``: a workflow node's view of its workflow run's context (docs/workflows.md).

The admin sends the run's context as the node starts (the ``workflowContext`` field of /run);
what the handler sets goes back with the run's result (the same field of the callback) and is
merged into the run's context when the attempt succeeds, last writer wins by finish order.
Values are JSON; a value is copied when set (changing the object afterwards changes nothing),
and the additions together are at most :data:`CONTEXT_MAX_BYTES` (64 KiB), checked at ``set``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from typing import Any

from jobring.core.workflow.context import CONTEXT_MAX_BYTES, ContextError, merge_context

__all__ = ["CONTEXT_MAX_BYTES", "ContextError", "WorkflowContext"]

_MISSING = object()


class WorkflowContext:
    """The context a workflow node's run started with, plus what its handler set."""

    __slots__ = ("_added", "_started")

    def __init__(self, started: Mapping[str, Any]) -> None:
        self._started = dict(started)
        self._added: dict[str, Any] = {}

    def get(self, key: str, default: Any = None) -> Any:
        """The value of ``key`` (this run's own ``set`` first), else ``default``."""
        value = self._added.get(key, _MISSING)
        if value is _MISSING:
            value = self._started.get(key, _MISSING)
        return default if value is _MISSING else value

    def __getitem__(self, key: str) -> Any:
        value = self.get(key, _MISSING)
        if value is _MISSING:
            raise KeyError(key)
        return value

    def __contains__(self, key: object) -> bool:
        return key in self._added or key in self._started

    def set(self, key: str, value: Any) -> None:
        """Add ``key`` to the workflow context for the nodes downstream (when this attempt
        succeeds). ``value`` must be JSON (dict, list, str, finite number, bool, None);
        :class:`ContextError` otherwise, or when this run's additions would pass 64 KiB."""
        additions = merge_context(self._added, {key: value}, max_bytes=CONTEXT_MAX_BYTES)
        # A copy: the handler may change its object after set; what was set is what is sent.
        additions[key] = json.loads(json.dumps(value, allow_nan=False))
        self._added = additions

    def items(self) -> Iterator[tuple[str, Any]]:
        """Every key and value this run sees (the start context with its own additions over it)."""
        return iter({**self._started, **self._added}.items())

    def additions(self) -> dict[str, Any]:
        """What this run set (sent back with its result)."""
        return dict(self._added)

    def __repr__(self) -> str:
        return f"WorkflowContext(keys={sorted({*self._started, *self._added})!r})"
