"""Every alarm channel against real local receivers: message shapes, signatures, retries."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import datetime

import pytest

from jobring.admin.alarms import AlarmContext, Alarmer, AlarmKind, ChannelFactory, TargetError, parse_targets
from jobring.admin.alarms.smtp import SmtpConfig
from jobring.admin.alarms.targets import dump_targets, job_targets
from jobring.admin.services.settings import AdminSettings, load_settings
from jobring.admin.store.records import JobGroup, JobInfo, LogEntry
from jobring.configbase import ConfigError
from jobring.core.enums import AlarmStatus
from tests.alarm_receivers import RECEIVERS_POLICY, AlarmHttpReceiver, SmtpReceiver

NOW = datetime(2026, 11, 23, 12, 0, 0)


@pytest.fixture
async def http() -> AsyncIterator[AlarmHttpReceiver]:
    receiver = AlarmHttpReceiver()
    await receiver.start()
    try:
        yield receiver
    finally:
        await receiver.stop()


@pytest.fixture
async def smtp() -> AsyncIterator[SmtpReceiver]:
    receiver = SmtpReceiver()
    await receiver.start()
    try:
        yield receiver
    finally:
        await receiver.stop()


def _ctx(job: JobInfo, kind: AlarmKind = AlarmKind.FAILURE) -> AlarmContext:
    entry = LogEntry(
        id=77,
        job_group=1,
        job_id=job.id,
        executor_address="http://10.0.0.7:9999/",
        executor_handler="h",
        executor_param=None,
        executor_sharding_param=None,
        executor_fail_retry_count=0,
        trigger_time=NOW,
        trigger_code=200,
        trigger_msg="ok",
        handle_time=NOW,
        handle_code=500,
        handle_msg="boom: division by zero",
        alarm_status=-1,
        trigger_type="CRON",
        planned_time=None,
        dispatch_time=None,
        admin_node="n1",
        attempt=3,
    )
    return AlarmContext(
        job,
        entry,
        JobGroup(id=1, app_name="billing", title="Billing"),
        kind,
        "https://jobring.example.com/console",
    )


async def test_each_chat_channel_sends_its_documented_shape_with_valid_signature(
    http: AlarmHttpReceiver, smtp: SmtpReceiver
) -> None:
    targets = [*http.targets(), {"kind": "email", "to": ["ops@example.com", "dev@example.com"]}]
    job = JobInfo(
        id=5, job_group=1, job_desc="nightly export", alarm_targets=dump_targets(parse_targets(targets))
    )
    factory = ChannelFactory(smtp=SmtpConfig(host="127.0.0.1", port=smtp.port, sender="jobring@example.com"),
                             policy=RECEIVERS_POLICY)
    alarmer = Alarmer(for_job=factory.for_job, retries=0)
    assert await alarmer.alarm(_ctx(job)) is AlarmStatus.SENT
    assert sorted(r.kind for r in http.received) == ["dingtalk", "feishu", "slack", "webhook", "wecom"]
    assert all(r.signature_ok is not False for r in http.received)
    (ding,) = http.of("dingtalk")
    assert "Open the run](https://jobring.example.com/console/runs/77)" in ding.body["markdown"]["text"]
    (slack,) = http.of("slack")
    assert "job 5 (nightly export), run 77" in slack.body["text"]
    assert slack.body["blocks"][-1]["elements"][0]["url"] == "https://jobring.example.com/console/runs/77"
    (feishu,) = http.of("feishu")
    text = feishu.body["content"]["text"]
    for part in (
        "Billing (billing)",
        "Attempt: 3",
        "http://10.0.0.7:9999/",
        "boom: division by zero",
        "https://jobring.example.com/console/runs/77",
    ):
        assert part in text
    (hook,) = http.of("webhook")
    assert hook.body["logId"] == 77 and hook.body["attempt"] == 3 and hook.body["kind"] == "failure"
    assert sorted(m["To"] for m in smtp.messages) == ["dev@example.com", "ops@example.com"]
    assert "HandleCode=500" in smtp.messages[0].get_payload()


async def test_a_bad_signature_is_a_failed_alarm(http: AlarmHttpReceiver) -> None:
    job = JobInfo(
        id=5,
        alarm_targets=dump_targets(
            parse_targets([{"kind": "dingtalk", "url": f"{http.base}/dingtalk", "secret": "SECwrong"}])
        ),
    )
    alarmer = Alarmer(for_job=ChannelFactory(policy=RECEIVERS_POLICY).for_job, retries=0)
    assert await alarmer.alarm(_ctx(job)) is AlarmStatus.FAILED
    assert http.received[0].signature_ok is False


async def test_transient_failures_are_retried_then_sent(http: AlarmHttpReceiver) -> None:
    http.fail_next = 2
    job = JobInfo(
        id=5, alarm_targets=dump_targets(parse_targets([{"kind": "slack", "url": f"{http.base}/slack"}]))
    )
    alarmer = Alarmer(for_job=ChannelFactory(policy=RECEIVERS_POLICY).for_job, retries=2, backoff_s=0.01)
    assert await alarmer.alarm(_ctx(job, AlarmKind.RECOVERY)) is AlarmStatus.SENT
    assert len(http.of("slack")) == 1 and "Recovered" in http.of("slack")[0].body["text"]


async def test_unreachable_channel_fails_within_its_timeout() -> None:
    job = JobInfo(
        id=5, alarm_targets=dump_targets(parse_targets([{"kind": "webhook", "url": "http://127.0.0.1:9/x"}]))
    )
    factory = ChannelFactory(timeout=0.5, policy=RECEIVERS_POLICY)  # loopback admitted: nothing listens
    alarmer = Alarmer(for_job=factory.for_job, retries=1, backoff_s=0.01, timeout=1.0)
    assert await alarmer.alarm(_ctx(job)) is AlarmStatus.FAILED


def test_target_validation_names_the_bad_part() -> None:
    with pytest.raises(TargetError) as bad_kind:
        parse_targets([{"kind": "pager"}])
    assert bad_kind.value.field == "alarm_targets.0.kind"
    with pytest.raises(TargetError) as bad_url:
        parse_targets('[{"kind": "slack", "url": "file:///etc/passwd"}]')
    assert bad_url.value.field == "alarm_targets.0.url"
    with pytest.raises(TargetError):
        parse_targets([{"kind": "wecom", "url": "https://x/", "secret": "s"}])  # WeCom has no secret
    with pytest.raises(TargetError):
        parse_targets("{not json")
    assert parse_targets(None) == [] and parse_targets("") == []
    # XXL-JOB's alarm_email is an email target.
    targets = job_targets(JobInfo(alarm_email="a@x, b@x", alarm_targets=None))
    assert [(t.kind, t.config["to"]) for t in targets] == [("email", ["a@x", "b@x"])]


def test_default_targets_from_env_json_or_toml(tmp_path: object) -> None:
    settings = load_settings(
        environ={"JOBRING_ALARM_DEFAULT_TARGETS": '[{"kind": "slack", "url": "https://hooks.slack.com/s"}]'}
    )
    assert parse_targets(settings.alarm_default_targets)[0].kind == "slack"
    from pathlib import Path

    assert isinstance(tmp_path, Path)
    config = tmp_path / "jobring.toml"
    config.write_text(
        '[[admin.alarm_default_targets]]\nkind = "wecom"\nurl = "https://qyapi.weixin.qq.com/w"\n',
        encoding="utf-8",
    )
    settings = load_settings(config, environ={})
    assert parse_targets(settings.alarm_default_targets)[0].kind == "wecom"
    with pytest.raises(ConfigError, match="alarm_default_targets"):
        load_settings(environ={"JOBRING_ALARM_DEFAULT_TARGETS": '[{"kind": "x"}]'})
    assert AdminSettings().alarm_default_targets is None


@pytest.mark.parametrize("brk", ["\r\n", "\n", "\r", "\x0b", "\x0c", "\x1c", "\x85", "\u2028", "\u2029"])
async def test_a_line_break_in_stored_values_neither_injects_a_header_nor_stops_the_mail(
    smtp: SmtpReceiver, brk: str
) -> None:
    # Values an adopted XXL-JOB database may hold: the API refuses them on new writes.
    job = JobInfo(id=5, job_group=1, job_desc=f"nightly{brk}Bcc: evil@example.com",
                  alarm_email=f"ops@example.com, dev@example.com{brk}Bcc: evil@example.com,  ,")
    config = SmtpConfig(host="127.0.0.1", port=smtp.port, sender=f"jobring@example.com{brk}X: y")
    factory = ChannelFactory(smtp=config)
    alarmer = Alarmer(for_job=factory.for_job, retries=0)
    assert await alarmer.alarm(_ctx(job)) is AlarmStatus.SENT
    (message,) = smtp.messages  # the recipient with a line break is skipped
    assert message["To"] == "ops@example.com"
    names = {name.lower() for name in message}
    assert "bcc" not in names and "x" not in names  # no header injected by the subject or sender
    assert "(nightly Bcc: evil@example.com)" in " ".join(message["Subject"].split())


def test_email_targets_and_urls_must_be_on_one_line() -> None:
    for bad in ("ops@example.com\nBcc: evil@example.com", "ops @example.com", "ops@\u2028example.com"):
        with pytest.raises(TargetError) as refused:
            parse_targets([{"kind": "email", "to": [bad]}])
        assert refused.value.field == "alarm_targets.0.to"
    with pytest.raises(TargetError) as bad_url:
        parse_targets([{"kind": "slack", "url": "https://hooks.example.com/x\r\nHost: evil"}])
    assert bad_url.value.field == "alarm_targets.0.url"
    padded = parse_targets([{"kind": "email", "to": [" ops@example.com "]}])
    assert padded[0].config["to"] == ["ops@example.com"]
