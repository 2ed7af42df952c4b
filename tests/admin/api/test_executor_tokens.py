"""Per-group executor tokens, the opt-in global token, validated executor addresses, and
child jobs limited to the caller's groups (security issue #9, items 1 and 2)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, replace
from datetime import datetime

import httpx
import pytest
from starlette.applications import Starlette

from jobring.admin.api.executor_api import executor_api_routes
from jobring.admin.api.refusals import REFUSED_BURST, RefusalBudget
from jobring.admin.dispatch.client import ExecutorClient
from jobring.admin.monitors.monitors import RegistryService
from jobring.admin.security.secrets_policy import weak_secrets
from jobring.admin.services.callbacks import CallbackService
from jobring.admin.services.executor_tokens import ExecutorTokens
from jobring.admin.services.settings import AdminSettings, load_settings
from jobring.admin.store import Store
from jobring.admin.store.records import JobGroup, JobInfo, NewLog
from jobring.admin.trigger.trigger import FireRequest, TriggerService
from jobring.configbase import ConfigError
from jobring.core.addresses import policy_from_text
from jobring.core.clock import ManualClock
from jobring.core.enums import TriggerType
from jobring.protocol.models import RegistryParam
from tests.admin.api_harness import T0, api_env
from tests.admin.executor_double import ExecutorDouble

TOKEN_A = "token-of-group-a-0123456789abcdef"
TOKEN_B = "token-of-group-b-0123456789abcdef"
GLOBAL = "the-global-token-0123456789"
NOW = datetime(2026, 1, 1)


@dataclass
class ExecApi:
    http: httpx.AsyncClient
    store: Store
    clock: ManualClock
    group_a: int
    group_b: int

    async def post(self, path: str, body: object, token: str | None) -> dict[str, object]:
        answer: dict[str, object] = (await self.post_raw(path, body, token)).json()
        return answer

    async def post_raw(self, path: str, body: object, token: str | None) -> httpx.Response:
        headers = {"XXL-JOB-ACCESS-TOKEN": token} if token else {}
        return await self.http.post(path, content=json.dumps(body).encode(), headers=headers)


async def _exec_api(store: Store, global_token: str | None) -> AsyncIterator[ExecApi]:
    clock = ManualClock(T0)
    client = ExecutorClient(access_token=global_token, connect=ExecutorDouble(["e1:9999"]).connect)
    trigger = TriggerService(store, client, node_id="n1", clock=clock,
                             admin_timezone="UTC")
    callbacks = CallbackService(store, trigger, clock)
    group_a = await store.groups.create(JobGroup(app_name="app-a", title="A", access_token=TOKEN_A), NOW)
    group_b = await store.groups.create(JobGroup(app_name="app-b", title="B", access_token=TOKEN_B), NOW)
    tokens = ExecutorTokens(store, global_token, clock)
    routes = executor_api_routes(RegistryService(store, clock), callbacks, tokens,
                                 policy_from_text("127.0.0.0/8", None), RefusalBudget(clock.now_ms))
    app = Starlette(routes=routes)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://admin") as http:
        yield ExecApi(http, store, clock, group_a, group_b)
    await callbacks.close()
    await trigger.close()


@pytest.fixture
async def exec_api(sqlite_store: Store) -> AsyncIterator[ExecApi]:
    async for api in _exec_api(sqlite_store, None):
        yield api


def _beat(app: str, address: str = "http://10.0.0.5:9999/") -> dict[str, str]:
    return {"registryGroup": "EXECUTOR", "registryKey": app, "registryValue": address}


async def test_group_token_registers_only_its_own_appname(exec_api: ExecApi) -> None:
    assert (await exec_api.post("/api/registry", _beat("app-a"), TOKEN_A))["code"] == 200
    refused = await exec_api.post("/api/registry", _beat("app-b", "http://10.6.6.6:1/"), TOKEN_A)
    assert refused["code"] == 500 and "not valid for appname" in str(refused["msg"])
    assert (await exec_api.post("/api/registryRemove", _beat("app-b"), TOKEN_A))["code"] == 500
    admin_beat = {"registryGroup": "ADMIN", "registryKey": "app-a", "registryValue": "http://10.0.0.5:1/"}
    assert (await exec_api.post("/api/registry", admin_beat, TOKEN_A))["code"] == 500
    assert [e.registry_value for e in await exec_api.store.registry.entries("app-b")] == []
    assert [e.registry_value for e in await exec_api.store.registry.entries("app-a")] == [
        "http://10.0.0.5:9999/"]


async def test_no_global_token_unless_enabled(exec_api: ExecApi) -> None:
    for token in (None, "", GLOBAL, "default_token"):
        answer = await exec_api.post("/api/registry", _beat("app-a"), token)
        assert answer == {"code": 500, "msg": "The access token is wrong."}


async def test_registered_addresses_pass_the_address_policy(exec_api: ExecApi) -> None:
    for address in ("http://169.254.169.254/latest/", "http://127.0.0.1:5432/", "http://2130706433:5432/",
                    "http://user:pw@10.0.0.5:9999/", "http://[::ffff:169.254.169.254]/"):
        answer = await exec_api.post("/api/registry", _beat("app-a", address), TOKEN_A)
        assert answer["code"] == 500 and "address refused" in str(answer["msg"]), address
    assert await exec_api.store.registry.entries("app-a") == []


async def _run_of(store: Store, group: int) -> int:
    job = await store.jobs.create(JobInfo(job_group=group, job_desc="j", executor_handler="h"))
    return await store.logs.insert(NewLog(job_group=group, job_id=job, trigger_time=NOW, trigger_code=200,
                                          executor_handler="h", trigger_type="MANUAL"))


async def test_callback_only_for_runs_of_the_tokens_group(exec_api: ExecApi) -> None:
    run_a = await _run_of(exec_api.store, exec_api.group_a)
    run_b = await _run_of(exec_api.store, exec_api.group_b)
    forged = [{"logId": run_b, "logDateTim": T0, "handleCode": 200, "handleMsg": "forged"},
              {"logId": run_a, "logDateTim": T0, "handleCode": 200, "handleMsg": "ok"}]
    answer = await exec_api.post("/api/callback", forged, TOKEN_A)
    # B's run is refused as if it did not exist (the token's groups are a condition of the
    # write); A's own result is recorded.
    assert answer["code"] == 500 and f"runs [{run_b}]" in str(answer["msg"])
    entry_b = await exec_api.store.logs.get(run_b)
    assert entry_b is not None and entry_b.handle_code == 0
    entry = await exec_api.store.logs.get(run_a)
    assert entry is not None and entry.handle_code == 200 and entry.handle_msg == "ok"
    assert (await exec_api.post("/api/callback", forged[1:], TOKEN_A))["code"] == 200  # a repeat


async def test_a_token_flooding_unknown_runs_is_answered_429_before_its_body_is_read(
        exec_api: ExecApi) -> None:
    def unknown(first: int, count: int) -> list[dict[str, object]]:
        return [{"logId": first + i, "logDateTim": T0, "handleCode": 200, "handleMsg": "x"}
                for i in range(count)]

    # The burst is spent on refused items (each batch answered 400, as before) ...
    for n in range(REFUSED_BURST // 1_000):
        flood = await exec_api.post_raw("/api/callback", unknown(10**9 + n * 1_000, 1_000), TOKEN_A)
        assert flood.status_code == 400
    # ... and then the token waits, however good its next batch is.
    run_a = await _run_of(exec_api.store, exec_api.group_a)
    honest = [{"logId": run_a, "logDateTim": T0, "handleCode": 200, "handleMsg": "ok"}]
    answer = await exec_api.post_raw("/api/callback", honest, TOKEN_A)
    assert answer.status_code == 429 and answer.headers["retry-after"] == "1"
    assert "too many results for unknown runs" in answer.json()["msg"]
    entry = await exec_api.store.logs.get(run_a)
    assert entry is not None and entry.handle_code == 0  # not read, not recorded
    # Another group's token is not held up, and registration beats still get through.
    run_b = await _run_of(exec_api.store, exec_api.group_b)
    assert (await exec_api.post("/api/callback", [{**honest[0], "logId": run_b}], TOKEN_B))["code"] == 200
    assert (await exec_api.post("/api/registry", _beat("app-a"), TOKEN_A))["code"] == 200
    # Once the debt is paid (1,000 refused items a second), the result the executor kept is taken.
    exec_api.clock.advance(1_000)
    assert (await exec_api.post("/api/callback", honest, TOKEN_A))["code"] == 200
    entry = await exec_api.store.logs.get(run_a)
    assert entry is not None and entry.handle_code == 200


def test_refusal_budget_goes_into_debt_and_says_how_long_to_wait() -> None:
    clock = ManualClock(0)
    budget = RefusalBudget(clock.now_ms)
    assert budget.retry_after_s("t") == 0
    budget.charge("t", REFUSED_BURST - 1)
    assert budget.retry_after_s("t") == 0  # one item left
    budget.charge("t", 1 + 2_500)  # 2,500 in debt: 2.5 s at 1,000 a second
    assert budget.retry_after_s("t") == 3 and budget.retry_after_s("other") == 0
    clock.advance(2_500)
    assert budget.retry_after_s("t") == 1  # level 0 is not yet positive
    clock.advance(1)
    assert budget.retry_after_s("t") == 0
    budget.charge("t", 0)
    assert budget.retry_after_s("t") == 0


async def test_global_token_acts_for_every_group_without_its_own(sqlite_store: Store) -> None:
    async for api in _exec_api(sqlite_store, GLOBAL):
        shared = await api.store.groups.create(JobGroup(app_name="app-shared", title="S"), NOW)
        assert (await api.post("/api/registry", _beat("app-shared"), GLOBAL))["code"] == 200
        run = await _run_of(api.store, shared)
        done = [{"logId": run, "logDateTim": T0, "handleCode": 200, "handleMsg": "ok"}]
        assert (await api.post("/api/callback", done, GLOBAL))["code"] == 200
        # Group b has its own token: the global one neither registers nor reports there.
        assert (await api.post("/api/registry", _beat("app-b"), GLOBAL))["code"] == 500
        run_b = await _run_of(api.store, api.group_b)
        done_b = [{"logId": run_b, "logDateTim": T0, "handleCode": 200, "handleMsg": "ok"}]
        assert (await api.post("/api/callback", done_b, GLOBAL))["code"] == 500


async def test_global_token_does_not_act_for_a_group_with_its_own_token(sqlite_store: Store) -> None:
    clock = ManualClock(T0)
    own = await sqlite_store.groups.create(JobGroup(app_name="app-own", title="O", access_token=TOKEN_A), NOW)
    shared = await sqlite_store.groups.create(JobGroup(app_name="app-shared", title="S"), NOW)
    scope = await ExecutorTokens(sqlite_store, GLOBAL, clock).scope(GLOBAL)
    assert scope is not None and scope.is_global
    # The admin sends the group's own token to its executors: the global one cannot stand in.
    assert not scope.allows_app("app-own") and not scope.allows_group(own)
    # MySQL's collations match app names without case: "APP-OWN" would reach the same group.
    assert not scope.allows_app("APP-OWN")
    assert scope.allows_app("app-shared") and scope.allows_group(shared)


async def test_rotated_token_stops_working(sqlite_store: Store) -> None:
    clock = ManualClock(T0)
    group = await sqlite_store.groups.create(JobGroup(app_name="app-r", title="R", access_token=TOKEN_A), NOW)
    tokens = ExecutorTokens(sqlite_store, None, clock, refresh_ms=2_000)
    scope = await tokens.scope(TOKEN_A)
    assert scope is not None and scope.group_ids == {group} and scope.allows_app("app-r")
    await sqlite_store.groups.set_access_token(group, TOKEN_B)
    clock.advance(2_000)
    assert await tokens.scope(TOKEN_A) is None
    assert await tokens.scope(TOKEN_B) is not None


async def test_past_half_its_age_the_copy_answers_while_it_is_read_again(
    sqlite_store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A callback past half of refresh_ms does not wait for the groups' read (it did at
    # refresh_ms, on a workflow node start's path); the copy is never older than refresh_ms.
    clock = ManualClock(T0)
    group = await sqlite_store.groups.create(JobGroup(app_name="app-h", title="H", access_token=TOKEN_A), NOW)
    tokens = ExecutorTokens(sqlite_store, None, clock, refresh_ms=2_000)
    assert await tokens.scope(TOKEN_A) is not None
    await sqlite_store.groups.set_access_token(group, TOKEN_B)
    real_read = sqlite_store.groups.tokens
    release = asyncio.Event()
    reads = 0

    async def held_read() -> list[tuple[int, str, str | None]]:
        nonlocal reads
        reads += 1
        await asyncio.wait_for(release.wait(), 5)
        return await real_read()

    monkeypatch.setattr(sqlite_store.groups, "tokens", held_read)
    clock.advance(1_000)
    still = await asyncio.wait_for(tokens.scope(TOKEN_A), 5)  # answered with the read held
    assert still is not None and still.group_ids == {group}
    assert await asyncio.wait_for(tokens.scope(TOKEN_A), 5) is not None  # one re-read at a time
    release.set()
    await tokens.close()  # lets the re-read end
    assert reads == 1
    clock.advance(500)  # the copy read at T0 + 1 s is current: no read on these calls
    assert await tokens.scope(TOKEN_B) is not None
    assert await tokens.scope(TOKEN_A) is None


async def test_a_rotation_on_this_node_is_not_undone_by_a_reread_in_flight(
    sqlite_store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A re-read in the background begun before a rotation on this node ends after it (its
    # read saw the old token): the node's forget() must still hold, the old token refused at
    # the next check (it was accepted for another refresh_ms).
    clock = ManualClock(T0)
    group = await sqlite_store.groups.create(JobGroup(app_name="app-f", title="F", access_token=TOKEN_A), NOW)
    tokens = ExecutorTokens(sqlite_store, None, clock, refresh_ms=2_000)
    assert await tokens.scope(TOKEN_A) is not None
    real_read = sqlite_store.groups.tokens
    before_rotation = await real_read()
    started, release = asyncio.Event(), asyncio.Event()

    async def held_read() -> list[tuple[int, str, str | None]]:
        started.set()
        await asyncio.wait_for(release.wait(), 5)
        return before_rotation

    monkeypatch.setattr(sqlite_store.groups, "tokens", held_read)
    clock.advance(1_000)
    assert await tokens.scope(TOKEN_A) is not None  # past half its age: re-read in the background
    await asyncio.wait_for(started.wait(), 5)
    await sqlite_store.groups.set_access_token(group, TOKEN_B)
    tokens.forget()  # as the rotation's endpoint does
    release.set()
    await tokens.close()  # the re-read in flight ends
    monkeypatch.setattr(sqlite_store.groups, "tokens", real_read)
    assert await tokens.scope(TOKEN_A) is None
    assert await tokens.scope(TOKEN_B) is not None


async def test_unknown_tokens_reread_the_groups_at_most_once_a_second(sqlite_store: Store) -> None:
    clock = ManualClock(T0)
    tokens = ExecutorTokens(sqlite_store, None, clock, refresh_ms=60_000)
    assert await tokens.scope("nobody-has-this-token") is None
    group = await sqlite_store.groups.create(JobGroup(app_name="late", title="L", access_token=TOKEN_A), NOW)
    assert await tokens.scope(TOKEN_A) is None  # read less than a second ago
    clock.advance(1_000)
    scope = await tokens.scope(TOKEN_A)  # created on another node: found on the miss re-read
    assert scope is not None and scope.group_ids == {group}


def test_weak_global_token_and_bad_networks_are_refused() -> None:
    for token in ("default_token", "short"):
        problems = weak_secrets(load_settings(environ={"JOBRING_ACCESS_TOKEN": token}))
        assert len(problems) == 1 and problems[0].startswith("access_token")
    with pytest.raises(ConfigError, match="executor_address"):
        load_settings(environ={"JOBRING_EXECUTOR_ADDRESS_DENY": "10.0.0.0/8,nope"})
    assert load_settings(environ={}).access_token is None


# -- the management API ----------------------------------------------------------------------


async def test_group_token_endpoints_and_new_groups_get_a_token(sqlite_store: Store) -> None:
    async with api_env(sqlite_store) as env, env.client("admin") as http:
        # With the global token opted in (as here), a new group uses it until given its own.
        shared = (await http.post("/groups", json={"app_name": "shared", "title": "S"})).json()
        assert shared["has_access_token"] is False
        env.services.secrets = replace(env.services.secrets, access_token=None)
        created = (await http.post("/groups", json={"app_name": "fresh", "title": "F"})).json()
        assert created["has_access_token"] is True
        first = (await http.get(f"/groups/{created['id']}/access-token")).json()
        assert first["app_name"] == "fresh" and len(first["access_token"]) >= 40
        rotated = (await http.post(f"/groups/{created['id']}/access-token/rotate")).json()
        actions = [e.action for e in (await env.store.audit.list()).items]
        assert "group.token_rotate" in actions and "settings.secret_read" in actions
        assert rotated["access_token"] != first["access_token"]
        again = (await http.get(f"/groups/{created['id']}/access-token")).json()
        assert again["access_token"] == rotated["access_token"]
        # A group from before tokens existed has none until rotated.
        missing = await http.get(f"/groups/{env.group_b}/access-token")
        assert missing.status_code == 404 and "rotate" in missing.json()["error"]
        listed = (await http.get("/groups")).json()["items"]
        assert all("access_token" not in g for g in listed)


@pytest.mark.parametrize(
    "address",
    ["http://169.254.169.254/latest/meta-data/", "http://0.0.0.0:5432/", "http://user:pw@10.0.0.1:1/",
     "http://[fe80::1]:1/", "http://2852039166/", "http://10.0.0.1:1/?q"],
)
async def test_manual_addresses_are_validated(sqlite_store: Store, address: str) -> None:
    async with api_env(sqlite_store) as env, env.client("admin") as http:
        body = {"app_name": "app-a", "title": "A", "address_type": 1, "addresses": [address]}
        response = await http.put(f"/groups/{env.group_a}", json=body)
        assert response.status_code == 422 and response.json()["field"] == "addresses.0", response.text
        created = await http.post("/groups", json=body | {"app_name": "other"})
        assert created.status_code == 422


async def test_deny_list_setting_applies_to_groups_and_triggers(sqlite_store: Store) -> None:
    settings = AdminSettings(glue_enabled=True, executor_address_deny="10.0.0.0/8")
    async with api_env(sqlite_store, settings=settings) as env, env.client("admin") as http:
        body = {"app_name": "app-a", "title": "A", "address_type": 1, "addresses": ["http://10.1.1.1:9999/"]}
        assert (await http.put(f"/groups/{env.group_a}", json=body)).status_code == 422
        job = await env.add_job(env.group_a)
        trigger = await http.post(f"/jobs/{job}/trigger", json={"addresses": ["http://10.1.1.1:9999/"]})
        assert trigger.status_code == 422 and trigger.json()["field"] == "addresses.0"
        assert env.double.runs() == []


async def test_operator_may_retitle_but_not_reroute_its_group(sqlite_store: Store) -> None:
    async with api_env(sqlite_store) as env, env.client("op_in") as http:
        same = {"app_name": "app-a", "title": "A2", "address_type": 1, "addresses": env.double.addresses}
        assert (await http.put(f"/groups/{env.group_a}", json=same)).status_code == 200
        for change in ({"addresses": ["http://10.6.6.6:9999/"]}, {"app_name": "app-b"},
                       {"address_type": 0, "addresses": []}):
            response = await http.put(f"/groups/{env.group_a}", json=same | change)
            assert response.status_code == 403 and response.json()["field"] in change, response.text
        group = await sqlite_store.groups.get(env.group_a)
        assert group is not None and group.addresses == env.double.addresses and group.title == "A2"


async def test_stored_refused_addresses_are_never_called(sqlite_store: Store) -> None:
    async with api_env(sqlite_store) as env:
        bad = "http://169.254.169.254/"
        group = JobGroup(id=env.group_a, app_name="app-a", title="A", address_type=1,
                         address_list=f"{bad},{env.double.address(0)}")
        await sqlite_store.groups.update(group, NOW)
        job = await sqlite_store.jobs.get(await env.add_job(env.group_a, executor_route_strategy="FIRST"))
        assert job is not None and env.services.trigger is not None
        result = await env.services.trigger.fire(FireRequest(job, TriggerType.MANUAL))
        assert [c.address for c in env.double.calls] == [env.double.address(0)]
        assert "refused executor addresses not called" in result.trigger_msg


async def test_run_goes_out_with_the_groups_token(sqlite_store: Store) -> None:
    async with api_env(sqlite_store) as env, env.client("admin") as http:
        token = (await http.post(f"/groups/{env.group_a}/access-token/rotate")).json()["access_token"]
        job = await env.add_job(env.group_a)
        assert (await http.post(f"/jobs/{job}/trigger", json={})).json()["trigger_code"] == 200
        run = env.double.runs()[0]
        assert run.headers["XXL-JOB-ACCESS-TOKEN"] == token
        # Kill and log of that run use the same token.
        log_id = (await sqlite_store.logs.list(job_id=job)).items[0].id
        await http.get(f"/runs/{log_id}/log")
        last = env.double.calls[-1]
        assert last.path == "log" and last.headers["XXL-JOB-ACCESS-TOKEN"] == token


@pytest.mark.parametrize(("strategy", "probe"), [("FAILOVER", "beat"), ("BUSYOVER", "idleBeat")])
async def test_probes_carry_the_groups_token(sqlite_store: Store, strategy: str, probe: str) -> None:
    async with api_env(sqlite_store) as env, env.client("admin") as http:
        token = (await http.post(f"/groups/{env.group_a}/access-token/rotate")).json()["access_token"]
        job = await env.add_job(env.group_a, executor_route_strategy=strategy)
        assert (await http.post(f"/jobs/{job}/trigger", json={})).json()["trigger_code"] == 200
        sent = {(c.path, c.headers["XXL-JOB-ACCESS-TOKEN"]) for c in env.double.calls}
        assert sent == {(probe, token), ("run", token)}


async def test_child_jobs_outside_the_callers_groups_look_missing(sqlite_store: Store) -> None:
    async with api_env(sqlite_store) as env:
        job_b = await env.add_job(env.group_b)
        base = {"job_group": env.group_a, "job_desc": "parent", "executor_handler": "demo"}
        async with env.client("op_in") as http:
            hidden = await http.post("/jobs", json=base | {"child_job_ids": [job_b]})
            missing = await http.post("/jobs", json=base | {"child_job_ids": [4242]})
            assert hidden.status_code == missing.status_code == 404
            assert hidden.json() == {"error": missing.json()["error"].replace("4242", str(job_b)),
                                     "field": "child_job_ids"}
            parent = (await http.post("/jobs", json=base)).json()["id"]
            patched = await http.patch(f"/jobs/{parent}", json={"child_job_ids": [job_b]})
            assert patched.status_code == 404
        async with env.client("admin") as http:  # an admin may chain across groups
            assert (await http.patch(f"/jobs/{parent}", json={"child_job_ids": [job_b]})).status_code == 200
        async with env.client("op_in") as http:  # ... and the chain survives the operator's edits
            kept = await http.patch(f"/jobs/{parent}", json={"job_desc": "renamed"})
            assert kept.status_code == 200 and kept.json()["child_job_ids"] == [job_b]



async def test_a_group_token_cannot_take_another_groups_executor_out_of_routing(exec_api: ExecApi) -> None:
    b_address = "http://10.0.0.9:9999/"
    assert (await exec_api.post("/api/registry", _beat("app-b", b_address), TOKEN_B))["code"] == 200
    # Group a's token names its own appname with b's executor: nothing of b's is removed.
    assert (await exec_api.post("/api/registryRemove", _beat("app-a", b_address), TOKEN_A))["code"] == 200
    entries = await exec_api.store.registry.entries("app-b")
    assert [e.registry_value for e in entries] == [b_address]


async def test_registry_remove_of_an_address_not_under_that_appname_leaves_routing_alone(
    sqlite_store: Store,
) -> None:
    gone: list[tuple[str, str]] = []

    class Routing:
        def address_gone(self, app_name: str, address: str) -> None:
            gone.append((app_name, address))

        def address_back(self, app_name: str, address: str, *, v35: bool = False) -> None:
            pass

    registry = RegistryService(sqlite_store, ManualClock(T0), Routing())  # type: ignore[arg-type]
    await registry.register(RegistryParam("EXECUTOR", "app-b", "http://10.0.0.9:9999/"))
    await registry.remove(RegistryParam("EXECUTOR", "app-a", "http://10.0.0.9:9999/"))
    assert gone == []
    await registry.remove(RegistryParam("EXECUTOR", "app-b", "http://10.0.0.9:9999/"))
    assert gone == [("app-b", "http://10.0.0.9:9999/")]


async def test_a_new_or_deleted_group_token_counts_at_once_on_its_node(sqlite_store: Store) -> None:
    # Its executors start right after the group is made: the token cache read a moment ago
    # (another executor's heartbeat) must not refuse them until it is read again.
    async with api_env(sqlite_store) as env, env.client("admin") as http:
        env.services.secrets = replace(env.services.secrets, access_token=None)
        tokens = ExecutorTokens(env.store, None, env.clock)
        env.services.executor_tokens = tokens
        assert await tokens.scope("no-such-token-0123456789") is None  # the cache is fresh now
        created = (await http.post("/groups", json={"app_name": "fresh", "title": "F"})).json()
        token = (await http.get(f"/groups/{created['id']}/access-token")).json()["access_token"]
        scope = await tokens.scope(token)
        assert scope is not None and scope.group_ids == frozenset({created["id"]})
        assert (await http.delete(f"/groups/{created['id']}")).status_code == 204
        assert await tokens.scope(token) is None


async def test_no_reread_begins_in_the_background_after_close(
    sqlite_store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A request answered during the admin's stop must not start a read that outlives the store.
    clock = ManualClock(T0)
    await sqlite_store.groups.create(JobGroup(app_name="app-c", title="C", access_token=TOKEN_A), NOW)
    tokens = ExecutorTokens(sqlite_store, None, clock, refresh_ms=2_000)
    assert await tokens.scope(TOKEN_A) is not None
    await tokens.close()
    reads = 0
    real_read = sqlite_store.groups.tokens

    async def counted_read() -> list[tuple[int, str, str | None]]:
        nonlocal reads
        reads += 1
        return await real_read()

    monkeypatch.setattr(sqlite_store.groups, "tokens", counted_read)
    clock.advance(1_500)  # past half of refresh_ms: before close, a re-read in the background
    assert await tokens.scope(TOKEN_A) is not None
    await asyncio.sleep(0)
    assert reads == 0
