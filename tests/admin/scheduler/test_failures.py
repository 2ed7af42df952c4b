"""Retries with back-off, alarm rules (final / every failure, recovery, deadline), lost runs
of gone executors, disabled and unregistered addresses, and retention."""

from __future__ import annotations

import asyncio
from collections.abc import Collection
from datetime import UTC, datetime, timedelta

import pytest

from jobring.admin.alarms import AlarmContext, Alarmer, AlarmKind, AlarmOutcome, AlarmService
from jobring.admin.monitors.failures import DeadlineMonitor, FailMonitor
from jobring.admin.monitors.monitors import LOST_PREFIX, LostRunMonitor, RegistryService
from jobring.admin.monitors.retention import ARMED_SETTING, RetentionMonitor
from jobring.admin.services.callbacks import CallbackService
from jobring.admin.services.settings import AdminSettings
from jobring.admin.store import Store
from jobring.admin.store.records import (
    GroupGuard,
    HandleResult,
    JobGroup,
    LogEntry,
    ParentLink,
    TriggerResult,
)
from jobring.admin.trigger.trigger import FireRequest
from jobring.core.enums import AddressType, AlarmStatus, TriggerType
from jobring.core.retry import retry_delay_ms
from jobring.core.runstate import RunState
from jobring.protocol.models import HandleCallbackParam, RegistryParam
from tests.admin.scheduler.test_monitors import NOW, add_log
from tests.admin.trigger_kit import HOSTS, T0, Env, env_fixture, make_env


class Channel:
    name = "recording"

    def __init__(self) -> None:
        self.sent: list[AlarmContext] = []

    async def send(self, ctx: AlarmContext) -> AlarmOutcome:
        self.sent.append(ctx)
        return AlarmOutcome.SENT


env = env_fixture(HOSTS)


def test_retry_delays() -> None:
    assert [retry_delay_ms(a, 10, "fixed", 0) for a in (1, 2, 3)] == [10_000] * 3
    assert [retry_delay_ms(a, 10, "exponential", 35) for a in (1, 2, 3, 4)] == [
        10_000,
        20_000,
        35_000,
        35_000,
    ]
    assert retry_delay_ms(5, 0, "exponential", 0) == 0


async def _fail(store: Store, log_id: int, at_ms: int, msg: str = "boom") -> None:
    when = datetime.fromtimestamp(at_ms / 1000, tz=UTC)
    await store.logs.record_results([HandleResult(log_id, 500, msg, when)])


async def test_exponential_backoff_then_one_final_alarm(env: Env) -> None:
    """A run failing every time: retried at +2 s, +4 s (exponential), then alarmed once."""
    channel = Channel()
    alarms = AlarmService(env.store, Alarmer([channel]))
    monitor = FailMonitor(env.store, env.trigger, alarms, env.clock)
    job = await env.job(
        executor_fail_retry_count=2, executor_fail_retry_interval_s=2, retry_backoff="exponential"
    )
    first = (await env.trigger.fire(FireRequest(job, TriggerType.MANUAL))).log_ids[0]
    await _fail(env.store, first, T0)
    fired_at: list[int] = []
    for _ in range(80):  # 100 ms steps over 8 s
        await monitor.tick()
        runs = await env.store.logs.for_job(job.id)
        for run in runs:
            if run.handle_code == 0 and run.trigger_code == 200 and run.id != first:
                fired_at.append(env.clock.now_ms() - T0)
                await _fail(env.store, run.id, env.clock.now_ms())
        env.clock.advance(100)
    await alarms.close()
    runs = await env.store.logs.for_job(job.id)
    assert [r.attempt for r in runs] == [1, 2, 3]
    assert [r.retry_of for r in runs] == [None, runs[0].id, runs[1].id]  # each names the run it re-runs
    chain = await env.store.logs.attempts(runs[1].id)
    assert [r.id for r in chain] == [r.id for r in runs]
    assert fired_at == [2000, 6000]  # +2 s after the first failure, +4 s after the second
    assert [r.trigger_type for r in runs] == ["MANUAL", "RETRY", "RETRY"]
    assert [c.log.id for c in channel.sent] == [runs[-1].id]  # only the last failure alarms
    assert [r.alarm_status for r in runs] == [AlarmStatus.NOT_NEEDED] * 2 + [AlarmStatus.SENT]


