"""Executors that declare their handlers get only those handlers' jobs (issue 25 item 23):
the beat's ``jobringHandlers`` field is kept per (appname, address), every strategy routes
among the executors that declared the job's handler or declared nothing, and a fire with
none left fails naming the handler."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, replace
from datetime import timedelta

import httpx
import pytest
from starlette.applications import Starlette

from jobring.admin.api.executor_api import executor_api_routes
from jobring.admin.dispatch.client import ExecutorClient
from jobring.admin.monitors.monitors import RegistryMonitor, RegistryService
from jobring.admin.services.callbacks import CallbackService
from jobring.admin.store import Store
from jobring.admin.store.records import JobGroup, JobInfo
from jobring.admin.trigger.trigger import FireRequest, TriggerRejected, TriggerService
from jobring.core.clock import ManualClock
from jobring.core.enums import AddressType, RouteStrategy, TriggerType
from tests.admin.api_harness import T0, api_env, at
from tests.admin.executor_double import ExecutorDouble

TOKEN = "executor-token-0123456789abcdef"
HOSTS = ["exec-1:9999", "exec-2:9999", "exec-3:9999"]
A, B, JAVA = (f"http://{h}/" for h in HOSTS)  # declares "a", declares "b", declares nothing


@dataclass
class Env:
    http: httpx.AsyncClient
    store: Store
    clock: ManualClock
    trigger: TriggerService
    double: ExecutorDouble
    group_id: int

    async def beat(self, address: str, handlers: object = None, path: str = "/api/registry"
                   ) -> httpx.Response:
        body: dict[str, object] = {"registryGroup": "EXECUTOR", "registryKey": "app",
                                   "registryValue": address}
        if handlers is not None:
            body["jobringHandlers"] = handlers
        return await self.http.post(path, content=json.dumps(body).encode(),
                                     headers={"XXL-JOB-ACCESS-TOKEN": TOKEN})

    async def job(self, handler: str, route: str = "FIRST", **fields: object) -> JobInfo:
        base = JobInfo(job_group=self.group_id, job_desc=handler, executor_handler=handler,
                       executor_route_strategy=route)
        job = await self.store.jobs.get(await self.store.jobs.create(replace(base, **fields)))  # type: ignore[arg-type]
        assert job is not None
        return job

    def ran_on(self) -> list[str]:
        return [c.address for c in self.double.runs()]


@pytest.fixture
async def env(sqlite_store: Store) -> AsyncIterator[Env]:
    clock = ManualClock(T0)
    double = ExecutorDouble(list(HOSTS))
    client = ExecutorClient(access_token=TOKEN, connect=double.connect)
    trigger = TriggerService(sqlite_store, client, node_id="n1", clock=clock, admin_timezone="UTC",
                             group_cache_ms=0)
    callbacks = CallbackService(sqlite_store, trigger, clock)
    group_id = await sqlite_store.groups.create(JobGroup(app_name="app", title="App"), at(T0))
    registry = RegistryService(sqlite_store, clock, trigger)
    app = Starlette(routes=executor_api_routes(registry, callbacks, TOKEN))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://admin") as http:
        env = Env(http, sqlite_store, clock, trigger, double, group_id)
        for address, handlers in ((A, ["a"]), (B, ["b", "shared"]), (JAVA, None)):
            assert (await env.beat(address, handlers)).json() == {"code": 200}
        yield env
    await callbacks.close()
    await trigger.close()
    await client.aclose()


async def test_first_sends_a_handler_only_to_the_executor_that_declared_it(env: Env) -> None:
    await env.beat(JAVA, path="/api/registryRemove")
    job_b, job_a = await env.job("b"), await env.job("a")
    for _ in range(3):
        assert (await env.trigger.fire(FireRequest(job_b, TriggerType.MANUAL))).trigger_code == 200
    assert env.ran_on() == [B] * 3  # A is first in the group, and has no "b"
    assert (await env.trigger.fire(FireRequest(job_a, TriggerType.MANUAL))).trigger_code == 200
    assert env.ran_on()[-1] == A
    result = await env.trigger.fire(FireRequest(job_b, TriggerType.CRON, planned_time=T0))
    entry = await env.store.logs.get(result.log_ids[0])
    assert entry is not None
    assert f"Executor addresses: [{B}]" in (entry.trigger_msg or "")
    assert f"Executors without handler 'b': [{A}]" in (entry.trigger_msg or "")


@pytest.mark.parametrize("strategy", [s for s in RouteStrategy if s is not RouteStrategy.SHARDING_BROADCAST])
async def test_every_strategy_picks_among_declarers_and_undeclared_executors(
    env: Env, strategy: RouteStrategy
) -> None:
    jobs = [await env.job("b", route=strategy.value) for _ in range(6)]  # six points on the hash ring

    async def fire_all() -> None:
        for job in jobs:
            for _ in range(3):
                assert (await env.trigger.fire(FireRequest(job, TriggerType.MANUAL))).trigger_code == 200

    await fire_all()
    assert set(env.ran_on()) <= {B, JAVA} and len(env.ran_on()) == 18
    # The failover and busy-over probes never ask an executor without the handler.
    assert all(c.address != A for c in env.double.calls)
    # Now the last executor declares other handlers too: B alone may run "b".
    await env.beat(JAVA, ["x"])
    env.double.calls.clear()
    await fire_all()
    assert {c.address for c in env.double.calls} == {B} and len(env.ran_on()) == 18


async def test_broadcast_shards_only_over_executors_that_may_run_the_handler(env: Env) -> None:
    job = await env.job("a", route="SHARDING_BROADCAST")
    result = await env.trigger.fire(FireRequest(job, TriggerType.MANUAL))
    assert result.trigger_code == 200 and len(result.log_ids) == 2
    shards = sorted((c.address, c.body["broadcastIndex"], c.body["broadcastTotal"])
                    for c in env.double.runs())
    assert shards == [(A, 0, 2), (JAVA, 1, 2)]


async def test_no_executor_declaring_the_handler_fails_the_fire_naming_it(env: Env) -> None:
    await env.beat(JAVA, path="/api/registryRemove")
    for route in ("FIRST", "FAILOVER", "SHARDING_BROADCAST"):
        job = await env.job("nowhere", route=route)
        result = await env.trigger.fire(FireRequest(job, TriggerType.MANUAL))
        assert result.trigger_code == 500
        msg = result.trigger_msg
        assert "Trigger Fail: no online executor of group app declares handler 'nowhere'" in msg
        assert f"Executors without handler 'nowhere': [{A}, {B}]" in msg
    assert env.double.calls == []


async def test_glue_jobs_go_anywhere(env: Env) -> None:
    await env.beat(JAVA, path="/api/registryRemove")
    job = await env.job("", glue_type="GLUE_SHELL", glue_source="echo hi")
    assert (await env.trigger.fire(FireRequest(job, TriggerType.MANUAL))).trigger_code == 200
    assert env.ran_on() == [A]


async def test_a_new_beat_replaces_the_set_and_a_dead_address_takes_it_away(env: Env) -> None:
    await env.beat(JAVA, path="/api/registryRemove")
    job = await env.job("b")
    # A restarted with a "b" handler; then a Java executor took A's place (declares nothing).
    await env.beat(A, ["a", "b"])
    assert (await env.store.registry.declared("app"))[A] == {"a", "b"}
    await env.trigger.fire(FireRequest(job, TriggerType.MANUAL))
    await env.beat(A)
    assert A not in await env.store.registry.declared("app")
    await env.trigger.fire(FireRequest(job, TriggerType.MANUAL))
    assert env.ran_on() == [A, A]
    # B leaves; A's heartbeats stop too and the registry monitor drops it after 90 s.
    await env.beat(B, path="/api/registryRemove")
    assert B not in await env.store.registry.declared("app")
    env.clock.set(T0 + 91_000)
    await RegistryMonitor(env.store, env.clock).tick()
    assert await env.store.registry.declared("app") == {}
    assert await env.store.registry.entries("app") == []


async def test_an_address_chosen_by_hand_must_declare_the_handler(env: Env) -> None:
    job = await env.job("b")
    with pytest.raises(TriggerRejected, match=f"do not declare handler 'b': {A}"):
        await env.trigger.fire(FireRequest(job, TriggerType.MANUAL, address_override=[A, B]))
    result = await env.trigger.fire(FireRequest(job, TriggerType.MANUAL, address_override=[JAVA]))
    assert result.trigger_code == 200 and env.ran_on() == [JAVA]


async def test_hand_typed_addresses_of_a_manual_group_are_matched_in_any_spelling(env: Env) -> None:
    group = await env.store.groups.get(env.group_id)
    assert group is not None
    spelled = "http://EXEC-1:9999,http://exec-2:9999/"
    await env.store.groups.update(
        replace(group, address_type=AddressType.MANUAL, address_list=spelled), at(T0))
    job = await env.job("b")
    assert (await env.trigger.fire(FireRequest(job, TriggerType.MANUAL))).trigger_code == 200
    assert env.ran_on() == [B]


@pytest.mark.parametrize("handlers", ["a", [1], [""], ["x" * 256], [f"h{i}" for i in range(1_001)]])
async def test_a_malformed_declaration_is_refused_and_registers_nothing(env: Env, handlers: object) -> None:
    response = await env.beat("http://exec-9:9999/", handlers)
    assert response.status_code == 400
    assert "'jobringHandlers' must be a list of at most 1000 handler names" in response.json()["msg"]
    assert "http://exec-9:9999/" not in {e.registry_value for e in await env.store.registry.entries("app")}


async def test_the_reference_body_registers_with_nothing_declared(env: Env) -> None:
    # XXL-JOB 2.4.1's bytes, as a Java executor sends them.
    body = b'{"registryGroup":"EXECUTOR","registryKey":"app","registryValue":"http://exec-4:9999/"}'
    answer = await env.http.post("/api/registry", content=body, headers={"XXL-JOB-ACCESS-TOKEN": TOKEN})
    assert answer.content == b'{"code":200}'
    entry = next(e for e in await env.store.registry.entries("app") if e.registry_value == "http://exec-4:9999/")
    assert entry.handlers is None and entry.declared_handlers is None


async def test_a_group_shows_what_each_online_executor_declared(sqlite_store: Store) -> None:
    async with api_env(sqlite_store) as api, api.client("admin") as http:
        now = at(T0) - timedelta(seconds=5)
        await sqlite_store.registry.beat("EXECUTOR", "app-b", "http://x:1/", now, handlers=["b", "a"])
        await sqlite_store.registry.beat("EXECUTOR", "app-b", "http://y:1/", now)
        online = (await http.get(f"/groups/{api.group_b}")).json()["online"]
        assert [(o["address"], o["handlers"]) for o in online] == [("http://x:1/", ["a", "b"]),
                                                                    ("http://y:1/", None)]
