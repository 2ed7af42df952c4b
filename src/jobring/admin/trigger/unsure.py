"""Fires perhaps sent: ask the executors, send again only what none of them received.

When a node takes over the jobs of a node that died (or re-adopts its own after a restart
or a lapse), the fires that node recorded under its send fence and never confirmed may or
may not have reached an executor: the node may have died just before or just after the
``/run`` call (docs/design/takeover.md). Settling treats them as sent, so the job's
schedule carries on after them at once; this resolver then finds out, in the background:

* It asks every routable address of the job's group. A jobring executor answers
  ``/received`` (which of these runs it accepted; its window of recent runs survives its
  restarts). An XXL-JOB executor (Java 2.x/3.x, or any that answers the jobring extension
  with "uri-mapping not found") is asked ``/log`` for the run: it keeps a log file per run
  from the moment the run starts, and answers ``readLog fail, logFile not exists`` for a
  run it never saw (a run still queued behind a running one has no file yet; sent again,
  it is refused as a repeated trigger while it waits).
* Received by any address: nothing to do (its callback brings the result).
* Not received by any, every address answering: sent now, late, with the same run id (the
  row the failed node recorded), so an executor that did get the first call after all
  (a jobring executor) answers "already received" instead of running it twice.
* An address unreachable, an answer not understood, a broadcast: left as it is, to the
  lost-run rules (the run stays "dispatching" until the lost-run monitor fails it).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from enum import Enum
from typing import TYPE_CHECKING

from jobring.admin.store.records import JobInfo, LogEntry
from jobring.admin.trigger.fires import (
    FirePlan,
    FireRequest,
    NodeFire,
    PreparedBatch,
    run_candidates,
    sent_time_ms,
)
from jobring.core.enums import RouteStrategy, TriggerType
from jobring.core.routing import parse_strategy
from jobring.core.text import one_line
from jobring.protocol.models import SUCCESS_CODE, LogParam, msg_uri_not_found

if TYPE_CHECKING:
    from jobring.admin.dispatch.client import ExecutorClient
    from jobring.admin.store import Store
    from jobring.admin.trigger.trigger import TriggerService

log = logging.getLogger(__name__)

MSG_NOT_EXISTS = "logFile not exists"  # in XXL-JOB's "readLog fail, logFile not exists"
_NOT_FOUND = msg_uri_not_found("/received")


class Verdict(Enum):
    RECEIVED = "received"
    NOT_RECEIVED = "not_received"
    UNKNOWN = "unknown"


@dataclass
class Resolution:
    """What became of one round: log ids by verdict."""

    received: list[int] = field(default_factory=list)
    resent: list[int] = field(default_factory=list)
    unknown: list[int] = field(default_factory=list)


class UnsureFires:
    """Resolves fires perhaps sent (see the module docstring); one background task per round."""

    def __init__(self, store: Store, trigger: TriggerService, executors: ExecutorClient) -> None:
        self._store = store
        self._trigger = trigger
        self._executors = executors
        self._tasks: set[asyncio.Task[None]] = set()
        # For metrics and tests: how many fires ended each way.
        self.counts: dict[str, int] = {}

    def submit(self, log_ids: Sequence[int], nodes: Mapping[int, NodeFire] | None = None) -> None:
        """Resolve these fires in the background; ``nodes``: what a workflow node's run is sent
        with again, by log id (its context and timeout)."""
        if not log_ids:
            return
        task = asyncio.get_running_loop().create_task(self._run(list(log_ids), nodes or {}),
                                                      name="jobring-unsure-fires")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _run(self, log_ids: list[int], nodes: Mapping[int, NodeFire]) -> None:
        try:
            await self.resolve(log_ids, nodes)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("resolving %d fires perhaps sent failed; they are left to the lost-run rules",
                          len(log_ids))

    async def wait_idle(self) -> None:
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    async def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*list(self._tasks), return_exceptions=True)

    async def resolve(self, log_ids: Sequence[int],
                      nodes: Mapping[int, NodeFire] | None = None) -> Resolution:
        """One round: ask, then send again what nobody received (see :meth:`submit`)."""
        done = Resolution()
        # This node's own fires among them may be in flight right now (their answers are
        # written in batches): let them land first, so only fires nobody confirms are asked.
        await self._trigger.settled()
        rows = await self._store.fires.still_unconfirmed(log_ids)
        if not rows:
            return done
        jobs = await self._store.jobs.get_many({r.job_id for r in rows})
        plans: list[tuple[LogEntry, FirePlan]] = []
        for row in rows:
            plan = _plan(row, jobs.get(row.job_id), (nodes or {}).get(row.id))
            if plan is None:
                done.unknown.append(row.id)
            else:
                plans.append((row, plan))
        await self._trigger.dispatcher.resolve([p for _, p in plans])
        verdicts = await self._ask(plans)
        resend: list[FirePlan] = []
        for row, plan in plans:
            verdict = verdicts.get(row.id, Verdict.UNKNOWN)
            if verdict is Verdict.RECEIVED:
                done.received.append(row.id)
            elif verdict is Verdict.NOT_RECEIVED:
                plan.log_ids = [row.id]
                resend.append(plan)
                done.resent.append(row.id)
            else:
                done.unknown.append(row.id)
        if resend:
            for result in await self._trigger.dispatch_prepared(PreparedBatch(resend)):
                # Rare and decisive for the run: each resend's answer, by run id (the end of the
                # trigger message is the executor's answer; its start, the route).
                log.warning("run %s sent again: %s", ",".join(map(str, result.log_ids)) or "?",
                            f"code {result.trigger_code}, ...{one_line(result.trigger_msg)[-300:]}",
                            extra={"run_id": result.log_ids[0] if result.log_ids else None})
        for name, ids in (("received", done.received), ("resent", done.resent), ("unknown", done.unknown)):
            self.counts[name] = self.counts.get(name, 0) + len(ids)
        log.warning("fires perhaps sent by a failed node: %d received by their executors, %d sent again "
                    "now (no executor had them), %d unknown (left to the lost-run rules)",
                    len(done.received), len(done.resent), len(done.unknown))
        return done

    async def _ask(self, plans: Sequence[tuple[LogEntry, FirePlan]]) -> dict[int, Verdict]:
        """Per log id: received by an address, received by none (every address answered),
        or unknown."""
        # Asked per (address, group credentials): the same address in two groups (a pull://
        # name polled under two appnames is two executors) is asked once for each.
        by_address: dict[tuple[str, str | None, str | None], list[LogEntry]] = {}
        for row, plan in plans:
            for address in plan.addresses:
                by_address.setdefault((address, plan.token, plan.app_name), []).append(row)
        answers = await asyncio.gather(*(self._ask_one(a, token, app, rows)
                                         for (a, token, app), rows in by_address.items()))
        seen: dict[int, list[bool | None]] = {}
        for answer in answers:
            for log_id, got in answer.items():
                seen.setdefault(log_id, []).append(got)
        verdicts: dict[int, Verdict] = {}
        for row, plan in plans:
            said = seen.get(row.id, [])
            if any(g is True for g in said):
                verdicts[row.id] = Verdict.RECEIVED
            elif said and len(said) == len(plan.addresses) and all(g is False for g in said):
                verdicts[row.id] = Verdict.NOT_RECEIVED
            else:
                verdicts[row.id] = Verdict.UNKNOWN
        return verdicts

    async def _ask_one(self, address: str, token: str | None, app_name: str | None, rows: list[LogEntry]
                       ) -> dict[int, bool | None]:
        """log id -> True (received), False (not), None (no answer) from one executor, asked
        with the group's token and appname (a pull executor is reached only through them)."""
        runs = [list(run) for row in rows for run in run_candidates(row)]
        answer = await self._executors.call(address, "received", {"runs": runs}, token, app_name)
        content = answer.content
        listed = content.get("received") if isinstance(content, dict) else None
        if answer.code == SUCCESS_CODE and isinstance(listed, list):
            known = {i for i in listed if isinstance(i, int)}
            return {row.id: row.id in known for row in rows}
        if answer.msg != _NOT_FOUND:
            log.warning("executor %s cannot say which runs it received: %s", address, answer.msg)
            return dict.fromkeys((row.id for row in rows), None)
        # An XXL-JOB executor: is there a log file for the run?
        probes = await asyncio.gather(*(
            self._executors.log(address, LogParam(sent_time_ms(row), row.id, 1), token, app_name)
            for row in rows))
        found: dict[int, bool | None] = {}
        for row, probe in zip(rows, probes, strict=True):
            text = probe.content.get("logContent") if isinstance(probe.content, dict) else None
            found[row.id] = None if probe.code != SUCCESS_CODE or not isinstance(text, str) else (
                MSG_NOT_EXISTS not in text)
        return found


def _plan(row: LogEntry, job: JobInfo | None, node: NodeFire | None) -> FirePlan | None:
    """The fire to send again for ``row`` (None: not resolvable, left to the lost-run rules):
    a scheduled fire, or a workflow node's run (the workflow driver asks about the runs of
    attempts it takes over from a dead admin, giving ``node``)."""
    if job is None or (row.planned_time is None and row.trigger_type != TriggerType.WORKFLOW.value):
        return None
    strategy = parse_strategy(job.executor_route_strategy)
    if strategy is RouteStrategy.SHARDING_BROADCAST or row.executor_sharding_param:
        return None  # a broadcast's shards went to several executors: not resolved here
    try:
        kind = TriggerType(row.trigger_type or TriggerType.CRON.value)
    except ValueError:
        kind = TriggerType.CRON
    if node is not None and node.timeout_s is not None:
        job = replace(job, executor_timeout=node.timeout_s)
    req = FireRequest(job, kind, planned_time=row.planned_time, attempt=row.attempt,
                      workflow_node_run_id=row.workflow_node_run_id,
                      workflow_context=None if node is None else node.context)
    return FirePlan(req, strategy, row.executor_param or "", row.executor_fail_retry_count, sent_time_ms(row))