async def test_a_pending_retry_survives_a_restart(env: Env) -> None:
    job = await env.job(executor_fail_retry_count=1, executor_fail_retry_interval_s=60)
    failed = await add_log(env.store, job.id, group=env.group_id, handle_code=500, retry=1)
    alarms = AlarmService(env.store, Alarmer([]))
    await FailMonitor(env.store, env.trigger, alarms, env.clock).tick()
    assert env.double.runs() == []
    env.clock.advance(61_000)
    # A new monitor (a restarted admin) finds the due retry in the database.
    await FailMonitor(env.store, env.trigger, alarms, env.clock).tick()
    assert len(env.double.runs()) == 1
    entry = await env.store.logs.get(failed)
    assert entry is not None and entry.alarm_status == AlarmStatus.NOT_NEEDED


async def test_the_retry_mark_keeps_a_dispatch_confirmed_after_the_failed_run_was_read(env: Env) -> None:
    """The executor's failure can arrive before the admin records that the run was sent: the
    monitor then reads trigger code 0, and the confirmation lands while it works."""
    job = await env.job(executor_fail_retry_count=1, executor_fail_retry_interval_s=0)
    failed = await add_log(env.store, job.id, group=env.group_id, trigger_code=0, handle_code=500, retry=1)
    read = env.store.logs.failed_unalarmed

    async def read_then_confirm(limit: int = 1000, *, after_id: int = 0) -> list[LogEntry]:
        entries = await read(limit, after_id=after_id)
        await env.store.logs.update_trigger_results([TriggerResult(failed, "http://h1:9999/", 200, "sent")])
        return entries

    env.store.logs.failed_unalarmed = read_then_confirm  # type: ignore[method-assign]
    await FailMonitor(env.store, env.trigger, AlarmService(env.store, Alarmer([])), env.clock).tick()
    entry = await env.store.logs.get(failed)
    assert entry is not None
    assert (entry.trigger_code, entry.executor_address) == (200, "http://h1:9999/")
    assert (entry.trigger_msg or "").startswith("sent\n\n>>>>>>>>>>> Fail retry trigger")
    assert len(env.double.runs()) == 1  # and the retry went out


async def test_a_run_killed_by_a_user_is_not_retried(env: Env) -> None:
    """A kill is a decision: neither the kill API's result nor the executor's callback of that
    kill (which may come first) starts a retry; a COVER_EARLY kill is retried."""
    from jobring.executor import jobworker, worker

    alarms = AlarmService(env.store, Alarmer([]))
    job = await env.job(executor_fail_retry_count=2)
    by_api = await add_log(env.store, job.id, group=env.group_id, handle_code=0, retry=2)
    await _fail(env.store, by_api, T0, "killed by user (admin): ok")
    by_callback = await add_log(env.store, job.id, group=env.group_id, handle_code=0, retry=2)
    await _fail(env.store, by_callback, T0, worker.REASON_KILL + jobworker.SUFFIX_RUNNING)
    covered = await add_log(env.store, job.id, group=env.group_id, handle_code=0, retry=2)
    await _fail(env.store, covered, T0, jobworker.REASON_COVER_EARLY + jobworker.SUFFIX_RUNNING)
    await FailMonitor(env.store, env.trigger, alarms, env.clock).tick()
    await alarms.close()
    retried = [r for r in await env.store.logs.for_job(job.id) if r.trigger_type == "RETRY"]
    assert [r.retry_of for r in retried] == [covered]


