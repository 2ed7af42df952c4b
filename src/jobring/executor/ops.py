"""The executor's operations view: :class:`ExecutorStatus`, Prometheus metrics, and the GET
endpoints that serve them next to the XXL-JOB ones.

- ``GET /health``: the process answers (200, also before the executor started);
- ``GET /ready``: 200 once started, registered with an admin and the admin reachable, else
  503 (JSON ``{"ready": bool, "checks": {...}}``: booleans only, plus the last error with the
  access token);
- ``GET /status``: :class:`ExecutorStatus` as JSON; it names admin addresses and errors, so
  it needs the executor's access token (``XXL-JOB-ACCESS-TOKEN`` header) like ``/run``;
- ``GET /metrics``: Prometheus text; open unless ``metrics_token`` is set (then
  ``Authorization: Bearer <token>``). The access token is not accepted there: it is an
  executor credential, not a monitoring one.
"""

from __future__ import annotations

import hmac
from collections.abc import Callable
from dataclasses import asdict, dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol

import orjson

if TYPE_CHECKING:
    from jobring.executor.callback import CallbackSender
    from jobring.executor.registry import Registrar
    from jobring.executor.worker import JobRunner

__all__ = ["EXECUTOR_METRICS", "ExecutorMetrics", "ExecutorStatus", "OpsAnswer", "ops_answer"]

OPS_PATHS = frozenset({"/health", "/ready", "/status", "/metrics"})
_JSON = b"application/json"
# Prometheus' text exposition format 0.0.4.
METRICS_CONTENT_TYPE = b"text/plain; version=0.0.4; charset=utf-8"

# name -> (type, help): docs/operations.md's table lists exactly these (a test keeps both equal).
EXECUTOR_METRICS: dict[str, tuple[str, str]] = {
    "jobring_executor_runs_total": (
        "counter", "Runs ended on this executor, by outcome (success, failed, killed, timed_out)"),
    "jobring_executor_runs_refused_total": (
        "counter", "Runs refused by this executor, by reason (queue_full: the job's queue was at its cap)"),
    "jobring_executor_handler_duration_ms": (
        "histogram", "Time from a handler's start to its result, ms"),
    "jobring_executor_running_runs": ("gauge", "Runs executing now"),
    "jobring_executor_queue_depth": ("gauge", "Runs waiting in a job's queue, by job_id (jobs with a queue)"),
    "jobring_executor_waiting_for_thread": (
        "gauge", "Sync runs that could start but wait for a free pool thread (above 256, /run waits)"),
    "jobring_executor_callback_backlog": ("gauge", "Results waiting to be sent to the admin"),
    "jobring_executor_callback_spool_size": (
        "gauge", "Results kept in the callback spool file until an admin takes them"),
    "jobring_executor_registered": ("gauge", "1 while the last registry beat was accepted"),
}


@dataclass(frozen=True, slots=True)
class ExecutorStatus:
    """What an executor knows about itself (``Executor.status()``, ``GET /status``)."""

    started: bool
    address: str | None
    registered: bool
    admin_reachable: bool | None  # None: no call to an admin made yet
    last_error: str | None
    last_registered_at: datetime | None
    runs_in_flight: int
    callback_backlog: int
    spool_size: int

    def to_json(self) -> bytes:
        return orjson.dumps(asdict(self))


@dataclass(frozen=True, slots=True)
class ExecutorParts:
    runner: JobRunner | None
    callback: CallbackSender | None
    registrar: Registrar | None


class Observed(Protocol):
    """What the metrics read from an executor (a protocol, so this module stays below
    :mod:`jobring.executor.executor`)."""

    def parts(self) -> ExecutorParts: ...

    def status(self) -> ExecutorStatus: ...


@dataclass(frozen=True, slots=True)
class OpsAnswer:
    status: int
    content_type: bytes
    body: bytes


