"""What a workflow's scheduled (or triggered) fire does while earlier runs are not finished.

Workflows are scheduled like jobs (the same schedule types, misfire rules and
:func:`jobring.core.planning.decide_fire`); what differs is the overlap rule, explicit per
workflow, **skip** by default (one run at a time):

* ``skip``: a fire while a run is going is skipped (recorded with the reason);
* ``queue_one``: it waits until the running run ends; while one waits, further fires are
  skipped (the waiting run already covers them);
* ``allow``: every fire starts a run.
"""

from __future__ import annotations

from enum import StrEnum

__all__ = ["Overlap", "OverlapAction", "on_fire", "on_run_end"]


class Overlap(StrEnum):
    SKIP = "skip"
    QUEUE_ONE = "queue_one"
    ALLOW = "allow"


class OverlapAction(StrEnum):
    START = "start"
    QUEUE = "queue"
    SKIP = "skip"


def on_fire(rule: Overlap, *, running: int, queued: int) -> tuple[OverlapAction, str]:
    """What a fire does given how many runs of the workflow are running and waiting, and why."""
    if rule is Overlap.ALLOW or running == 0 and queued == 0:
        return OverlapAction.START, ""
    if rule is Overlap.QUEUE_ONE and queued == 0:
        return OverlapAction.QUEUE, "queued until the running run ends"
    if rule is Overlap.QUEUE_ONE:
        return OverlapAction.SKIP, "skipped: a run is already queued"
    return OverlapAction.SKIP, "skipped: a run is still running"


def on_run_end(rule: Overlap, *, running: int, queued: int) -> bool:
    """After a run ended (``running`` no longer counts it): start the queued run now?"""
    return rule is Overlap.QUEUE_ONE and queued > 0 and running == 0
