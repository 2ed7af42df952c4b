"""The chaos scenarios, each a coroutine on one backend returning a :class:`Verdict`.

Durations come from ``Timing``: short ones in tests/chaos (``make test``), the issue's in
bench/chaos.py. The recording executor is the ground truth for fires; the run log (read
directly, not through the proxy) gives each log id's planned instant and, for scenarios
5 and 6, the run results.
"""

from __future__ import annotations

import asyncio
import signal
from collections import Counter as Counter_
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

from sqlalchemy import update

from jobring.admin.store.records import JobGroup, JobInfo
from jobring.admin.store.tables import job_info
from tests.chaos.harness import (
    MISFIRE_THRESHOLD_MS,
    Cluster,
    Gap,
    Verdict,
    check_fires,
    failed_node,
    first_fire_after,
    kill_database_sessions,
    log_rows,
    sleep_until,
)
from tests.e2e.admin_nodes import AdminNode, kill, now_ms, stop


@dataclass(frozen=True)
class Timing:
    jobs: int = 20
    warmup_ms: int = 4_000  # from the first instant to the fault
    after_ms: int = 10_000  # from the fault (or its end) to the end of the run
    pause_ms: int = 8_000  # scenario 2: SIGSTOP length
    refuse_ms: int = 2_000  # scenario 3: connections refused after the sessions are killed
    outage_ms: int = 9_000  # scenario 4: database unreachable (longer than the late bound)
    admin_down_ms: int = 10_000  # scenario 6
    lateness_ms: int = 3_000  # the bound on lateness of a fire (takeover included)


SHORT = Timing()
LONG = Timing(jobs=50, warmup_ms=10_000, after_ms=30_000, pause_ms=15_000, outage_ms=20_000,
              admin_down_ms=120_000)
LEAD_MS = 3_000
SEND_MOMENT_MS = 1_500  # a fire decided -> at its executor, after a database outage
# Lateness bounds of the node faults: a kill is found within ~1 s (the target 2 s,
# plus slack for a loaded box); a paused node's lock session idles out after 3 s, and the
# taker's first fires, late by that, must stay under the 5 s misfire threshold.
KILL_LATE_MS = 2_500
PAUSE_LATE_MS = 5_000


def _spread(t: Timing) -> int:
    return 1_000 // t.jobs


async def _two_nodes(c: Cluster, t: Timing, misfire: list[str] | None = None,
                     env: dict[str, dict[str, str]] | None = None) -> tuple[dict[int, int], int]:
    await c.start_nodes(["node-a", "node-b"], env=env)
    ids, first = await c.fix_rate_jobs(t.jobs, _spread(t), LEAD_MS, misfire)
    return {job_id: first + i * _spread(t) for i, job_id in enumerate(ids)}, first


async def _victim(c: Cluster, jobs: dict[int, int]) -> tuple[int, int, set[int]]:
    """(victim, survivor) indexes in c.nodes and the victim's jobs: it holds most leases."""
    held = await c.db.jobs.get_many(jobs)
    by_owner = {n.node_id: {i for i, j in held.items() if j.lease_owner == n.node_id} for n in c.nodes}
    a, b = (by_owner[n.node_id] for n in c.nodes)
    return (0, 1, a) if len(a) >= len(b) else (1, 0, b)


async def _stop_all(c: Cluster) -> list[str]:
    """SIGTERM every node together (one after the other, the second would claim what the first
    released); returns a note per node that did not stop within 30 s (then killed)."""
    running = [n for n in c.nodes if n.proc.returncode is None]
    codes = await asyncio.gather(*(stop(n) for n in running), return_exceptions=True)
    return [f"{n.node_id} did not stop on SIGTERM within 30 s: {n.log_text()[-300:]!r}"
            for n, code in zip(running, codes, strict=True) if isinstance(code, AssertionError)]