class ExecutorMetrics:
    """The executor's metrics in Prometheus' text format, read from its parts at each scrape
    (written here: an executor install does not need a Prometheus client library)."""

    def __init__(self, executor: Observed) -> None:
        self._executor = executor

    def text(self) -> bytes:
        parts = self._executor.parts()
        runner, callback = parts.runner, parts.callback
        lines: list[str] = []
        ended = sorted((runner.ended if runner else {}).items())
        _family(lines, "jobring_executor_runs_total",
                [(f'{{outcome="{_label(state)}"}}', count) for state, count in ended])
        refused = sorted((runner.refused if runner else {}).items())
        _family(lines, "jobring_executor_runs_refused_total",
                [(f'{{reason="{_label(why)}"}}', count) for why, count in refused])
        durations: list[tuple[str, float]] = []
        if runner is not None:
            buckets = runner.durations_ms.cumulative()
            durations = [(f'_bucket{{le="{le}"}}', n) for le, n in buckets]
            durations += [("_count", buckets[-1][1]), ("_sum", runner.durations_ms.sum)]
        _family(lines, "jobring_executor_handler_duration_ms", durations)
        _family(lines, "jobring_executor_running_runs", [("", runner.running_count() if runner else 0)])
        depths = sorted((runner.queue_depths() if runner else {}).items())
        _family(lines, "jobring_executor_queue_depth", [(f'{{job_id="{job}"}}', n) for job, n in depths])
        _family(lines, "jobring_executor_waiting_for_thread",
                [("", runner.waiting_for_thread() if runner else 0)])
        _family(lines, "jobring_executor_callback_backlog", [("", callback.pending_count if callback else 0)])
        _family(lines, "jobring_executor_callback_spool_size",
                [("", callback.spooled_count if callback else 0)])
        _family(lines, "jobring_executor_registered", [("", 1 if self._executor.status().registered else 0)])
        return ("\n".join(lines) + "\n").encode()


def _label(value: str) -> str:
    return value.replace("\\", r"\\").replace("\n", r"\n").replace('"', r'\"')


def _family(lines: list[str], name: str, samples: list[tuple[str, float]]) -> None:
    """HELP and TYPE of ``name`` (from EXECUTOR_METRICS) and its samples: (what follows the
    name: a histogram's _bucket/_count/_sum and the labels, value)."""
    kind, text = EXECUTOR_METRICS[name]
    lines += [f"# HELP {name} {text}", f"# TYPE {name} {kind}"]
    lines += [f"{name}{suffix} {float(value)!r}" for suffix, value in samples]


def _json(status: int, body: object) -> OpsAnswer:
    return OpsAnswer(status, _JSON, orjson.dumps(body))


def _bearer_ok(authorization: bytes | None, token: str) -> bool:
    if not authorization:
        return False
    scheme, _, value = authorization.partition(b" ")
    return scheme.lower() == b"bearer" and hmac.compare_digest(value.strip(), token.encode())


def ops_answer(
    path: str,
    *,
    token_ok: bool,
    authorization: bytes | None,
    status: Callable[[], ExecutorStatus] | None,
    metrics: ExecutorMetrics | None,
    metrics_token: str | None,
) -> OpsAnswer:
    """The answer to ``GET <path>`` for one of :data:`OPS_PATHS`."""
    if path == "/health":
        return _json(200, {"status": "ok", "started": status is not None and status().started})
    if status is None or metrics is None:
        return _json(503, {"ready": False, "error": "the executor is not started"})
    now = status()
    if path == "/ready":
        checks: dict[str, dict[str, Any]] = {
            "started": {"ok": now.started},
            "registered": {"ok": now.registered},
            "admin_reachable": {"ok": bool(now.admin_reachable)},
        }
        if token_ok:  # the error names admin addresses: for token holders only, as /status
            checks["admin_reachable"]["error"] = now.last_error
        ready = all(c["ok"] for c in checks.values())
        return _json(200 if ready else 503, {"ready": ready, "checks": checks})
    if path == "/status":
        if not token_ok:
            return _json(401, {"error": "the executor access token is needed (XXL-JOB-ACCESS-TOKEN)"})
        return OpsAnswer(200, _JSON, now.to_json())
    if metrics_token and not _bearer_ok(authorization, metrics_token):
        return _json(401, {"error": "metrics need the metrics token (Authorization: Bearer ...)"})
    return OpsAnswer(200, METRICS_CONTENT_TYPE, metrics.text())
