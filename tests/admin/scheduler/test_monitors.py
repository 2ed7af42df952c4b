from __future__ import annotations

import asyncio
import smtplib
from datetime import UTC, datetime, timedelta
from email.message import EmailMessage
from typing import Any

import httpx
import orjson

from jobring.admin.alarms import AlarmContext, Alarmer, AlarmOutcome, AlarmService, EmailAlarm, WebhookAlarm
from jobring.admin.alarms.mail import recipients
from jobring.admin.alarms.outbound import AlarmHttp
from jobring.admin.alarms.setup import alarmer_from_settings
from jobring.admin.alarms.smtp import SmtpConfig
from jobring.admin.monitors.failures import FailMonitor
from jobring.admin.monitors.monitors import (
    MSG_RESULT_LOST,
    LostRunMonitor,
    Monitors,
    RegistryMonitor,
    ReportMonitor,
)
from jobring.admin.monitors.retention import RetentionMonitor
from jobring.admin.services.settings import AdminSettings
from jobring.admin.store import NewAuditEvent, Store
from jobring.admin.store.records import JobGroup, NewLog
from jobring.admin.trigger.trigger import TriggerService
from jobring.core.enums import AddressType, AlarmStatus
from tests.admin.trigger_kit import HOSTS, T0, Env, env_fixture

NOW = datetime.fromtimestamp(T0 / 1000, tz=UTC)


env = env_fixture(HOSTS)


async def add_log(store: Store, job_id: int, *, group: int = 1, at: datetime = NOW, trigger_code: int = 200,
                  handle_code: int = 0, retry: int = 0, address: str | None = None,
                  sharding: str | None = None) -> int:
    (log_id,) = await store.logs.insert_fires([NewLog(
        job_group=group, job_id=job_id, trigger_time=at, trigger_code=trigger_code, handle_code=handle_code,
        executor_fail_retry_count=retry, executor_address=address, executor_param="p",
        executor_sharding_param=sharding, trigger_msg="first trigger")])
    assert log_id is not None
    return log_id


# -- registry monitor ----------------------------------------------------------------------

async def test_registry_monitor_drops_dead_beats_and_refreshes_auto_groups(env: Env) -> None:
    store = env.store
    auto = await store.groups.create(JobGroup(app_name="auto-app", title="A", address_type=AddressType.AUTO,
                                              address_list="http://stale:1/"), NOW)
    manual = await store.groups.create(
        JobGroup(app_name="auto-app", title="M", address_type=AddressType.MANUAL, address_list="http://fixed:1/"),
        NOW)
    await store.registry.beat("EXECUTOR", "auto-app", "http://b:1/", NOW - timedelta(seconds=10))
    await store.registry.beat("EXECUTOR", "auto-app", "http://a:1/", NOW - timedelta(seconds=80))
    await store.registry.beat("EXECUTOR", "auto-app", "http://dead:1/", NOW - timedelta(seconds=91))
    await RegistryMonitor(store, env.clock).tick()
    group = await store.groups.get(auto)
    assert group is not None and group.address_list == "http://a:1/,http://b:1/"
    fixed = await store.groups.get(manual)
    assert fixed is not None and fixed.address_list == "http://fixed:1/"
    assert [e.registry_value for e in await store.registry.entries("auto-app")] == ["http://a:1/", "http://b:1/"]
    # Later every beat is old: the auto group has no address left.
    env.clock.advance(120_000)
    await RegistryMonitor(store, env.clock).tick()
    group = await store.groups.get(auto)
    assert group is not None and group.address_list is None


# -- fail monitor ----------------------------------------------------------------------------


async def fail_tick(env: Env, alarmer: Alarmer, trigger: TriggerService | None = None) -> None:
    """One fail-monitor round, then wait for its alarms to be sent."""
    alarms = AlarmService(env.store, alarmer)
    await FailMonitor(env.store, trigger or env.trigger, alarms, env.clock).tick()
    await alarms.close()

class FakeChannel:
    name = "fake"

    def __init__(self, outcome: AlarmOutcome) -> None:
        self.outcome = outcome
        self.sent: list[AlarmContext] = []

    async def send(self, ctx: AlarmContext) -> AlarmOutcome:
        self.sent.append(ctx)
        return self.outcome