async def node_sigkill(c: Cluster, t: Timing, dialect: str = "jobring") -> Verdict:
    """1. SIGKILL of the node holding the jobs, under load: every instant fires exactly once.
    The fires the killed node recorded under its send fence may or may not have reached the
    executor before it died: the survivor asks the executor (``dialect`` "jobring":
    ``/received``; "xxl": ``/log``, as xxl-job-core answers it) and sends again, with the
    same run id, the ones it never received (trigger/unsure.py)."""
    c.executor.dialect = dialect
    # Answers held 300 ms: at the kill the victim has fires out that it never saw confirmed
    # (about 3 of its ~10 jobs a second), so the survivor must resolve some, every run.
    c.executor.answer_delay_ms = 300
    jobs, first = await _two_nodes(c, t)
    await sleep_until(first + t.warmup_ms)
    v_i, s_i, victim_jobs = await _victim(c, jobs)
    victim, survivor = c.nodes[v_i], c.nodes[s_i]
    await kill(victim)
    killed_at = now_ms()
    until = killed_at + t.after_ms
    await sleep_until(until + 1_500)
    # Its session died with it: the fence is final (before the survivor's clean stop).
    failed, about = await failed_node(c.db, victim.node_id, killed_at)
    stuck = await _stop_all(c)
    rows = await log_rows(c.db)
    # No excuse for the fires it may have sent: each is resolved with the executor.
    verdict = check_fires(c.executor, rows, jobs, until, KILL_LATE_MS)
    verdict.notes += stuck
    resent = [r for r in rows if r.admin_node == failed.node_id and r.trigger_code == 200
              and r.dispatch_time is not None and r.dispatch_time >= killed_at]
    verdict.info.append(f"{about}; it held {len(victim_jobs)} of {len(jobs)} jobs; {dialect} executor asked "
                        f"{c.executor.asked} times, {len(resent)} of its fires sent again by the survivor")
    if c.executor.asked == 0:
        verdict.notes.append("the executor was never asked, though fires were out when the node died")
    took = first_fire_after(c.executor, rows, survivor.node_id, victim_jobs, killed_at)
    verdict.takeover_ms = None if took is None else took - killed_at
    verdict.fault_at_ms = killed_at
    return verdict


async def node_sigkill_xxl(c: Cluster, t: Timing) -> Verdict:
    """1b. As 1, the executor an XXL-JOB (Java protocol) double: asked by ``/log``. Shorter
    in tests/chaos (a few seconds of load around the kill)."""
    if t == SHORT:
        t = replace(t, warmup_ms=3_000, after_ms=5_000)
    return await node_sigkill(c, t, "xxl")


async def node_sigstop(c: Cluster, t: Timing) -> Verdict:
    """2. SIGSTOP then SIGCONT of the node holding the jobs: no stale fires on waking. Every
    instant fires once, except those the paused node recorded under its fence (settled as
    sent, as for a kill) and those coalesced into the survivor's first, late fire of a job
    (late by less than the misfire threshold: core/planning.py)."""
    jobs, first = await _two_nodes(c, t)
    await sleep_until(first + t.warmup_ms)
    v_i, s_i, paused_jobs = await _victim(c, jobs)
    paused, survivor = c.nodes[v_i], c.nodes[s_i]
    paused.proc.send_signal(signal.SIGSTOP)
    stopped_at = now_ms()
    try:
        await asyncio.sleep(t.pause_ms / 1000)
        # Before it wakes: then it takes a new session and raises its fence again.
        failed, about = await failed_node(c.db, paused.node_id, stopped_at)
    finally:
        paused.proc.send_signal(signal.SIGCONT)
    woke_at = now_ms()
    until = woke_at + t.after_ms
    await sleep_until(until + 1_500)
    stuck = await _stop_all(c)
    rows = await log_rows(c.db)
    gap = Gap(stopped_at, woke_at, dict.fromkeys(jobs, "DO_NOTHING"), coalesced_only=True)
    verdict = check_fires(c.executor, rows, jobs, until, PAUSE_LATE_MS, gap, failed=failed)
    verdict.notes += stuck
    verdict.info.append(f"{about}; it held {len(paused_jobs)} of {len(jobs)} jobs")
    took = first_fire_after(c.executor, rows, survivor.node_id, paused_jobs, stopped_at)
    verdict.takeover_ms = None if took is None else took - stopped_at
    verdict.fault_at_ms = stopped_at
    return verdict


