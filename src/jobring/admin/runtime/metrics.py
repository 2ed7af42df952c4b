"""Prometheus metrics of one admin node (``GET /metrics``), each documented in docs/operations.md.

The fire path only bumps plain integers and bucket counts (see :mod:`jobring.core.buckets`)
that the scheduling components keep anyway; this module turns them into metric families
when Prometheus scrapes (a custom collector), so scraping costs the fire path nothing. Each
app has its own ``CollectorRegistry`` (tests build many apps in one process).
"""

from __future__ import annotations

import logging
import secrets as pysecrets
import time
from collections.abc import Awaitable, Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any, Protocol

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector
from sqlalchemy import event
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from jobring.admin.alarms.base import AlarmChannel, AlarmContext, Alarmer, AlarmOutcome
from jobring.core.buckets import Buckets

if TYPE_CHECKING:
    from jobring.admin.loop.adapters import StoreLeases
    from jobring.admin.loop.loop import ScheduleLoop
    from jobring.admin.monitors.monitors import Monitors
    from jobring.admin.services.callbacks import CallbackService
    from jobring.admin.store import Store
    from jobring.admin.trigger.trigger import TriggerService

log = logging.getLogger(__name__)

__all__ = ["ADMIN_METRICS", "AdminMetrics", "metrics_response"]

# name -> (type, help): docs/operations.md's table lists exactly these (a test keeps both equal).
ADMIN_METRICS: dict[str, tuple[str, str]] = {
    "jobring_admin_fires_total": (
        "counter", "Scheduled fires handled by this node, by outcome: fired (on time), misfire_fired "
        "(late, fired once now), misfire_skipped (late, skipped by DO_NOTHING)"),
    "jobring_admin_fire_batch_failures_total": (
        "counter", "Fire batches that failed before their dispatch (re-planned from the database)"),
    "jobring_admin_fire_lateness_ms": (
        "histogram", "How late a scheduled fire left against its planned instant, ms"),
    "jobring_admin_triggers_requested_total": (
        "counter", "Fires requested outside the timer path (manual, API, retry, parent, unprepared "
        "cron), by trigger type"),
    "jobring_admin_dispatch_latency_ms": (
        "histogram", "Duration of one /run call to an executor (both lanes), ms"),
    "jobring_admin_dispatch_errors_total": (
        "counter", "Dispatches that did not start a run, by reason: no_address, unreachable, timeout, "
        "http_error, bad_answer, refused"),
    "jobring_admin_lane_in_use": ("gauge", "Dispatch lane slots in use, by lane (fast, slow)"),
    "jobring_admin_lane_waiting": ("gauge", "Dispatches waiting for a lane slot, by lane"),
    "jobring_admin_lane_size": ("gauge", "Dispatch lane size, by lane"),
    "jobring_admin_slow_lane_moves_total": (
        "counter", "Times a job was moved to the slow lane (over 10 triggers above 500 ms in a minute)"),
    "jobring_admin_held_jobs": ("gauge", "Jobs whose fires this node holds under a lease, by node"),
    "jobring_admin_schedule_cycles_total": ("counter", "Claim/renew cycles of the scheduling loop"),
    "jobring_admin_lease_takeovers_total": (
        "counter", "Jobs this node took over with fires recorded by another node"),
    "jobring_admin_callbacks_received_total": ("counter", "Run results received on api/callback"),
    "jobring_admin_runs_ended_total": (
        "counter", "Runs whose result was recorded from a callback, by final state (success, failed, "
        "killed, timed_out, lost)"),
    "jobring_admin_retries_total": ("counter", "Retry fires of failed runs"),
    "jobring_admin_alarms_total": (
        "counter", "Alarm deliveries, by channel (email, webhook, ...) and outcome (sent, failed, "
        "not_applicable)"),
    "jobring_admin_monitor_passes_total": (
        "counter", "Monitor rounds, by monitor and outcome (ok, error)"),
    "jobring_admin_db_statement_ms": (
        "histogram", "Duration of one SQL statement, by operation (select, insert, update, delete, "
        "other), ms"),
    "jobring_admin_scheduler_running": ("gauge", "1 while the scheduling loop runs"),
}