async def test_fail_monitor_retries_with_one_less_and_alarms(env: Env) -> None:
    job = await env.job(alarm_email="ops@example.com", alarm_on="every_failure")
    failed = await add_log(env.store, job.id, group=env.group_id, handle_code=500, retry=2)
    channel = FakeChannel(AlarmOutcome.SENT)
    await fail_tick(env, Alarmer([channel]))
    entry = await env.store.logs.get(failed)
    assert entry is not None and entry.alarm_status == AlarmStatus.SENT
    assert (entry.trigger_msg or "").endswith(">>>>>>>>>>> Fail retry trigger <<<<<<<<<<<")
    assert [c.log.id for c in channel.sent] == [failed]
    retry = [e for e in await env.store.logs.for_job(job.id) if e.id != failed]
    assert len(retry) == 1 and retry[0].trigger_type == "RETRY"
    assert retry[0].executor_fail_retry_count == 1 and retry[0].executor_param == "p"
    assert env.double.runs()[0].body["executorParams"] == "p"
    # A second round finds nothing new (the retry succeeded at trigger level).
    await fail_tick(env, Alarmer([channel]))
    assert len(channel.sent) == 1


async def test_fail_monitor_statuses(env: Env) -> None:
    job = await env.job()
    trig_fail = await add_log(env.store, job.id, trigger_code=500)
    handle_fail = await add_log(env.store, job.id, handle_code=502)
    gone_job = await add_log(env.store, 987654, handle_code=500)
    running = await add_log(env.store, job.id)
    await fail_tick(env, Alarmer([FakeChannel(AlarmOutcome.FAILED)]))
    status = {}
    for i in (trig_fail, handle_fail, gone_job, running):
        entry = await env.store.logs.get(i)
        assert entry is not None
        status[i] = entry.alarm_status
    assert status == {trig_fail: AlarmStatus.FAILED, handle_fail: AlarmStatus.FAILED,
                      gone_job: AlarmStatus.NOT_NEEDED, running: AlarmStatus.DEFAULT}
    assert env.double.runs() == []  # no retry count: no retry


async def test_no_alarm_channel_means_not_needed(env: Env) -> None:
    job = await env.job()
    failed = await add_log(env.store, job.id, handle_code=500)
    await fail_tick(env, Alarmer([]))
    entry = await env.store.logs.get(failed)
    assert entry is not None and entry.alarm_status == AlarmStatus.NOT_NEEDED


async def test_concurrent_fail_monitors_retry_and_alarm_once(env: Env) -> None:
    job = await env.job(alarm_on="every_failure")
    for _ in range(5):
        await add_log(env.store, job.id, group=env.group_id, handle_code=500, retry=1)
    channel = FakeChannel(AlarmOutcome.SENT)
    nodes = [env.service(f"node-{i}") for i in range(3)]
    try:
        await asyncio.gather(*(fail_tick(env, Alarmer([channel]), n) for n in nodes))
    finally:
        for n in nodes:
            await n.close()
    assert len(channel.sent) == 5
    assert len(env.double.runs()) == 5
    assert sum(e.trigger_type == "RETRY" for e in await env.store.logs.for_job(job.id)) == 5


async def test_retry_of_a_broadcast_shard_keeps_the_shard(env: Env) -> None:
    job = await env.job(executor_route_strategy="SHARDING_BROADCAST")
    await add_log(env.store, job.id, group=env.group_id, handle_code=500, retry=1, sharding="1/3")
    await fail_tick(env, Alarmer([]))
    (run,) = env.double.runs()
    assert run.address == env.double.address(1)
    assert (run.body["broadcastIndex"], run.body["broadcastTotal"]) == (1, 3)


# -- lost-run monitor --------------------------------------------------------------------------

async def test_lost_run_monitor_fails_old_runs_on_dead_executors(env: Env) -> None:
    store = env.store
    old = NOW - timedelta(minutes=11)
    await store.registry.beat("EXECUTOR", "demo-app", "http://alive:1/", NOW - timedelta(seconds=5))
    lost = await add_log(store, 1, at=old, address="http://dead:1/")
    alive = await add_log(store, 1, at=old, address="http://alive:1/")
    recent = await add_log(store, 1, at=NOW - timedelta(minutes=5), address="http://dead:1/")
    finished = await add_log(store, 1, at=old, address="http://dead:1/", handle_code=200)
    await LostRunMonitor(store, env.clock).tick()
    got = {i: await store.logs.get(i) for i in (lost, alive, recent, finished)}
    assert got[lost] is not None and got[lost].handle_code == 500 and got[lost].handle_msg == MSG_RESULT_LOST
    assert all(got[i] is not None and got[i].handle_code == c  # type: ignore[union-attr]
               for i, c in ((alive, 0), (recent, 0), (finished, 200)))