async def database_restart(c: Cluster, t: Timing) -> Verdict:
    """3. A database restart under load, shorter than the misfire threshold: every session of
    the database killed (as a restart ends them), then connections refused ``refuse_ms``.
    Nothing is lost, even under DO_NOTHING: each node keeps its jobs through the blip of its
    lock session and sends the instants due meanwhile late, once each (core/planning.py)."""
    jobs, first = await _two_nodes(c, t, misfire=["DO_NOTHING"] * t.jobs)
    await sleep_until(first + t.warmup_ms)
    assert c.proxy is not None
    down_at = now_ms()
    killed = await kill_database_sessions(c.url)
    await c.proxy.close()
    await c.db.engine.dispose()  # the test's own sessions were killed too
    await asyncio.sleep(t.refuse_ms / 1000)
    await c.proxy.open()
    up_at = now_ms()
    until = up_at + t.after_ms
    await sleep_until(until + 1_500)
    stuck = await _stop_all(c)
    rows = await log_rows(c.db)
    # No gap: every instant must arrive exactly once, late by at most the outage plus the
    # time to reconnect (well under the 5 s threshold).
    verdict = check_fires(c.executor, rows, jobs, until, t.lateness_ms + t.refuse_ms)
    verdict.notes += stuck
    verdict.info.append(f"{killed} session(s) killed, connections refused {up_at - down_at} ms")
    verdict.takeover_ms = up_at - down_at
    verdict.fault_at_ms = down_at
    return verdict


async def database_outage(c: Cluster, t: Timing) -> Verdict:
    """4. The database unreachable for a while (half the jobs FIRE_ONCE_NOW, half DO_NOTHING).

    No fire can be recorded during the outage, so none goes out (except those recorded ahead
    before it). "Lost" here: an instant not received whose miss no rule of core/planning.py
    explains. Explained: (a) the job's previous fire went out late, after the instant came
    due (a late fire stands for the instants due meanwhile; FIRE_ONCE_NOW's misfire fire is
    such a fire, keeping the first missed instant); (b) DO_NOTHING, the run of misses began
    more than the 5 s threshold before the job was next decided. Only instants from 2 s
    before the outage to 3 s after it may be explained so; every other instant must fire
    once. None may fire twice, and no DO_NOTHING job may have a MISFIRE fire."""
    rules = ["FIRE_ONCE_NOW" if i % 2 else "DO_NOTHING" for i in range(t.jobs)]
    jobs, first = await _two_nodes(c, t, misfire=rules)
    await sleep_until(first + t.warmup_ms)
    assert c.proxy is not None
    await c.proxy.close()
    down_at = now_ms()
    await asyncio.sleep(t.outage_ms / 1000)
    await c.proxy.open()
    up_at = now_ms()
    until = up_at + t.after_ms
    await sleep_until(until + 1_500)
    stuck = await _stop_all(c)
    rows = await log_rows(c.db)
    # Fires recorded before the outage may still go out during it (recorded ahead, sent from
    # memory); an instant may be missed from shortly before the outage (recorded, never
    # confirmed) to a few seconds after it (reconnecting, reclaiming).
    gap = Gap(down_at - 2_000, up_at + t.lateness_ms, dict(zip(jobs, rules, strict=True)))
    # The instants of the outage's last seconds are sent late once the database is back, each
    # late by at most the misfire threshold (core/planning.py) when decided, plus the moment to
    # record and send it: up to ~1.3 s on a slow machine, the two nodes' reconnects and
    # adoptions running (an instant fired wrongly from the outage's first 2.5 s is late by
    # more than that, the outage lasting 9 s).
    verdict = check_fires(c.executor, rows, jobs, until, MISFIRE_THRESHOLD_MS + SEND_MOMENT_MS, gap)
    verdict.notes += stuck
    misfires = [r for r in rows if r.trigger_type == "MISFIRE"]
    wrong = [r.job_id for r in misfires if gap.misfire.get(r.job_id) != "FIRE_ONCE_NOW"]
    if wrong:
        verdict.notes.append(f"MISFIRE fires of DO_NOTHING jobs: {wrong}")
    verdict.takeover_ms = up_at - down_at
    verdict.fault_at_ms = down_at
    return verdict