async def test_no_retry_of_stopped_jobs_or_old_runs(env: Env) -> None:
    channel = Channel()
    alarms = AlarmService(env.store, Alarmer([channel]))
    stopped = await env.job(schedule_type="CRON", schedule_conf="0 0 * * * ?", trigger_status=0)
    running = await env.job(schedule_type="CRON", schedule_conf="0 0 * * * ?", trigger_status=1)
    a = await add_log(env.store, stopped.id, group=env.group_id, handle_code=500, retry=3)
    b = await add_log(
        env.store, running.id, group=env.group_id, handle_code=500, retry=3, at=NOW - timedelta(days=30)
    )
    c = await add_log(env.store, running.id, group=env.group_id, handle_code=500, retry=3)
    await FailMonitor(env.store, env.trigger, alarms, env.clock, retry_max_age_s=3600).tick()
    await alarms.close()
    assert len(env.double.runs()) == 1  # only c
    assert {ctx.log.id for ctx in channel.sent} == {a, b}  # not retried: those were final
    entry = await env.store.logs.get(c)
    assert entry is not None and entry.alarm_status == AlarmStatus.NOT_NEEDED


async def test_sharded_retry_goes_back_to_its_address_or_reroutes(env: Env) -> None:
    job = await env.job(executor_route_strategy="SHARDING_BROADCAST", executor_fail_retry_count=1)
    alarms = AlarmService(env.store, Alarmer([]))
    await add_log(
        env.store,
        job.id,
        group=env.group_id,
        handle_code=500,
        retry=1,
        sharding="2/3",
        address=env.double.address(0),
    )
    await FailMonitor(env.store, env.trigger, alarms, env.clock).tick()
    (run,) = env.double.runs()
    assert run.address == env.double.address(0) and run.body["broadcastIndex"] == 2
    retry = [e for e in await env.store.logs.for_job(job.id) if e.trigger_type == "RETRY"][0]
    assert retry.attempt == 2 and retry.executor_sharding_param == "2/3"


async def test_deadline_alarm_once_with_two_nodes(env: Env) -> None:
    channel = Channel()
    job = await env.job(deadline_minutes=30)
    late = await add_log(env.store, job.id, group=env.group_id, at=NOW - timedelta(minutes=31))
    on_time = await add_log(env.store, job.id, group=env.group_id, at=NOW - timedelta(minutes=10))
    done = await add_log(
        env.store, job.id, group=env.group_id, at=NOW - timedelta(minutes=40), handle_code=200
    )
    services = [AlarmService(env.store, Alarmer([channel])) for _ in range(2)]
    await asyncio.gather(*(DeadlineMonitor(env.store, s, env.clock).tick() for s in services))
    await asyncio.gather(*(DeadlineMonitor(env.store, s, env.clock).tick() for s in services))
    for s in services:
        await s.close()
    assert [(c.log.id, c.kind) for c in channel.sent] == [(late, AlarmKind.DEADLINE)]
    assert await env.store.alarms.status(late, "deadline") == AlarmStatus.SENT
    assert await env.store.alarms.status(on_time, "deadline") is None
    assert await env.store.alarms.status(done, "deadline") is None