async def test_recorded_but_undispatched_fires_fail_and_get_retried(env: Env) -> None:
    store = env.store
    job = await env.job()
    old = NOW - timedelta(minutes=11)
    stranded = await add_log(store, job.id, group=env.group_id, at=old, trigger_code=0, retry=1)
    fresh = await add_log(store, job.id, at=NOW - timedelta(minutes=1), trigger_code=0)
    await LostRunMonitor(store, env.clock).tick()
    a, b = await store.logs.get(stranded), await store.logs.get(fresh)
    assert a is not None and a.trigger_code == 500 and "never dispatched" in (a.trigger_msg or "")
    assert b is not None and b.trigger_code == 0
    # A second node doing the same changes nothing more.
    await LostRunMonitor(store, env.clock).tick()
    # The fail monitor then retries it like any failed trigger.
    await fail_tick(env, Alarmer([]))
    retries = [e for e in await store.logs.for_job(job.id) if e.trigger_type == "RETRY"]
    assert len(retries) == 1 and retries[0].trigger_code == 200


# -- report monitor ----------------------------------------------------------------------------

async def test_report_monitor_counts_last_three_days(env: Env) -> None:
    store = env.store
    today = NOW.replace(hour=0, minute=0, second=0, microsecond=0)
    await add_log(store, 1, at=today + timedelta(hours=1), handle_code=200)
    await add_log(store, 1, at=today + timedelta(hours=1), handle_code=500)
    await add_log(store, 1, at=today + timedelta(hours=1))
    await add_log(store, 1, at=today - timedelta(days=2, hours=-1), handle_code=200)
    await add_log(store, 1, at=today - timedelta(days=3, hours=-1), handle_code=200)  # outside
    await ReportMonitor(store, env.clock).refresh_report()
    days = {d.day.date(): (d.running, d.success, d.fail) for d in
            await store.reports.range(today - timedelta(days=5), today)}
    assert days[today.date()] == (1, 1, 1)
    assert days[(today - timedelta(days=2)).date()] == (0, 1, 0)
    assert days.get((today - timedelta(days=3)).date(), (0, 0, 0)) == (0, 0, 0)


async def test_retention_deletes_old_logs_once_a_day_and_never_below_7_days(env: Env) -> None:
    store = env.store
    today = NOW.replace(hour=0, minute=0, second=0, microsecond=0)
    old = await add_log(store, 1, at=today - timedelta(days=8, hours=1))
    kept = await add_log(store, 1, at=today - timedelta(days=6))
    assert await RetentionMonitor(store, env.clock, AdminSettings(log_retention_days=3)).clean_logs() == 0
    settings = AdminSettings(log_retention_days=7, log_retention_confirm=True)
    monitor = RetentionMonitor(store, env.clock, settings)
    assert await monitor.clean_logs() == 1
    assert await store.logs.get(old) is None and await store.logs.get(kept) is not None
    await add_log(store, 1, at=today - timedelta(days=9))
    env.clock.advance(3600_000)
    assert await monitor.clean_logs() == 0  # already cleaned today
    env.clock.advance(24 * 3600_000)
    assert await monitor.clean_logs() == 1


async def test_audit_retention_once_a_day_and_never_below_7_days(env: Env) -> None:
    store = env.store
    day = 24 * 3600_000

    async def add(at_ms: int) -> int:
        event = NewAuditEvent(at=at_ms, actor="a", actor_kind="session", action="job.start")
        return await store.audit.insert(event)

    old = await add(T0 - 8 * day)
    kept = await add(T0 - 5 * day)
    monitor = RetentionMonitor(store, env.clock, AdminSettings(audit_retention_days=1))  # 7 applied
    assert await monitor.clean_audit() == 1
    assert [e.id for e in (await store.audit.list()).items] == [kept] and old < kept
    await add(T0 - 9 * day)
    env.clock.advance(3600_000)
    assert await monitor.clean_audit() == 0  # already cleaned today
    env.clock.advance(day)
    assert await monitor.clean_audit() == 1
    default = RetentionMonitor(store, env.clock, AdminSettings())  # 180 days
    await add(T0 - 178 * day)
    await add(T0 - 182 * day)
    assert await default.clean_audit() == 1


async def test_monitors_start_and_stop(env: Env) -> None:
    monitors = Monitors.create(env.store, env.trigger, AlarmService(env.store, Alarmer([])), env.clock,
                               AdminSettings())
    monitors.start()
    tasks = [m._task for m in monitors.monitors]
    assert all(t is not None and not t.done() for t in tasks)
    await monitors.stop()
    assert all(m._task is None for m in monitors.monitors)
    assert all(t is not None and t.cancelled() for t in tasks)


# -- alarm channels ----------------------------------------------------------------------------