async def executor_sigkill(c: Cluster, t: Timing) -> Verdict:
    """5. An executor SIGKILLed with running runs: they are marked lost and retried on the
    other executor, where they succeed."""
    fast = {"JOBRING_EXECUTOR_DEAD_AFTER_S": "3", "JOBRING_LOST_RUN_CHECK_S": "1"}
    (admin,) = await c.start_nodes(["node-a"], env={"node-a": fast})
    group_id = await c.db.groups.create(_auto_group(), _when())
    procs = [await c.start_demo_executor(admin, name) for name in ("x", "y")]
    await _wait(lambda: _addresses(c, group_id), lambda got: len(got) == 2, 30, "executors never registered")
    ids = await _slow_jobs(c, group_id, count=min(t.jobs, 5), seconds=4, retries=1)
    running = await _wait(lambda: log_rows(c.db), lambda rows: _dispatched(rows) == len(ids),
                          20, "the runs were not dispatched")
    victim_address = running[0].executor_address
    victim = next(p for p, a in procs if a == victim_address)
    await kill_proc(victim)
    killed_at = now_ms()

    def settled(rows: list[object]) -> bool:
        return sum(getattr(r, "handle_code", 0) == 200 for r in rows) >= len(ids)

    rows = await _wait(lambda: log_rows(c.db), settled, 60, "the lost runs were not retried")
    stuck = await _stop_all(c)
    verdict = Verdict(planned=len(ids), notes=stuck)
    firsts = [r for r in rows if r.trigger_type != "RETRY"]
    retries = [r for r in rows if r.trigger_type == "RETRY"]
    verdict.fired = sum(r.handle_code == 200 for r in rows)
    on_victim = [r for r in firsts if r.executor_address == victim_address]
    verdict.notes += [f"run {r.id} on the killed executor not marked lost: {r.handle_code} {r.handle_msg}"
                      for r in on_victim if r.handle_code != 500 or not str(r.handle_msg).startswith("lost:")]
    done = Counter_(r.job_id for r in rows if r.handle_code == 200)
    verdict.lost = [(j, 0) for j in ids if done[j] == 0]
    verdict.doubled = [(j, 0) for j in ids if done[j] > 1]
    verdict.notes += [f"retry {r.id} went to the killed executor" for r in retries
                      if r.executor_address == victim_address]
    verdict.max_late_ms = max((_ms(r.dispatch_time) - killed_at for r in retries), default=0)
    return verdict


async def admin_down(c: Cluster, t: Timing) -> Verdict:
    """6. The only admin down while the executor finishes runs: the results come from the
    executor's callback spool once the admin is back; none is lost or marked lost."""
    (admin,) = await c.start_nodes(["node-a"])
    group_id = await c.db.groups.create(_auto_group(), _when())
    await c.start_demo_executor(admin, "x", env={"JOBRING_EXECUTOR_CALLBACK_MAX_BACKOFF_S": "1"})
    await _wait(lambda: _addresses(c, group_id), lambda got: len(got) == 1, 30, "executor never registered")
    ids = await _slow_jobs(c, group_id, count=min(t.jobs, 10), seconds=2, retries=0)
    await _wait(lambda: log_rows(c.db), lambda rows: _dispatched(rows) == len(ids),
                20, "the runs were not dispatched")
    await kill(admin)
    await asyncio.sleep(t.admin_down_ms / 1000)
    again = await c.restart_node(admin)
    back_at = now_ms()

    def all_done(rows: list[object]) -> bool:
        return all(getattr(r, "handle_code", 0) != 0 for r in rows)

    rows = await _wait(lambda: log_rows(c.db), all_done, 30, "results never arrived")
    delivered_at = now_ms()
    await kill(again)  # its graceful stop is not what this scenario is about
    verdict = Verdict(planned=len(ids), fired=sum(r.handle_code == 200 for r in rows))
    verdict.lost = [(r.job_id, r.id) for r in rows if r.handle_code != 200]
    verdict.notes += [f"run {r.id}: {r.handle_code} {r.handle_msg}" for r in rows if r.handle_code != 200]
    verdict.doubled = [(j, n) for j, n in Counter_(r.job_id for r in rows).items() if n > 1]
    verdict.max_late_ms = delivered_at - back_at  # results delivered this long after the admin's return
    return verdict