@pytest.mark.parametrize("lone", [False, True], ids=["batch", "lone-result-first"])
async def test_recovery_alarm_after_a_failure(env: Env, monkeypatch: pytest.MonkeyPatch, lone: bool) -> None:
    # lone: a token-checked lone result written before any read (PostgreSQL's way), the job's
    # recovery alarm setting returned by that write.
    async def yes() -> bool:
        return True

    guard = None
    reads: list[int] = []
    if lone:
        real_links = env.store.logs.parent_links

        async def counted(run_ids: Collection[int]) -> dict[int, ParentLink]:
            reads.append(len(run_ids))
            return await real_links(run_ids)

        monkeypatch.setattr(env.store.logs, "writes_lone_result_first", yes)
        monkeypatch.setattr(env.store.logs, "parent_links", counted)
        guard = GroupGuard(only=frozenset({env.group_id}))
    channel = Channel()
    alarms = AlarmService(env.store, Alarmer([channel]))
    callbacks = CallbackService(env.store, env.trigger, env.clock, alarms=alarms)
    job = await env.job(alarm_recovery=True)
    await add_log(env.store, job.id, group=env.group_id, handle_code=500)
    ok1 = await add_log(env.store, job.id, group=env.group_id)
    ok2 = await add_log(env.store, job.id, group=env.group_id)
    await callbacks.handle(
        [HandleCallbackParam(log_id=ok1, log_date_tim=T0, handle_code=200, handle_msg=None)], guard
    )
    await callbacks.handle(
        [HandleCallbackParam(log_id=ok2, log_date_tim=T0, handle_code=200, handle_msg=None)], guard
    )
    await callbacks.wait_idle()
    await alarms.close()
    assert [(c.log.id, c.kind) for c in channel.sent] == [(ok1, AlarmKind.RECOVERY)]
    assert reads == []  # lone: the job's recovery alarm setting came back with each write


async def test_runs_of_a_gone_executor_are_lost_at_once(sqlite_store: Store) -> None:
    env = await make_env(sqlite_store, HOSTS, AddressType.AUTO)
    try:
        store = env.store
        dead, alive = env.double.address(0), env.double.address(1)
        await store.registry.beat("EXECUTOR", "demo-app", alive, NOW - timedelta(seconds=5))
        await store.registry.beat("EXECUTOR", "demo-app", dead, NOW - timedelta(seconds=95))
        on_dead = await add_log(store, 1, group=env.group_id, at=NOW - timedelta(seconds=60), address=dead)
        on_alive = await add_log(store, 1, group=env.group_id, at=NOW - timedelta(seconds=60), address=alive)
        monitor = LostRunMonitor(store, env.clock)
        # A node that just started waits one dead period (90 s) before judging executors:
        # after an outage of the only admin, live executors have not beaten again yet.
        await monitor.tick()
        entry = await store.logs.get(on_dead)
        assert entry is not None and entry.handle_code == 0
        env.clock.advance(90_000)
        await store.registry.beat(
            "EXECUTOR", "demo-app", alive, datetime.fromtimestamp(env.clock.now_ms() / 1000, tz=UTC)
        )
        just_sent = await add_log(
            store,
            1,
            group=env.group_id,
            address=dead,
            at=datetime.fromtimestamp((env.clock.now_ms() - 2000) / 1000, tz=UTC),
        )
        await monitor.tick()
        got = {i: await store.logs.get(i) for i in (on_dead, on_alive, just_sent)}
        lost = got[on_dead]
        assert (
            lost is not None and lost.handle_code == 500 and (lost.handle_msg or "").startswith(LOST_PREFIX)
        )
        assert got[on_alive] is not None and got[on_alive].handle_code == 0  # type: ignore[union-attr]
        assert got[just_sent] is not None and got[just_sent].handle_code == 0  # type: ignore[union-attr]
        # Its state is "lost" (not "failed"): `--state lost` finds it.
        found = await store.logs.list(states=[RunState.LOST], now_ms=env.clock.now_ms())
        assert [e.id for e in found.items] == [on_dead]
        group = await store.groups.get(env.group_id)
        assert group is not None and group.addresses == [alive]  # the retry goes to a live executor
    finally:
        await env.trigger.close()


