"""The trigger service over a real store and an executor double, with a manual clock: the
environment of the admin's trigger, callback, monitor and retry tests."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any

import pytest

from jobring.admin.dispatch.client import ExecutorClient
from jobring.admin.store import Store
from jobring.admin.store.records import JobGroup, JobInfo
from jobring.admin.trigger.trigger import TriggerService
from jobring.core.clock import ManualClock
from jobring.core.enums import AddressType
from tests.admin.executor_double import ExecutorDouble

T0 = 1_790_000_000_000  # epoch ms
HOSTS = ["10.0.0.1:9999", "10.0.0.2:9999", "10.0.0.3:9999"]


@dataclass
class Env:
    store: Store
    double: ExecutorDouble
    clock: ManualClock
    trigger: TriggerService
    group_id: int

    async def job(self, **fields: object) -> JobInfo:
        base = JobInfo(job_group=self.group_id, job_desc="demo", executor_handler="demoJobHandler",
                       executor_route_strategy="FIRST", glue_type="BEAN")
        job_id = await self.store.jobs.create(replace(base, **fields))  # type: ignore[arg-type]
        job = await self.store.jobs.get(job_id)
        assert job is not None
        return job

    async def hold(self, *jobs: JobInfo) -> None:
        """Lease the jobs to the trigger service's node, as its scheduling loop would."""
        for job in jobs:
            await self.store.jobs.set_status(job.id, 1, T0)
        held = await self.store.jobs.claim_due(self.trigger.node_id, T0, T0 + 5_000, 60_000, len(jobs))
        assert {j.id for j in held} == {j.id for j in jobs}

    def service(self, node_id: str, **kwargs: object) -> TriggerService:
        client = ExecutorClient(access_token="tok", connect=self.double.connect)
        return TriggerService(self.store, client, node_id=node_id, clock=self.clock,
                              admin_timezone="UTC", **kwargs)  # type: ignore[arg-type]


async def make_env(store: Store, hosts: list[str], address_type: AddressType = AddressType.MANUAL) -> Env:
    double = ExecutorDouble(hosts)
    clock = ManualClock(T0)
    now = datetime.fromtimestamp(T0 / 1000, tz=UTC)
    group_id = await store.groups.create(
        JobGroup(app_name="demo-app", title="Demo", address_type=address_type,
                 address_list=",".join(double.addresses) or None), now)
    client = ExecutorClient(access_token="tok", connect=double.connect)
    trigger = TriggerService(store, client, node_id="node-a", clock=clock,
                             admin_timezone="UTC")
    return Env(store, double, clock, trigger, group_id)


def env_fixture(hosts: list[str]) -> Callable[..., Any]:
    """A test module's ``env`` fixture: the environment on the SQLite store, closed after."""

    @pytest.fixture
    async def env(sqlite_store: Store) -> AsyncIterator[Env]:
        e = await make_env(sqlite_store, hosts)
        try:
            yield e
        finally:
            await e.trigger.close()

    return env
