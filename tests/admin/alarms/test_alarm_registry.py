"""Alarm channel kinds are registered by their own modules: a kind defined here (no shared
module edited) is validated, built and used end to end by the alarm service."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import pytest

from jobring.admin.alarms import (
    AlarmContext,
    AlarmOutcome,
    AlarmService,
    ChannelFactory,
    TargetError,
    channel_kinds,
    parse_targets,
    register_channel,
    unregister_channel,
)
from jobring.admin.alarms.registry import TargetError as RegistryTargetError
from jobring.admin.alarms.setup import alarmer_from_settings
from jobring.admin.monitors.failures import FailMonitor
from jobring.admin.services.settings import load_settings
from jobring.configbase import ConfigError
from jobring.core.enums import AlarmStatus
from tests.admin.scheduler.test_monitors import add_log
from tests.admin.trigger_kit import HOSTS, Env, env_fixture


class PagerAlarm:
    """A channel kind unknown to jobring: it records what it was asked to send."""

    name = "pager"
    delivered: list[tuple[str, int, float]] = []

    def __init__(self, number: str, timeout: float) -> None:
        self.number = number
        self.timeout = timeout

    async def send(self, ctx: AlarmContext) -> AlarmOutcome:
        PagerAlarm.delivered.append((self.number, ctx.log.id, self.timeout))
        return AlarmOutcome.SENT


def _pager_config(where: str, raw: Mapping[str, Any]) -> dict[str, Any]:
    number = raw["number"]
    if not isinstance(number, str) or not number.isdigit():
        raise RegistryTargetError(f"{where}.number", "must be digits")
    return {"number": number}


@pytest.fixture
def pager() -> Iterator[None]:
    @register_channel("pager", required={"number"}, check=_pager_config)
    def _build(config: Mapping[str, Any], factory: ChannelFactory) -> PagerAlarm:
        return PagerAlarm(config["number"], factory.timeout)

    PagerAlarm.delivered = []
    try:
        yield
    finally:
        unregister_channel("pager")


env = env_fixture(HOSTS)


def test_built_in_kinds_are_registered_by_their_modules() -> None:
    assert set(channel_kinds()) == {"email", "webhook", "slack", "dingtalk", "wecom", "feishu"}


@pytest.mark.usefixtures("pager")
def test_a_registered_kind_is_validated_by_its_own_check() -> None:
    assert "pager" in channel_kinds()
    (target,) = parse_targets('[{"kind": "pager", "number": "0123"}]')
    assert (target.kind, dict(target.config)) == ("pager", {"number": "0123"})
    with pytest.raises(TargetError, match=r"alarm_targets\.0\.number: must be digits"):
        parse_targets('[{"kind": "pager", "number": "call me"}]')
    with pytest.raises(TargetError, match="pager target needs number"):
        parse_targets('[{"kind": "pager"}]')
    with pytest.raises(TargetError, match="unknown key"):
        parse_targets('[{"kind": "pager", "number": "1", "url": "http://x/"}]')
    with pytest.raises(ValueError, match="already registered"):
        register_channel("pager", required={"number"}, check=_pager_config)(lambda c, f: None)
    # Settings validate their default targets with the registered kinds too.
    with pytest.raises(ConfigError, match=r"alarm_default_targets\.0\.number"):
        load_settings(environ={"JOBRING_ALARM_DEFAULT_TARGETS": '[{"kind": "pager", "number": "x"}]'})


def test_an_unregistered_kind_is_refused() -> None:
    with pytest.raises(TargetError, match="unknown alarm channel 'pager'"):
        parse_targets('[{"kind": "pager", "number": "1"}]')


@pytest.mark.usefixtures("pager")
async def test_a_registered_kind_is_used_end_to_end_by_the_alarm_service(env: Env) -> None:
    settings = load_settings(environ={
        "JOBRING_ALARM_DEFAULT_TARGETS": '[{"kind": "pager", "number": "100"}]',
        "JOBRING_ALARM_TIMEOUT": "4.5",
    })
    alarms = AlarmService(env.store, alarmer_from_settings(settings))
    monitor = FailMonitor(env.store, env.trigger, alarms, env.clock)
    job = await env.job(alarm_targets='[{"kind": "pager", "number": "200"}]')
    failed = await add_log(env.store, job.id, group=env.group_id, handle_code=500)
    await monitor.tick()
    await alarms.close()
    # The admin-wide target and the job's own, each built by the registered builder.
    assert sorted(PagerAlarm.delivered) == [("100", failed, 4.5), ("200", failed, 4.5)]
    entry = await env.store.logs.get(failed)
    assert entry is not None and entry.alarm_status == AlarmStatus.SENT
