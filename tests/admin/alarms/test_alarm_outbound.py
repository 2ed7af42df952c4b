"""Alarm POSTs go only where the alarm address policy allows, and to the very address that was
checked. Real HTTP listeners on loopback play an allowed internal gateway (127.0.0.1) and an
internal service an attacker wants to reach (127.0.0.2, same port)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import datetime

import httpx
import pytest

from jobring.admin.alarms import AlarmContext, Alarmer, ChannelFactory, WebhookAlarm
from jobring.admin.alarms.base import AlarmOutcome
from jobring.admin.alarms.outbound import AlarmHttp
from jobring.admin.alarms.targets import dump_targets, parse_targets
from jobring.admin.services.settings import load_settings
from jobring.admin.store.records import JobInfo, LogEntry
from jobring.configbase import ConfigError
from jobring.core.addresses import alarm_policy_from_text
from jobring.core.enums import AlarmStatus
from tests.alarm_receivers import AlarmHttpReceiver
from tests.e2e.admin_nodes import free_port

ALLOW_GATEWAY = alarm_policy_from_text(None, "127.0.0.1")
PUBLIC_IP = "93.184.215.14"


def _ctx(job: JobInfo | None = None) -> AlarmContext:
    entry = LogEntry(id=41, job_group=1, job_id=5, executor_address=None, executor_handler="h",
                     executor_param=None, executor_sharding_param=None, executor_fail_retry_count=0,
                     trigger_time=datetime(2026, 5, 1), trigger_code=500, trigger_msg="no executor",
                     handle_time=None, handle_code=0, handle_msg=None, alarm_status=-1, trigger_type="MANUAL",
                     planned_time=None, dispatch_time=None, admin_node="n1")
    return AlarmContext(job or JobInfo(id=5), entry, None)


@pytest.fixture
async def listeners() -> AsyncIterator[tuple[AlarmHttpReceiver, AlarmHttpReceiver]]:
    gateway = AlarmHttpReceiver("127.0.0.1")
    await gateway.start()
    internal = AlarmHttpReceiver("127.0.0.2", gateway.port)
    await internal.start()
    try:
        yield gateway, internal
    finally:
        await gateway.stop()
        await internal.stop()


class Resolver:
    """A DNS stand-in: its first answer, then ``later`` for every further question."""

    def __init__(self, first: list[str], later: list[str] | None = None) -> None:
        self.first, self.later = first, later if later is not None else first
        self.questions: list[tuple[str, int]] = []

    async def __call__(self, host: str, port: int) -> list[str]:
        self.questions.append((host, port))
        return self.first if len(self.questions) == 1 else self.later


async def test_dns_rebinding_cannot_switch_the_checked_address(
    listeners: tuple[AlarmHttpReceiver, AlarmHttpReceiver],
) -> None:
    gateway, internal = listeners
    dns = Resolver(["127.0.0.1"], later=["127.0.0.2"])
    url = f"http://gw.example.com:{gateway.port}/webhook"
    alarm = WebhookAlarm(url, AlarmHttp(ALLOW_GATEWAY, resolve=dns))
    assert await alarm.send(_ctx()) is AlarmOutcome.SENT
    # One question, and the POST went to its (checked) answer with the URL's Host header: a
    # second lookup by the HTTP client would have been answered 127.0.0.2 (or not at all).
    assert dns.questions == [("gw.example.com", gateway.port)]
    assert [r.host_header for r in gateway.received] == [f"gw.example.com:{gateway.port}"]
    assert internal.received == []
    # The next alarm asks again and gets the internal address: refused before any connection.
    assert await alarm.send(_ctx()) is AlarmOutcome.TRANSIENT
    assert internal.received == [] and len(gateway.received) == 1


async def test_a_name_with_any_internal_answer_is_refused(
    listeners: tuple[AlarmHttpReceiver, AlarmHttpReceiver],
) -> None:
    gateway, internal = listeners
    for answers in (["127.0.0.2"], [PUBLIC_IP, "127.0.0.2"], ["::ffff:127.0.0.2"], ["169.254.169.254"],
                    ["::1"], []):
        http = AlarmHttp(alarm_policy_from_text(None, None), resolve=Resolver(answers))
        alarm = WebhookAlarm(f"http://hooks.example.com:{gateway.port}/webhook", http)
        assert await alarm.send(_ctx()) is AlarmOutcome.TRANSIENT, answers
    assert gateway.received == [] and internal.received == []


async def test_an_internal_target_fails_exactly_like_an_unreachable_one(
    listeners: tuple[AlarmHttpReceiver, AlarmHttpReceiver],
) -> None:
    gateway, internal = listeners
    closed = free_port()

    def job(job_id: int, url: str) -> JobInfo:
        return JobInfo(id=job_id, alarm_targets=dump_targets(parse_targets([{"kind": "slack", "url": url}])))

    # The default policy: both listeners are internal services that would answer 200.
    alarmer = Alarmer(for_job=ChannelFactory(timeout=2).for_job, retries=1, backoff_s=0.01)
    answering = [await alarmer.alarm(_ctx(job(i, f"{base}/slack")))
                 for i, base in enumerate((gateway.base, internal.base, f"http://localhost:{gateway.port}"))]
    # With the gateway allowed, a port where nothing listens: a delivery failure anyone can cause.
    factory = ChannelFactory(timeout=2, policy=ALLOW_GATEWAY)
    allowed = Alarmer(for_job=factory.for_job, retries=1, backoff_s=0.01)
    unreachable = await allowed.alarm(_ctx(job(9, f"http://127.0.0.1:{closed}/slack")))
    assert answering == [AlarmStatus.FAILED] * 3 and unreachable is AlarmStatus.FAILED
    assert gateway.received == [] and internal.received == []
    # The same target, allowed, is delivered (so the refusal above is the policy, not the set-up).
    assert await allowed.alarm(_ctx(job(1, f"{gateway.base}/slack"))) is AlarmStatus.SENT
    assert len(gateway.of("slack")) == 1


async def test_https_is_sent_to_the_checked_address_with_the_name_for_tls() -> None:
    seen: list[httpx.Request] = []

    def record(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(302, headers={"Location": "http://127.0.0.2/"})

    http = AlarmHttp(transport=httpx.MockTransport(record), resolve=Resolver([PUBLIC_IP]))
    # A redirect is not followed (it would reach an unchecked address): a failed delivery.
    assert await WebhookAlarm("https://hooks.example.com/hook?k=1", http).send(_ctx()) is AlarmOutcome.FAILED
    (request,) = seen
    assert (request.url.host, request.url.port, request.url.raw_path) == (PUBLIC_IP, None, b"/hook?k=1")
    assert request.headers["host"] == "hooks.example.com"
    assert request.extensions["sni_hostname"] == "hooks.example.com"


def test_admin_configured_targets_pass_the_policy_unless_allowed() -> None:
    for environ, where in (
        ({"JOBRING_ALARM_WEBHOOK_URL": "http://127.0.0.1:9000/hook"}, "alarm_webhook_url"),
        ({"JOBRING_ALARM_WEBHOOK_URL": "http://metadata.google.internal/"}, "alarm_webhook_url"),
        ({"JOBRING_ALARM_DEFAULT_TARGETS": '[{"kind": "slack", "url": "http://10.1.2.3/s"}]'},
         "alarm_default_targets.0.url"),
        ({"JOBRING_ALARM_TARGET_ALLOW": "10.0.0.0/8, not a host"}, "alarm_target_allow"),
        ({"JOBRING_ALARM_TARGET_ALLOW": "169.254.0.0/16",
          "JOBRING_ALARM_WEBHOOK_URL": "http://169.254.169.254/"}, "alarm_webhook_url"),
    ):
        with pytest.raises(ConfigError, match=where.replace(".", r"\.")):
            load_settings(environ=environ)
    allowed = load_settings(environ={"JOBRING_ALARM_WEBHOOK_URL": "http://127.0.0.1:9000/hook",
                                     "JOBRING_ALARM_DEFAULT_TARGETS": '[{"kind": "slack", "url": "http://10.1.2.3/s"}]',
                                     "JOBRING_ALARM_TARGET_ALLOW": "127.0.0.1, 10.1.0.0/16"})
    assert allowed.alarm_target_allow == "127.0.0.1, 10.1.0.0/16"
