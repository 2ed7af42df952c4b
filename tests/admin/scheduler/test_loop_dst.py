"""The scheduling loop applies a job's daylight-saving rules (issue 24 item 6) on a manual clock:
a wall time in the spring-forward gap fires at the transition (``next_valid``), one shown twice
at fall-back fires at both showings (``both``)."""

from __future__ import annotations

from datetime import UTC, datetime

import orjson

from jobring.admin.store.records import JobInfo
from tests.admin.loop_fakes import Harness
from tests.admin.scheduler.test_loop_timing import FakeTiming


def ms(text: str) -> int:
    return int(datetime.fromisoformat(text).replace(tzinfo=UTC).timestamp() * 1000)


def ny_job(cron: str, dst: dict[str, str], next_ms: int) -> JobInfo:
    return JobInfo(id=1, job_group=1, job_desc="dst", schedule_type="CRON", schedule_conf=cron,
                   schedule_timezone="America/New_York", trigger_status=1, trigger_next_time=next_ms,
                   executor_handler="demo", timing=orjson.dumps({"dst": dst}).decode())


async def test_a_wall_time_in_the_gap_fires_at_the_transition_with_next_valid() -> None:
    h = Harness(start_ms=ms("2026-03-08T06:59:00"))
    try:
        h.table.put(ny_job("0 30 2 * * ?", {"gap": "next_valid"}, ms("2026-03-08T07:00:00")))
        await h.loop(timing=FakeTiming(h.table)).start()
        await h.advance_to(ms("2026-03-08T07:00:01"), step_ms=500)
        assert h.runlog.fired(1) == [(1, ms("2026-03-08T07:00:00"))]  # 03:00 EDT
        assert h.table.jobs[1].trigger_next_time == ms("2026-03-09T06:30:00")  # 02:30 EDT
    finally:
        for loop in h.loops.values():
            await loop.stop()


async def test_a_repeated_wall_time_fires_twice_with_both() -> None:
    h = Harness(start_ms=ms("2026-11-01T05:29:00"))
    try:
        h.table.put(ny_job("0 30 1 * * ?", {"repeat": "both"}, ms("2026-11-01T05:30:00")))
        await h.loop(timing=FakeTiming(h.table)).start()
        await h.advance_to(ms("2026-11-01T06:30:01"), step_ms=1_000)
        # 01:30 EDT, then 01:30 EST.
        assert h.runlog.fired(1) == [(1, ms("2026-11-01T05:30:00")), (1, ms("2026-11-01T06:30:00"))]
    finally:
        for loop in h.loops.values():
            await loop.stop()