async def test_group_created_after_registration_gets_addresses_and_disable_sticks(
    sqlite_store: Store,
) -> None:
    from jobring.admin.monitors.monitors import refresh_group_addresses

    env = await make_env(sqlite_store, HOSTS, AddressType.AUTO)
    try:
        store = env.store
        await store.groups.update(JobGroup(id=env.group_id, app_name="demo-app", title="Demo"), NOW)
        registry = RegistryService(store, env.clock, env.trigger)
        a, b = env.double.address(0), env.double.address(1)
        for address in (a, b):
            await registry.register(
                RegistryParam(registry_group="EXECUTOR", registry_key="demo-app", registry_value=address)
            )
        group = await store.groups.get(env.group_id)
        assert group is not None and group.addresses == [a, b]
        assert await store.groups.set_address_disabled(env.group_id, a, True, NOW)
        for _ in range(2):  # heartbeats and registry rounds do not bring it back
            await registry.register(
                RegistryParam(registry_group="EXECUTOR", registry_key="demo-app", registry_value=a)
            )
            await refresh_group_addresses(store, NOW)
        group = await store.groups.get(env.group_id)
        assert group is not None and group.addresses == [b] and group.disabled == [a]
        job = await env.job(executor_route_strategy="FIRST")
        await env.trigger.fire(FireRequest(job, TriggerType.MANUAL))
        assert [r.address for r in env.double.runs()] == [b]
        assert await store.groups.set_address_disabled(env.group_id, a, False, NOW)
        await refresh_group_addresses(store, NOW)
        group = await store.groups.get(env.group_id)
        assert group is not None and group.addresses == [a, b]
    finally:
        await env.trigger.close()


async def test_a_prepared_fire_is_not_routed_to_an_address_that_unregistered(sqlite_store: Store) -> None:
    env = await make_env(sqlite_store, HOSTS, AddressType.AUTO)
    try:
        registry = RegistryService(env.store, env.clock, env.trigger)
        a, b = env.double.address(0), env.double.address(1)
        for address in (a, b):
            await registry.register(
                RegistryParam(registry_group="EXECUTOR", registry_key="demo-app", registry_value=address)
            )
        job = await env.job(executor_route_strategy="FIRST")
        batch = await env.trigger.prepare_batch([FireRequest(job, TriggerType.CRON, planned_time=T0 + 1000)])
        await registry.remove(
            RegistryParam(registry_group="EXECUTOR", registry_key="demo-app", registry_value=a)
        )
        await env.trigger.dispatch_prepared(batch)
        assert [r.address for r in env.double.runs()] == [b]
    finally:
        await env.trigger.close()


async def test_retention_first_start_warns_and_waits_then_deletes(
    env: Env, caplog: pytest.LogCaptureFixture
) -> None:
    store = env.store
    today = NOW.replace(hour=0, minute=0, second=0, microsecond=0)
    old = [await add_log(store, 1, at=today - timedelta(days=40 + i)) for i in range(3)]
    kept = await add_log(store, 1, at=today - timedelta(days=1))
    monitor = RetentionMonitor(store, env.clock, AdminSettings(log_retention_days=30), pause_s=0)
    with caplog.at_level("WARNING"):
        assert await monitor.clean_logs() == 0
    assert "3 run(s) older than 30 days would be deleted" in caplog.text
    assert all(e is not None for e in [await store.logs.get(i) for i in old])
    env.clock.advance(23 * 3600_000)
    assert await RetentionMonitor(store, env.clock, AdminSettings(log_retention_days=30)).clean_logs() == 0
    env.clock.advance(3600_000)
    assert (
        await RetentionMonitor(store, env.clock, AdminSettings(log_retention_days=30), pause_s=0).clean_logs()
        == 3
    )
    assert await store.logs.get(kept) is not None
    assert await store.settings.get(ARMED_SETTING) is not None


async def test_retention_max_runs_per_job(env: Env) -> None:
    store = env.store
    for i in range(12):
        await add_log(store, 1, at=NOW - timedelta(minutes=12 - i))
    for i in range(3):
        await add_log(store, 2, at=NOW - timedelta(minutes=3 - i))
    settings = AdminSettings(
        log_retention_days=30,
        log_retention_max_runs_per_job=5,
        log_retention_confirm=True,
        log_retention_batch=100,
    )
    assert await RetentionMonitor(store, env.clock, settings, pause_s=0).clean_logs() == 7
    runs: list[LogEntry] = await store.logs.for_job(1)
    assert len(runs) == 5 and min(r.trigger_time for r in runs if r.trigger_time) == (
        NOW - timedelta(minutes=5)
    ).replace(tzinfo=None)
    assert len(await store.logs.for_job(2)) == 3