def _help(name: str) -> str:
    return ADMIN_METRICS[name][1]


def _histogram(name: str, labels: list[str], series: Iterable[tuple[list[str], Buckets]]) -> Metric:
    family = HistogramMetricFamily(name, _help(name), labels=labels)
    for values, buckets in series:
        family.add_metric(values, buckets.cumulative(), buckets.sum)
    return family


def _counter(name: str, label: str | None, values: dict[str, int] | int) -> Metric:
    # prometheus_client appends "_total" itself; the table names the exposed name.
    family = CounterMetricFamily(name.removesuffix("_total"), _help(name), labels=[label] if label else None)
    if isinstance(values, int):
        family.add_metric([], values)
    else:
        for key, value in sorted(values.items()):
            family.add_metric([str(key).lower()], value)
    return family


def _gauge(name: str, labels: list[str], series: Iterable[tuple[list[str], float]]) -> Metric:
    family = GaugeMetricFamily(name, _help(name), labels=labels)
    for values, value in series:
        family.add_metric(values, value)
    return family


class _CountingChannel:
    """An alarm channel that counts its deliveries by outcome."""

    def __init__(self, channel: AlarmChannel, counts: dict[tuple[str, str], int]) -> None:
        self._channel = channel
        self.name = channel.name
        self._counts = counts

    def _count(self, outcome: str) -> None:
        key = (self.name, outcome)
        self._counts[key] = self._counts.get(key, 0) + 1

    async def send(self, ctx: AlarmContext) -> AlarmOutcome:
        try:
            outcome = await self._channel.send(ctx)
        except Exception:
            self._count(AlarmOutcome.FAILED.value)
            raise
        self._count(outcome.value)
        return outcome


class Measured(Protocol):
    """The parts of a running node the metrics read (the admin's runtime; a protocol, so
    this module stays below the runtime that holds the metrics)."""

    @property
    def node_id(self) -> str: ...
    @property
    def store(self) -> Store: ...
    @property
    def loop(self) -> ScheduleLoop: ...
    @property
    def trigger(self) -> TriggerService: ...
    @property
    def leases(self) -> StoreLeases: ...
    @property
    def callbacks(self) -> CallbackService: ...
    @property
    def monitors(self) -> Monitors: ...


