"""What goes with a deleted job: its delayed runs, its place in other jobs' child lists, its
GLUE history and its runs (as the reference deletes them)."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime
from typing import TYPE_CHECKING

from jobring.admin.store.records import ClearRule

if TYPE_CHECKING:
    from jobring.admin.store import Store


async def remove_job_history(store: Store, job_id: int, now: datetime) -> None:
    """Remove what belonged to the job ``job_id`` (whose row is deleted or being deleted)."""
    await store.delayed.remove_for_job(job_id)
    for parent in await store.jobs.parents(job_id):
        kept = [c for c in parent.child_job_ids if c != job_id]
        await store.jobs.update(replace(parent, child_jobid=",".join(map(str, kept)) or None))
    await store.glue.delete_for_job(job_id)
    await store.logs.clear(ClearRule.ALL, now, job_id=job_id)