async def test_group_api_fills_addresses_at_once(sqlite_store: Store) -> None:
    from tests.admin.api_harness import api_env

    async with api_env(sqlite_store) as env:
        await env.store.registry.beat(
            "EXECUTOR",
            "late-app",
            "http://10.1.1.1:9999/",
            datetime.fromtimestamp(env.services.now_ms() / 1000, tz=UTC),
        )
        async with env.client("admin") as http:
            created = await http.post("/groups", json={"app_name": "late-app", "title": "Late"})
            assert created.status_code == 201, created.text
            assert created.json()["addresses"] == ["http://10.1.1.1:9999/"]
            gid = created.json()["id"]
            off = await http.post(
                f"/groups/{gid}/addresses/disable", json={"address": "http://10.1.1.1:9999/"}
            )
            assert off.status_code == 200 and off.json()["addresses"] == []
            assert off.json()["disabled_addresses"] == ["http://10.1.1.1:9999/"]
            bad = await http.post(f"/groups/{gid}/addresses/disable", json={"address": "http://10.9.9.9:1/"})
            assert bad.status_code == 422 and bad.json()["field"] == "address"
            on = await http.post(f"/groups/{gid}/addresses/enable", json={"address": "http://10.1.1.1:9999/"})
            assert (
                on.json()["addresses"] == ["http://10.1.1.1:9999/"] and on.json()["disabled_addresses"] == []
            )


async def test_runs_an_executor_no_longer_knows_after_a_restart_are_lost(env: Env) -> None:
    """A jobring executor reports its start instant with each beat (a header): runs sent to
    its address before that are failed once it had time to deliver its spooled results."""
    store = env.store
    registry = RegistryService(store, env.clock, env.trigger)
    address = env.double.address(0)
    param = RegistryParam(registry_group="EXECUTOR", registry_key="demo-app", registry_value=address)
    before = await add_log(store, 1, group=env.group_id, at=NOW - timedelta(seconds=20), address=address)
    await registry.register(param, started_at_ms=T0 - 60_000)  # first seen: up since before the run
    await registry.register(param, started_at_ms=T0 - 60_000)
    monitor = LostRunMonitor(store, env.clock, registry=registry)
    env.clock.advance(31_000)
    await monitor.tick()
    entry = await store.logs.get(before)
    assert entry is not None and entry.handle_code == 0  # it started before the run: it knows it
    await registry.register(param, started_at_ms=T0 + 31_000)  # restarted
    await monitor.tick()
    entry = await store.logs.get(before)
    assert entry is not None and entry.handle_code == 0  # grace: spooled results may still come
    env.clock.advance(30_000)
    await store.registry.beat(
        "EXECUTOR", "demo-app", address, datetime.fromtimestamp(env.clock.now_ms() / 1000, tz=UTC)
    )
    await monitor.tick()
    entry = await store.logs.get(before)
    assert entry is not None and entry.handle_code == 500
    assert (entry.handle_msg or "").startswith(f"{LOST_PREFIX} executor {address} restarted")