class AdminMetrics(Collector):
    """The node's metrics, read from the runtime's components at scrape time."""

    def __init__(self, runtime: Measured) -> None:
        self._runtime = runtime
        self.alarms: dict[tuple[str, str], int] = {}
        self.monitor_passes: dict[tuple[str, str], int] = {}
        self.db_statements: dict[str, Buckets] = {}
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(self)

    def instrument(self, alarmer: Alarmer) -> None:
        """Count alarms per channel, monitor rounds, and time SQL statements."""
        self.instrument_alarms(alarmer)
        for monitor in self._runtime.monitors.monitors:
            # An instance attribute shadows the class's tick: the monitor code stays as it is.
            setattr(monitor, "tick", self._counting_tick(monitor.name, monitor.tick))  # noqa: B010
        sync_engine = self._runtime.store.engine.sync_engine
        event.listen(sync_engine, "before_cursor_execute", self._before_statement)
        event.listen(sync_engine, "after_cursor_execute", self._after_statement)

    def instrument_alarms(self, alarmer: Alarmer) -> None:
        """Count the deliveries of the alarmer's channels (once per channel)."""
        alarmer.channels = [c if isinstance(c, _CountingChannel) else _CountingChannel(c, self.alarms)
                            for c in alarmer.channels]

    def _counting_tick(self, name: str, tick: Callable[[], Awaitable[None]]) -> Callable[[], Awaitable[None]]:
        async def counted() -> None:
            outcome = "error"
            try:
                await tick()
                outcome = "ok"
            finally:
                key = (name, outcome)
                self.monitor_passes[key] = self.monitor_passes.get(key, 0) + 1

        return counted

    @staticmethod
    def _before_statement(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        conn.info.setdefault("jobring_started", []).append(time.perf_counter())

    def _after_statement(self, conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        stack = conn.info.get("jobring_started")
        if not stack:
            return
        took_ms = (time.perf_counter() - stack.pop()) * 1000
        head = statement.lstrip()[:6].lower()
        op = head if head in ("select", "insert", "update", "delete") else "other"
        buckets = self.db_statements.get(op)
        if buckets is None:
            buckets = self.db_statements[op] = Buckets()
        buckets.observe(took_ms)

    def collect(self) -> Iterator[Metric]:
        rt = self._runtime
        stats = rt.loop.stats
        yield _counter("jobring_admin_fires_total", "outcome", {
            "fired": stats.fired - stats.misfired, "misfire_fired": stats.misfired,
            "misfire_skipped": stats.skipped})
        yield _counter("jobring_admin_fire_batch_failures_total", None, stats.batch_failures)
        yield _histogram("jobring_admin_fire_lateness_ms", [], [([], stats.lateness)])
        yield _counter("jobring_admin_triggers_requested_total", "type", rt.trigger.requested)
        lanes = rt.trigger.lanes
        yield _histogram("jobring_admin_dispatch_latency_ms", [], [([], lanes.latency_ms)])
        yield _counter("jobring_admin_dispatch_errors_total", "reason", rt.trigger.dispatch_errors)
        by_lane = (("fast", lanes.fast), ("slow", lanes.slow))
        yield _gauge("jobring_admin_lane_in_use", ["lane"], [([n], lane.in_use) for n, lane in by_lane])
        yield _gauge("jobring_admin_lane_waiting", ["lane"], [([n], lane.waiting) for n, lane in by_lane])
        yield _gauge("jobring_admin_lane_size", ["lane"], [([n], lane.size) for n, lane in by_lane])
        yield _counter("jobring_admin_slow_lane_moves_total", None, lanes.slow_moves)
        yield _gauge("jobring_admin_held_jobs", ["node"], [([rt.node_id], stats.held)])
        yield _counter("jobring_admin_schedule_cycles_total", None, stats.cycles)
        yield _counter("jobring_admin_lease_takeovers_total", None, rt.leases.takeovers)
        yield _counter("jobring_admin_callbacks_received_total", None, rt.callbacks.received)
        yield _counter("jobring_admin_runs_ended_total", "state", rt.callbacks.ended)
        yield _counter("jobring_admin_retries_total", None, rt.trigger.requested.get("RETRY", 0))
        alarms = CounterMetricFamily("jobring_admin_alarms", _help("jobring_admin_alarms_total"),
                                     labels=["channel", "outcome"])
        for (channel, outcome), value in sorted(self.alarms.items()):
            alarms.add_metric([channel, outcome], value)
        yield alarms
        name = "jobring_admin_monitor_passes"
        passes = CounterMetricFamily(name, _help(name + "_total"), labels=["monitor", "outcome"])
        for (monitor, outcome), value in sorted(self.monitor_passes.items()):
            passes.add_metric([monitor, outcome], value)
        yield passes
        yield _histogram("jobring_admin_db_statement_ms", ["operation"],
                         [([op], b) for op, b in sorted(self.db_statements.items())])
        yield _gauge("jobring_admin_scheduler_running", [], [([], 1.0 if rt.loop.running else 0.0)])


def metrics_response(registry: CollectorRegistry, request: Request, token: str | None) -> Response:
    """The registry in Prometheus' text format; with ``token`` set, only for ``Authorization:
    Bearer <token>`` (401 otherwise)."""
    if token:
        given = request.headers.get("authorization", "")
        scheme, _, value = given.partition(" ")
        if scheme.lower() != "bearer" or not pysecrets.compare_digest(value.strip().encode(), token.encode()):
            return JSONResponse({"error": "metrics need the metrics token", "field": None}, status_code=401,
                                headers={"WWW-Authenticate": "Bearer"})
    return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)
