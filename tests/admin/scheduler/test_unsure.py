"""Fires perhaps sent by a failed node: the executors are asked, and only what none of them
received is sent again, with the same run id (trigger/unsure.py)."""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from typing import Any

import pytest

from jobring.admin.dispatch.client import ExecutorClient
from jobring.admin.store.records import HandleResult, NewLog
from jobring.admin.trigger.fires import NodeFire
from jobring.admin.trigger.unsure import UnsureFires
from jobring.executor.runlog import MSG_LOG_FILE_NOT_EXISTS
from jobring.protocol.models import ReturnT, msg_uri_not_found
from tests.admin.trigger_kit import T0, Env, env_fixture

HOSTS = ["10.0.0.1:9999", "10.0.0.2:9999"]


env = env_fixture(HOSTS)


def _resolver(env: Env) -> UnsureFires:
    client: ExecutorClient = env.trigger.dispatcher._client  # noqa: SLF001 (the double's client)
    return UnsureFires(env.store, env.trigger, client)


async def _recorded(env: Env, job_id: int, planned: int, node: str = "node-dead") -> int:
    """A fire recorded ahead by a node that then died: no dispatch answer."""
    (log_id,) = await env.store.logs.insert_fires([NewLog(
        job_group=env.group_id, job_id=job_id, trigger_time=datetime.fromtimestamp(planned / 1000, tz=UTC),
        executor_handler="demoJobHandler", trigger_type="CRON", planned_time=planned, admin_node=node)])
    assert log_id is not None
    return log_id


def _received(known: set[int]) -> Any:
    async def answer(body: dict[str, Any]) -> ReturnT:
        return ReturnT.success({"received": sorted({i for i, _ in body["runs"]} & known)})
    return answer


async def test_jobring_executors_are_asked_and_only_unreceived_fires_are_sent_again(
        env: Env, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, "jobring.admin.trigger.unsure")
    job = await env.job()
    got = await _recorded(env, job.id, T0)
    missed = await _recorded(env, job.id, T0 + 1_000)
    for address in env.double.addresses:
        env.double.answer(address, "received", _received({got} if address.endswith("1:9999/") else set()))
    done = await _resolver(env).resolve([got, missed])
    assert (done.received, done.resent, done.unknown) == ([got], [missed], [])
    (run,) = env.double.runs()
    assert run.body["logId"] == missed and run.body["logDateTime"] == T0 + 1_000  # the same run, again
    assert f"run {missed} sent again: code 200" in caplog.text  # each resend's answer, by run id
    asked = [c.body for c in env.double.calls if c.path == "received"]
    assert len(asked) == 2 and [missed, T0 + 1_000] in asked[0]["runs"]
    row = await env.store.logs.get(missed)
    assert row is not None and row.trigger_code == 200  # confirmed now
    # Resolved again (another node, a retry): nothing is sent twice.
    again = await _resolver(env).resolve([got, missed])
    assert again.resent == [] and len(env.double.runs()) == 1


async def test_xxl_executors_answer_by_their_log_files(env: Env) -> None:
    job = await env.job()
    started = await _recorded(env, job.id, T0)
    never = await _recorded(env, job.id, T0 + 1_000)

    async def log_of(body: dict[str, Any]) -> ReturnT:
        if body["logId"] == started:
            return ReturnT.success({"fromLineNum": 1, "toLineNum": 2, "logContent": "start\nrunning\n",
                                    "isEnd": False})
        return ReturnT.success({"fromLineNum": 1, "toLineNum": 0, "logContent": MSG_LOG_FILE_NOT_EXISTS,
                                "isEnd": True})

    async def no_such_uri(body: dict[str, Any]) -> ReturnT:
        return ReturnT.fail(msg_uri_not_found("/received"))

    for address in env.double.addresses:
        env.double.answer(address, "received", no_such_uri)
        env.double.answer(address, "log", log_of)
    done = await _resolver(env).resolve([started, never])
    assert (done.received, done.resent, done.unknown) == ([started], [never], [])
    assert [r.body["logId"] for r in env.double.runs()] == [never]
    probe = next(c.body for c in env.double.calls if c.path == "log")
    assert probe["logDateTim"] == T0 and probe["fromLineNum"] == 1


async def test_an_unreachable_executor_leaves_the_fire_to_the_lost_run_rules(env: Env) -> None:
    job = await env.job()
    log_id = await _recorded(env, job.id, T0)
    env.double.answer(env.double.address(0), "received", _received(set()))
    env.double.down.add(HOSTS[1])  # it may have the run: nobody can tell
    done = await _resolver(env).resolve([log_id])
    assert (done.received, done.resent, done.unknown) == ([], [], [log_id])
    assert env.double.runs() == []


