"""The executor-facing endpoints of distributed runs (``api/jobring/...``, called by jobring
executors with their group's executor token; docs/distributed-jobs.md):

- ``jobring/map``: ``{"runId", "parentKey", "callSeq", "task", "items": [...], "reduce"}`` ->
  ``{"created", "total"}``: one ``ctx.map`` call (at most ``MAX_MAP_ITEMS`` items);
- ``jobring/results``: ``{"results": [{"id", "attempt", "ok", "result", "msg", "log"}]}``: sub-task
  results (at most ``MAX_RESULTS`` per request);
- ``jobring/reduce-input``: ``{"runId", "afterId", "limit"}`` -> ``{"items": [{"id", "key",
  "result"}]}``: the succeeded sub-tasks' results, a page at a time, for the reduce handler.

The token's groups are a condition of every write and read: a run of another group is not
found. Answers are ReturnT; a refusal names the field at fault.
"""

from __future__ import annotations

import json
from typing import Any

from jobring.admin.distributed.service import DistributedService, SubTaskResult
from jobring.admin.services.executor_tokens import TokenScope
from jobring.core.distributed import JoinError, MapLimitError
from jobring.errors import Conflict, JobringError, NotFound
from jobring.protocol.models import ReturnT

__all__ = ["MAX_RESULTS", "DistributedApi"]

MAX_RESULTS = 5_000
MAX_PAGE = 5_000
TASK_LOG_MAX = 4 * 1024  # a sub-task's log lines kept (the executor sends at most this)
_INT_MAX = 1 << 62


class _Bad(JobringError, ValueError):
    pass


def _int(data: dict[str, Any], name: str, *, default: int | None = None) -> int:
    value = data.get(name, default)
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value < _INT_MAX:
        raise _Bad(f"{name}: a non-negative integer is required")
    return value


def _text(data: dict[str, Any], name: str, *, optional: bool = False) -> str | None:
    value = data.get(name)
    if value is None and optional:
        return None
    if not isinstance(value, str) or not value or len(value) > 200:
        raise _Bad(f"{name}: a non-empty string of at most 200 characters is required")
    return value


class DistributedApi:
    """Answers ``api/jobring/<what>`` for the executor API."""

    def __init__(self, service: DistributedService) -> None:
        self._service = service

    async def call(self, uri: str, body: bytes, scope: TokenScope) -> ReturnT:
        try:
            data = json.loads(body or b"{}")
            if not isinstance(data, dict):
                raise _Bad("the body must be a JSON object")
            return await self._answer(uri, data, scope)
        except (_Bad, json.JSONDecodeError, UnicodeDecodeError) as exc:
            return ReturnT.fail(f"request error: {exc}")
        except (MapLimitError, JoinError) as exc:
            return ReturnT.fail(f"{exc.field}: {exc}")
        except (NotFound, Conflict) as exc:
            return ReturnT.fail(str(exc))

    async def _answer(self, uri: str, data: dict[str, Any], scope: TokenScope) -> ReturnT:
        guard = scope.guard()
        if uri == "jobring/map":
            items = data.get("items")
            if not isinstance(items, list):
                raise _Bad("items: a JSON array is required")
            task = _text(data, "task")
            parent_key = _text(data, "parentKey")
            assert task is not None and parent_key is not None
            created, total = await self._service.map_call(
                _int(data, "runId"),
                parent_key,
                _int(data, "callSeq"),
                task,
                items,
                _text(data, "reduce", optional=True),
                guard,
            )
            return ReturnT.success({"created": created, "total": total})
        if uri == "jobring/results":
            results = data.get("results")
            if not isinstance(results, list) or len(results) > MAX_RESULTS:
                raise _Bad(f"results: a JSON array of at most {MAX_RESULTS} results is required")
            parsed: list[SubTaskResult] = []
            for r in results:
                if not isinstance(r, dict) or not isinstance(r.get("ok"), bool):
                    raise _Bad("results: each result is an object with a boolean 'ok'")
                result = r.get("result")
                msg = r.get("msg")
                lines = r.get("log")
                parsed.append(
                    (
                        _int(r, "id"),
                        _int(r, "attempt"),
                        r["ok"],
                        None if result is None else json.dumps(result, separators=(",", ":")),
                        str(msg)[:2_000] if msg is not None else None,
                        str(lines)[-TASK_LOG_MAX:] if lines is not None else None,
                    )
                )
            changed = await self._service.results(parsed, guard)
            return ReturnT.success({"changed": changed})
        if uri == "jobring/reduce-input":
            limit = _int(data, "limit", default=1_000)
            if not 1 <= limit <= MAX_PAGE:
                raise _Bad(f"limit: between 1 and {MAX_PAGE}")
            items = await self._service.reduce_input(
                _int(data, "runId"), _int(data, "afterId", default=0), limit, guard
            )
            return ReturnT.success({"items": items})
        return ReturnT.fail(f"invalid request, uri-mapping({uri[:64]}) not found.")
