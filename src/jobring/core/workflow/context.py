"""The workflow context: the JSON object that nodes add to and later nodes read.

* Values are JSON (objects, arrays, strings, finite numbers, true/false/null), nested at most
  :data:`MAX_JSON_DEPTH` deep; keys are non-empty strings of at most :data:`MAX_KEY_CHARS`.
* The whole context, serialized as compact UTF-8 JSON, is at most :data:`CONTEXT_MAX_BYTES`
  (64 KiB): it is stored in the run's row and copied into every sub-workflow. Larger data
  belongs in a table or a file whose name goes in the context.
* Merging is per top-level key, **last writer wins by finish order**: the order in which the
  nodes' results are applied, i.e. the order their callbacks arrive. Parallel branches that
  must not overwrite each other use different keys (a fan-out item can use ``item_index``).
* A node whose ``result_json`` is set has its handler's result message read as JSON (for
  XXL-JOB executors, which cannot call ``ctx.workflow.set``): an object is merged, anything
  else is ignored with the reason recorded in the node's message.

Templates and decisions see every top-level key by name (``rows``), the whole context as ``ctx``
(``ctx.rows``, ``ctx["odd key"]``), and in a fan-out item ``item`` and ``item_index``; these
reserved names win over context keys of the same name (read those through ``ctx``).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping

from jobring.core.expression import JsonValue, Value
from jobring.core.runtext import CHILD_HEADER
from jobring.errors import JobringError

__all__ = [
    "CONTEXT_MAX_BYTES",
    "MAX_JSON_DEPTH",
    "MAX_KEY_CHARS",
    "RESERVED_NAMES",
    "ContextError",
    "context_changes",
    "json_size",
    "merge_context",
    "namespace",
    "parse_result_message",
]

CONTEXT_MAX_BYTES = 64 * 1024
MAX_JSON_DEPTH = 32
MAX_KEY_CHARS = 256
RESERVED_NAMES = frozenset({"ctx", "item", "item_index"})


class ContextError(JobringError, ValueError):
    """Additions that are not JSON, or that would make the context larger than the cap."""


def _check(value: object, where: str, depth: int) -> None:
    kind = type(value)
    if kind in (dict, list) and depth > MAX_JSON_DEPTH:
        raise ContextError(f"{where}: nested more than {MAX_JSON_DEPTH} deep")
    if kind is float and not math.isfinite(value):  # type: ignore[arg-type]
        raise ContextError(f"{where}: {value} is not a JSON number")
    if kind is dict:
        assert isinstance(value, dict)
        for key, item in value.items():
            if type(key) is not str:
                raise ContextError(f"{where}: object keys must be strings")
            _check(item, f"{where}.{key}", depth + 1)
    elif kind is list:
        assert isinstance(value, list)
        for index, item in enumerate(value):
            _check(item, f"{where}[{index}]", depth + 1)
    elif kind not in (str, int, float, bool, type(None)):
        raise ContextError(f"{where}: a Python {kind.__name__} is not a JSON value")


def json_size(value: JsonValue) -> int:
    """Bytes of ``value`` as compact UTF-8 JSON (the measure of the cap)."""
    return len(json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode())


def merge_context(context: Mapping[str, JsonValue], additions: Mapping[str, object],
                  *, max_bytes: int = CONTEXT_MAX_BYTES) -> dict[str, JsonValue]:
    """A new context: ``context`` with ``additions`` set over it (last writer wins). Raises
    :class:`ContextError` for non-JSON additions or a result over ``max_bytes``."""
    for key, value in additions.items():
        if type(key) is not str or not 0 < len(key) <= MAX_KEY_CHARS:
            raise ContextError(f"context keys are strings of 1-{MAX_KEY_CHARS} characters, got {key!r:.80}")
        _check(value, key, 1)
    merged: dict[str, JsonValue] = {**context, **additions}  # type: ignore[dict-item]
    size = json_size(merged)
    if size > max_bytes:
        raise ContextError(f"the workflow context would be {size} bytes, over the cap of {max_bytes}")
    return merged


def parse_result_message(message: str | None) -> tuple[dict[str, JsonValue] | None, str | None]:
    """For a node with ``result_json``: (the object to merge, None), or (None, why it was ignored).
    The message is the executor's: a child-job section the admin appended after it (a result
    applied from the stored run) is not part of it."""
    message = _executors_part(message) if message else message
    if not message or not message.strip():
        return None, "result message is empty, nothing added to the context"
    try:
        value = json.loads(message, parse_constant=_refuse_constant)
    except (ValueError, RecursionError) as exc:
        return None, f"result message is not JSON ({str(exc)[:80]}), nothing added to the context"
    if type(value) is not dict:
        return None, f"result message is JSON but not an object ({type(value).__name__}), nothing added"
    return value, None


def _executors_part(message: str) -> str:
    """The message without the sections the admin appended after a blank line (the child jobs
    it fired: ``CHILD_HEADER`` and a line each, perhaps cut by the stored message's length).
    A blank line followed by ``>`` never occurs in JSON text (a string holds no raw line
    break), so the executor's JSON ends before the first one."""
    if message.startswith(CHILD_HEADER):
        return ""
    return message.partition("\n\n>")[0]


def _refuse_constant(name: str) -> JsonValue:
    raise ValueError(f"{name} is not JSON")


def context_changes(before: Mapping[str, JsonValue], after: Mapping[str, JsonValue]) -> dict[str, JsonValue]:
    """The keys ``after`` set differently from ``before``: what a sub-workflow run adds to its
    parent (its final context minus the context it started with)."""
    return {key: value for key, value in after.items() if key not in before or _canonical(before[key])
            != _canonical(value)}


def _canonical(value: JsonValue) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def namespace(context: Mapping[str, JsonValue], *, item: JsonValue = None,
              item_index: int | None = None) -> dict[str, Value]:
    """The names templates and decisions read (see the module docstring)."""
    names: dict[str, Value] = dict(context)
    names["ctx"] = dict(context)
    if item_index is not None:
        names["item"] = item
        names["item_index"] = item_index
    else:
        names.pop("item", None)
        names.pop("item_index", None)
    return names
