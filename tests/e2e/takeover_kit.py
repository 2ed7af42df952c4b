"""A SIGKILLed admin node under load, measured: two admin processes on one database, a
recording executor, ``jobs`` FIX_RATE 1 s jobs spread over the second; the node holding
more jobs is killed and the fires of its jobs after the kill are counted from what the
executor received. Used by ``tests/e2e/test_takeover.py`` and ``bench/takeover.py``."""

from __future__ import annotations

import asyncio
import signal
import statistics
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from jobring.admin.store import Store
from tests.e2e.admin_nodes import (
    RecordingExecutor,
    add_manual_group,
    fired,
    kill,
    now_ms,
    start_admin,
    start_jobs_together,
    stop,
)


@dataclass
class TakeoverResult:
    jobs: int
    victim_jobs: int
    killed_at: int
    victim_fence: int
    expected: int  # instants of the victim's jobs planned after the kill (to the end margin)
    lost: int  # of those, never received by the executor
    lost_in_fence: int  # of the lost, planned up to the victim's fence (left as maybe sent)
    doubled: int  # instants (any job) received more than once
    first_takeover_ms: int  # kill -> the survivor's first dispatch of a victim job
    takeover_ms: list[int] = field(default_factory=list)  # per victim job: kill -> first survivor dispatch
    # With a pause: fires the victim sent after it was resumed, as (planned, sent) ms.
    sent_after_resume: list[tuple[int, int]] = field(default_factory=list)
    victim_log: str = ""

    def summary(self) -> str:
        per_job = sorted(self.takeover_ms)
        median = statistics.median(per_job) if per_job else -1
        worst = per_job[-1] if per_job else -1
        return (f"{self.jobs} jobs, {self.victim_jobs} on the killed node: {self.expected} instants after "
                f"the kill, lost {self.lost} ({self.lost_in_fence} of them up to the victim's send fence, "
                f"{self.victim_fence - self.killed_at} ms after the kill), doubled {self.doubled}; takeover "
                f"(kill -> survivor's first dispatch of a victim job) first {self.first_takeover_ms} ms, "
                f"median {median} ms, worst {worst} ms")


async def run_takeover(url: str, workdir: Path, jobs: int, *, warm_ms: int = 6_000, after_ms: int = 15_000,
                       margin_ms: int = 3_000, pause_ms: int | None = None,
                       env: dict[str, str] | None = None) -> TakeoverResult:
    """Run the scenario on the (upgraded or empty) database at ``url``; see the module doc.
    With ``pause_ms`` the victim is paused (SIGSTOP) that long instead of killed, then resumed."""
    store = await Store.open(url)
    executor = RecordingExecutor()
    await executor.start()
    nodes = []
    try:
        names = ("node-a", "node-b")
        nodes = list(await asyncio.gather(*(start_admin(url, name, workdir, env=env) for name in names)))
        group_id = await add_manual_group(store, executor.address)
        ids, first = await start_jobs_together(store, group_id, jobs, max(1, 1_000 // jobs), 3_000)
        await asyncio.sleep((first + warm_ms - now_ms()) / 1000)
        owners = {j.id: j.lease_owner for j in (await store.jobs.get_many(ids)).values()}
        held = Counter(owners.values())
        victim, survivor = (nodes[0], nodes[1]) if held["node-a"] >= held["node-b"] else (nodes[1], nodes[0])
        victim_jobs = {job_id for job_id, owner in owners.items() if owner == victim.node_id}
        resumed_at = 0
        if pause_ms is None:
            await kill(victim)  # SIGKILL: no release, no last advance
            killed_at = now_ms()
        else:
            victim.proc.send_signal(signal.SIGSTOP)
            killed_at = now_ms()
            try:
                await asyncio.sleep(pause_ms / 1000)
            finally:
                victim.proc.send_signal(signal.SIGCONT)
            resumed_at = now_ms()
        end = killed_at + after_ms
        await asyncio.sleep((end - now_ms()) / 1000)
        assert await stop(survivor) == 0, survivor.log_text()[-3000:]
        victim_log = victim.log_text()
        fence = (await store.nodes.send_fences([victim.node_id]))[victim.node_id]
        rows = await fired(store)
    finally:
        for n in nodes:
            await kill(n)
        await executor.stop()
        await store.close()
    by_log = {r.id: r for r in rows}
    received: Counter[tuple[int, int]] = Counter()
    arrival: dict[tuple[int, int], int] = {}
    for call in executor.calls:
        row = by_log.get(call.log_id)
        assert row is not None, call
        key = (row.job_id, int(row.planned_time))
        received[key] += 1
        arrival.setdefault(key, call.at_ms)
    spacing = max(1, 1_000 // jobs)
    expected: list[tuple[int, int]] = []
    for i, job_id in enumerate(ids):
        if job_id not in victim_jobs:
            continue
        grid = first + i * spacing
        # The job's instants on its own grid, after the kill and before the end margin.
        start = grid + max(0, -(-(killed_at + 1 - grid) // 1_000)) * 1_000
        expected.extend((job_id, t) for t in range(start, end - margin_ms, 1_000))
    lost = [k for k in expected if received[k] == 0]
    survivor_first: dict[int, int] = {}
    for r in rows:
        key = (r.job_id, int(r.planned_time))
        if r.job_id in victim_jobs and r.admin_node == survivor.node_id and key in arrival:
            survivor_first[r.job_id] = min(survivor_first.get(r.job_id, 1 << 62), arrival[key])
    takeover = [at - killed_at for at in survivor_first.values()]
    late = []
    if pause_ms is not None:
        late = sorted((int(r.planned_time), arrival[(r.job_id, int(r.planned_time))]) for r in rows
                      if r.admin_node == victim.node_id and (r.job_id, int(r.planned_time)) in arrival
                      and arrival[(r.job_id, int(r.planned_time))] >= resumed_at)
    return TakeoverResult(
        jobs=jobs, victim_jobs=len(victim_jobs), killed_at=killed_at, victim_fence=fence,
        expected=len(expected), lost=len(lost), lost_in_fence=sum(1 for _, t in lost if t <= fence),
        doubled=sum(1 for c in received.values() if c > 1),
        first_takeover_ms=min(takeover) if takeover else -1, takeover_ms=takeover,
        sent_after_resume=late, victim_log=victim_log)
