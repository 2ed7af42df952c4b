"""The overlap rule of scheduled workflow runs."""

from __future__ import annotations

import pytest

from jobring.core.workflow.overlap import Overlap, OverlapAction, on_fire, on_run_end

START, QUEUE, SKIP = OverlapAction.START, OverlapAction.QUEUE, OverlapAction.SKIP


@pytest.mark.parametrize(("rule", "running", "queued", "action", "why"), [
    (Overlap.SKIP, 0, 0, START, ""),
    (Overlap.SKIP, 1, 0, SKIP, "skipped: a run is still running"),
    (Overlap.QUEUE_ONE, 0, 0, START, ""),
    (Overlap.QUEUE_ONE, 1, 0, QUEUE, "queued until the running run ends"),
    (Overlap.QUEUE_ONE, 1, 1, SKIP, "skipped: a run is already queued"),
    (Overlap.QUEUE_ONE, 0, 1, SKIP, "skipped: a run is already queued"),
    (Overlap.ALLOW, 3, 0, START, ""),
])
def test_on_fire(rule: Overlap, running: int, queued: int, action: OverlapAction, why: str) -> None:
    assert on_fire(rule, running=running, queued=queued) == (action, why)


def test_the_queued_run_starts_when_the_running_one_ends() -> None:
    assert on_run_end(Overlap.QUEUE_ONE, running=0, queued=1)
    assert not on_run_end(Overlap.QUEUE_ONE, running=1, queued=1)
    assert not on_run_end(Overlap.QUEUE_ONE, running=0, queued=0)
    assert not on_run_end(Overlap.SKIP, running=0, queued=1)
