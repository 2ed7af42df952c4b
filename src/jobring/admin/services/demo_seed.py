"""Sample data for the local start (`jobring run` / `make run`): the demo executor's group
and a few jobs that use its handlers, created stopped so a newcomer starts them by choice."""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime

from jobring.admin.services.executor_tokens import new_group_token
from jobring.admin.store import Store
from jobring.admin.store.records import JobGroup, JobInfo
from jobring.core.enums import AddressType, RouteStrategy, ScheduleType

DEMO_APP_NAME = "jobring-demo"


@dataclass(frozen=True, slots=True)
class DemoSeed:
    group_id: int
    created_jobs: int
    access_token: str  # the demo group's executor token (the demo executor uses it)


def _demo_jobs(group_id: int, now: datetime) -> list[JobInfo]:
    base = JobInfo(job_group=group_id, author="jobring", add_time=now, update_time=now,
                   glue_type="BEAN", glue_updatetime=now, trigger_status=0)
    return [
        replace(base, job_desc="Demo: hello every 10 s", executor_handler="hello",
                executor_param="world", schedule_type=ScheduleType.CRON, schedule_conf="0/10 * * * * ?"),
        replace(base, job_desc="Demo: broadcast to every demo executor", executor_handler="shard",
                executor_route_strategy=RouteStrategy.SHARDING_BROADCAST,
                schedule_type=ScheduleType.FIX_RATE, schedule_conf="30"),
        replace(base, job_desc="Demo: slow job stopped by its 5 s timeout", executor_handler="slow",
                executor_param="8", executor_timeout=5,
                schedule_type=ScheduleType.CRON, schedule_conf="0 * * * * ?"),
        replace(base, job_desc="Demo: failing job, retried once", executor_handler="fail",
                executor_fail_retry_count=1, schedule_type=ScheduleType.FIX_RATE, schedule_conf="60"),
    ]


async def seed_demo(store: Store, now: datetime) -> DemoSeed:
    """Create the demo group and its jobs unless the group already exists (idempotent); a
    demo group without a token of its own (made before tokens existed) is given one."""
    existing = await store.groups.by_app_name(DEMO_APP_NAME)
    if existing is not None:
        token = existing.access_token
        if not token:
            token = new_group_token()
            await store.groups.set_access_token(existing.id, token)
        return DemoSeed(existing.id, 0, token)
    token = new_group_token()
    group_id = await store.groups.create(
        JobGroup(app_name=DEMO_APP_NAME, title="Demo", address_type=AddressType.AUTO, access_token=token), now
    )
    jobs = _demo_jobs(group_id, now)
    for job in jobs:
        await store.jobs.create(job)
    return DemoSeed(group_id, len(jobs), token)