async def clock_skew(c: Cluster, t: Timing) -> Verdict:
    """7. Two nodes whose clocks differ by 500 ms: every instant fires exactly once. When one
    node took every lease (on a loaded machine the first to poll often does, and keeps them),
    it stops gracefully after the warm-up and the other takes its jobs over with its own
    clock: both nodes fire, and the handover is where a skew would double or lose one."""
    jobs, first = await _two_nodes(c, t, env={"node-b": {"JOBRING_CLOCK_OFFSET_MS": "500"}})
    await sleep_until(first + t.warmup_ms)
    holder, _, held = await _victim(c, jobs)
    if len(held) == len(jobs):
        await stop(c.nodes[holder])
    until = first + t.warmup_ms + t.after_ms
    await sleep_until(until + 1_500)
    stuck = await _stop_all(c)
    rows = await log_rows(c.db)
    verdict = check_fires(c.executor, rows, jobs, until, t.lateness_ms)
    verdict.notes += stuck
    nodes = {r.admin_node for r in rows if r.trigger_code == 200}
    if nodes != {"node-a", "node-b"}:
        verdict.notes.append(f"only {nodes} fired: the skew was not exercised across nodes")
    # node-b stamps its dispatches with its own clock, 500 ms ahead of the executor's.
    by_log = {r.id: r for r in rows}
    ahead = sorted(r.dispatch_time - call.at_ms for call in c.executor.calls
                   if (r := by_log.get(call.log_id)) is not None and r.admin_node == "node-b")
    if ahead and not 300 <= ahead[len(ahead) // 2] <= 700:
        verdict.notes.append(f"node-b's clock is not 500 ms ahead: median {ahead[len(ahead) // 2]} ms")
    return verdict


SCENARIOS = {
    "node_sigkill": node_sigkill,
    "node_sigkill_xxl": node_sigkill_xxl,
    "node_sigstop": node_sigstop,
    "database_restart": database_restart,
    "database_outage": database_outage,
    "executor_sigkill": executor_sigkill,
    "admin_down": admin_down,
    "clock_skew": clock_skew,
}


async def run_scenario(name: str, backend: str, workdir: Path, t: Timing) -> Verdict:
    async with Cluster(backend, workdir / f"{name}-{backend}") as cluster:
        try:
            verdict = await SCENARIOS[name](cluster, t)
            if not verdict.passed:
                verdict.node_logs = [_warnings_of(node) for node in cluster.nodes]
            return verdict
        except BaseException:
            for node in cluster.nodes:
                print(f"--- {node.node_id} ({backend}) log tail:\n{node.log_text()[-3000:]}")
            raise


def _warnings_of(node: AdminNode) -> str:
    lines = [line for line in node.log_text().splitlines() if " WARNING " in line or " ERROR " in line
             or "liveness" in line or line.startswith(("Traceback", "  "))]
    head = f"--- {node.node_id}: {len(lines)} warning, error and liveness lines, the last:"
    return "\n".join([head, *lines[-40:]])


# Helpers of scenarios 5 and 6.

T = TypeVar("T")


def _dispatched(rows: list[Any]) -> int:
    return sum(r.trigger_code == 200 for r in rows)


def _auto_group() -> JobGroup:
    return JobGroup(app_name="jobring-demo", title="demo", address_type=0)


def _when() -> datetime:
    return datetime(2024, 1, 1)


def _ms(value: Any) -> int:
    if isinstance(value, datetime):
        return int(value.replace(tzinfo=value.tzinfo or UTC).timestamp() * 1000)
    return int(value or 0)


async def _addresses(c: Cluster, group_id: int) -> list[str]:
    group = await c.db.groups.get(group_id)
    return list(group.addresses) if group else []


async def _wait(read: Callable[[], Awaitable[T]], ok: Callable[[T], bool], limit_s: float, what: str) -> T:
    deadline = now_ms() + int(limit_s * 1000)
    while True:
        value = await read()
        if ok(value):
            return value
        if now_ms() > deadline:
            raise AssertionError(f"{what}: {value}")
        await asyncio.sleep(0.2)


async def _slow_jobs(c: Cluster, group_id: int, *, count: int, seconds: int, retries: int) -> list[int]:
    """``count`` jobs on the demo ``slow`` handler, each due once now (then in an hour), FIRST route."""
    ids = []
    for _ in range(count):
        job = JobInfo(job_group=group_id, job_desc="chaos", schedule_type="FIX_RATE", schedule_conf="3600",
                      misfire_strategy="DO_NOTHING", executor_route_strategy="FIRST",
                      executor_handler="slow", executor_param=str(seconds),
                      executor_block_strategy="SERIAL_EXECUTION", glue_type="BEAN", trigger_status=0,
                      executor_fail_retry_count=retries, executor_timeout=0)
        ids.append(await c.db.jobs.create(job))
    async with c.db.engine.begin() as conn:
        await conn.execute(update(job_info).where(job_info.c.id.in_(ids))
                           .values(trigger_status=1, trigger_next_time=now_ms() + 1_000))
    return ids


async def kill_proc(proc: asyncio.subprocess.Process) -> None:
    proc.kill()
    await proc.wait()