async def test_a_fire_confirmed_meanwhile_is_not_asked_about(env: Env) -> None:
    job = await env.job()
    log_id = await _recorded(env, job.id, T0)
    await env.store.logs.record_results([HandleResult(log_id, 200, None, datetime.now(UTC))])
    done = await _resolver(env).resolve([log_id])
    assert (done.received, done.resent, done.unknown) == ([], [], [])
    assert env.double.calls == []


async def test_settling_a_takeover_hands_the_fires_perhaps_sent_to_the_resolver(env: Env) -> None:
    from jobring.admin.loop.adapters import StoreLeases

    job = await env.job(trigger_status=1, trigger_next_time=T0, schedule_type="FIX_RATE", schedule_conf="1")
    under = await _recorded(env, job.id, T0)  # under the dead node's fence: perhaps sent
    beyond = await _recorded(env, job.id, T0 + 5_000)  # beyond it: never sent, withdrawn
    await env.store.nodes.raise_fence("node-dead", T0 + 1_000)
    submitted: list[list[int]] = []

    class Recorder(UnsureFires):
        def submit(self, log_ids: Any) -> None:
            submitted.append(list(log_ids))

    leases = StoreLeases(env.store, "node-b", Recorder(env.store, env.trigger, _resolver(env)._executors))  # noqa: SLF001
    claimed = await env.store.jobs.claim_due("node-b", T0, T0 + 10_000, 10_000, 10, new_only=False)
    assert [j.id for j in claimed] == [job.id]
    resume = await leases.settle_takeover(claimed)
    assert resume == {job.id: T0}
    assert submitted == [[under]]
    assert await env.store.logs.get(beyond) is None


async def test_executors_are_asked_with_the_groups_appname(env: Env, monkeypatch: pytest.MonkeyPatch) -> None:
    # A pull executor is reached only through its group's appname: asked without it, a
    # mailbox of another group at the same pull:// name could answer (security review 3).
    job = await env.job()
    log_id = await _recorded(env, job.id, T0)
    client = _resolver(env)._executors  # noqa: SLF001
    apps: list[tuple[str, str | None]] = []
    call, read_log = client.call, client.log

    async def recording_call(address: str, path: str, body: Any, token: Any = None, app_name: Any = None
                             ) -> ReturnT:
        apps.append((path, app_name))
        return await call(address, path, body, token, app_name)

    async def recording_log(address: str, param: Any, token: Any = None, app_name: Any = None) -> ReturnT:
        apps.append(("log", app_name))
        return await read_log(address, param, token, app_name)

    monkeypatch.setattr(client, "call", recording_call)
    monkeypatch.setattr(client, "log", recording_log)

    async def no_such_uri(body: dict[str, Any]) -> ReturnT:
        return ReturnT.fail(msg_uri_not_found("/received"))

    for address in env.double.addresses:
        env.double.answer(address, "received", no_such_uri)
    await UnsureFires(env.store, env.trigger, client).resolve([log_id])
    asked = [app for path, app in apps if path in ("received", "log")]
    assert {p for p, _ in apps} >= {"received", "log"} and set(asked) == {"demo-app"}


async def test_a_workflow_nodes_run_is_sent_again_with_its_context_and_timeout(env: Env) -> None:
    # A workflow node's run taken over from a dead admin (recorded, perhaps never sent) goes
    # again as the node's fire would: with its run's context and the node's own timeout.
    job = await env.job(executor_timeout=60)
    (log_id,) = await env.store.logs.insert_fires([NewLog(
        job_group=env.group_id, job_id=job.id, trigger_time=datetime.fromtimestamp(T0 / 1000, tz=UTC),
        executor_handler="demoJobHandler", executor_param="p", trigger_type="WORKFLOW", sent_time=T0,
        admin_node="node-dead", workflow_node_run_id=77)])
    assert log_id is not None
    for address in env.double.addresses:
        env.double.answer(address, "received", _received(set()))
    done = await _resolver(env).resolve([log_id], {log_id: NodeFire({"rows": 1234}, 7)})
    assert done.resent == [log_id]
    (run,) = env.double.runs()
    assert (run.body["logId"], run.body["executorParams"], run.body["executorTimeout"]) == (log_id, "p", 7)
    assert run.body["workflowContext"] == {"rows": 1234}