async def test_job_api_alarm_and_retry_fields_with_masked_secrets(sqlite_store: Store) -> None:
    from tests.admin.api_harness import api_env

    async with api_env(sqlite_store) as env, env.client("admin") as http:
        body = {
            "job_group": env.group_a,
            "job_desc": "alarmed",
            "executor_handler": "h",
            "alarm_targets": [
                {
                    "kind": "dingtalk",
                    "url": "https://oapi.example.com/robot/send?access_token=t",
                    "secret": "SECreal",
                },
                {"kind": "email", "to": ["ops@example.com"]},
            ],
            "alarm_on": "every_failure",
            "alarm_recovery": True,
            "deadline_minutes": 30,
            "executor_fail_retry_count": 3,
            "executor_fail_retry_interval_s": 10,
            "retry_backoff": "exponential",
            "retry_backoff_max_s": 300,
        }
        created = await http.post("/jobs", json=body)
        assert created.status_code == 201, created.text
        job = created.json()
        assert job["alarm_targets"][0]["secret"] == "******"
        assert (job["alarm_on"], job["deadline_minutes"], job["retry_backoff"]) == (
            "every_failure",
            30,
            "exponential",
        )
        # Sending the masked list back keeps the stored secret.
        patched = await http.patch(f"/jobs/{job['id']}", json={"alarm_targets": job["alarm_targets"]})
        assert patched.status_code == 200, patched.text
        stored = await env.store.jobs.get(job["id"])
        assert stored is not None and "SECreal" in (stored.alarm_targets or "")
        bad = await http.patch(f"/jobs/{job['id']}", json={"alarm_targets": [{"kind": "pager", "url": "x"}]})
        assert bad.status_code == 422 and bad.json()["field"] == "alarm_targets.0.kind"
        bad = await http.patch(f"/jobs/{job['id']}", json={"retry_backoff": "linear"})
        assert bad.status_code == 422
        runs = await http.get("/runs")
        assert runs.status_code == 200


class Hanging:
    name = "hanging"

    def __init__(self) -> None:
        self.started = asyncio.Event()

    async def send(self, ctx: AlarmContext) -> AlarmOutcome:
        self.started.set()
        await asyncio.Event().wait()  # never answers
        return AlarmOutcome.SENT


async def test_a_hanging_channel_neither_blocks_the_monitor_nor_stays_pending(env: Env) -> None:
    channel = Hanging()
    alarms = AlarmService(env.store, Alarmer([channel], timeout=0.2, retries=1, backoff_s=0.01))
    job = await env.job()
    failed = await add_log(env.store, job.id, group=env.group_id, handle_code=500)
    async with asyncio.timeout(2):  # the tick only claims and queues
        await FailMonitor(env.store, env.trigger, alarms, env.clock).tick()
    await asyncio.wait_for(channel.started.wait(), 5)
    await asyncio.wait_for(alarms.wait_idle(), 5)
    await alarms.close()
    entry = await env.store.logs.get(failed)
    assert entry is not None and entry.alarm_status == AlarmStatus.FAILED


async def test_an_alarm_whose_node_died_while_sending_is_sent_once_by_another(env: Env) -> None:
    job = await env.job()
    failed = await add_log(env.store, job.id, group=env.group_id, handle_code=500)
    # The dead node had claimed the alarm 11 minutes ago and never finished it.
    assert await env.store.logs.set_alarm_status(failed, AlarmStatus.DEFAULT, AlarmStatus.LOCKED)
    assert await env.store.alarms.claim(failed, job.id, "failure", T0 - 11 * 60_000)
    recent = await add_log(env.store, job.id, group=env.group_id, handle_code=500)
    assert await env.store.logs.set_alarm_status(recent, AlarmStatus.DEFAULT, AlarmStatus.LOCKED)
    assert await env.store.alarms.claim(recent, job.id, "failure", T0 - 60_000)  # still being sent
    channel = Channel()
    services = [AlarmService(env.store, Alarmer([channel])) for _ in range(2)]
    await asyncio.gather(*(FailMonitor(env.store, env.trigger, s, env.clock).tick() for s in services))
    for s in services:
        await s.close()
    assert [c.log.id for c in channel.sent] == [failed]
    entry = await env.store.logs.get(failed)
    assert entry is not None and entry.alarm_status == AlarmStatus.SENT
    assert await env.store.alarms.status(failed, "failure") == AlarmStatus.SENT