def _ctx(alarm_email: str | None = "a@example.com, b@example.com,a@example.com") -> AlarmContext:
    from jobring.admin.store.records import JobInfo, LogEntry

    job = JobInfo(id=4, job_group=1, job_desc="nightly", alarm_email=alarm_email)
    entry = LogEntry(id=9, job_group=1, job_id=4, executor_address="http://e:1/", executor_handler="h",
                     executor_param=None, executor_sharding_param=None, executor_fail_retry_count=0,
                     trigger_time=NOW.replace(tzinfo=None), trigger_code=500, trigger_msg="no address",
                     handle_time=None, handle_code=0, handle_msg=None, alarm_status=-1, trigger_type="CRON",
                     planned_time=None, dispatch_time=None, admin_node=None)
    return AlarmContext(job, entry, JobGroup(id=1, app_name="demo", title="Demo"))


class FakeSmtp:
    instances: list[FakeSmtp] = []

    def __init__(self, config: SmtpConfig, fail: bool = False) -> None:
        self.config = config
        self.fail = fail
        self.sent: list[EmailMessage] = []
        self.logged_in: tuple[str, str] | None = None
        FakeSmtp.instances.append(self)

    def __enter__(self) -> FakeSmtp:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def starttls(self) -> None:
        return None

    def login(self, user: str, password: str) -> None:
        self.logged_in = (user, password)

    def send_message(self, message: EmailMessage) -> None:
        if self.fail:
            raise smtplib.SMTPRecipientsRefused({})
        self.sent.append(message)


async def test_email_alarm_one_message_per_distinct_address() -> None:
    FakeSmtp.instances.clear()
    config = SmtpConfig(host="mail", username="u", password="p", sender="jobring@example.com")
    alarm = EmailAlarm(config, connect=FakeSmtp)  # type: ignore[arg-type]
    assert await alarm.send(_ctx()) is AlarmOutcome.SENT
    (smtp,) = FakeSmtp.instances
    assert smtp.logged_in == ("u", "p")
    assert [m["To"] for m in smtp.sent] == ["a@example.com", "b@example.com"]
    body = smtp.sent[0].get_content()
    assert "Alarm Job LogId=9" in body and "TriggerMsg=" in body and "no address" in body
    assert await alarm.send(_ctx(alarm_email=" ")) is AlarmOutcome.NOT_APPLICABLE
    failing = EmailAlarm(config, connect=lambda c: FakeSmtp(c, fail=True))  # type: ignore[arg-type,return-value]
    assert await failing.send(_ctx()) is AlarmOutcome.FAILED
    assert recipients("x@y, ,x@y,z@w") == ["x@y", "z@w"]


async def test_webhook_alarm_posts_json_and_reports_failures() -> None:
    seen: list[dict[str, Any]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(orjson.loads(request.content))
        return httpx.Response(204 if len(seen) == 1 else 503)

    async def public(host: str, port: int) -> list[str]:
        return ["93.184.215.14"]

    def http(transport: httpx.MockTransport) -> AlarmHttp:
        return AlarmHttp(transport=transport, resolve=public)

    alarm = WebhookAlarm("http://hooks.example.com/alarm", http(httpx.MockTransport(handler)))
    assert await alarm.send(_ctx()) is AlarmOutcome.SENT
    assert seen[0]["logId"] == 9 and seen[0]["jobId"] == 4 and seen[0]["triggerCode"] == 500
    assert "Alarm Job LogId=9" in seen[0]["text"]
    assert await alarm.send(_ctx()) is AlarmOutcome.TRANSIENT  # 503: worth retrying

    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("refused")

    unreachable = WebhookAlarm("http://hooks.example.com/", http(httpx.MockTransport(refuse)))
    assert await unreachable.send(_ctx()) is AlarmOutcome.TRANSIENT


def test_alarmer_from_settings() -> None:
    assert alarmer_from_settings(AdminSettings()).channels == []
    alarmer = alarmer_from_settings(AdminSettings(smtp_host="mail", alarm_webhook_url="http://h/"))
    assert [c.name for c in alarmer.channels] == ["webhook"]
    # Email goes to each job's own addresses (alarm_email, email targets).
    from jobring.admin.store.records import JobInfo

    assert [c.name for c in alarmer.channels_for(JobInfo(id=1, alarm_email="a@b"))] == ["webhook", "email"]


async def test_alarmer_combines_outcomes() -> None:
    ctx = _ctx()
    assert await Alarmer([FakeChannel(AlarmOutcome.NOT_APPLICABLE)]).alarm(ctx) is AlarmStatus.NOT_NEEDED
    assert await Alarmer([FakeChannel(AlarmOutcome.SENT), FakeChannel(AlarmOutcome.NOT_APPLICABLE)]).alarm(
        ctx) is AlarmStatus.SENT
    assert await Alarmer([FakeChannel(AlarmOutcome.SENT), FakeChannel(AlarmOutcome.FAILED)]).alarm(
        ctx) is AlarmStatus.FAILED
