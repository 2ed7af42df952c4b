"""Alarms: email, webhook, Slack, DingTalk, WeCom and Feishu channels behind one ``Alarmer``,
sent off the scheduling path by the ``AlarmService`` queue.

Each channel module registers its kind (:func:`register_channel`) when imported; importing
it here makes every built-in kind known before a target is parsed. The alarms built from
the admin's settings are in :mod:`jobring.admin.alarms.setup`.
"""

from jobring.admin.alarms.base import AlarmContext, Alarmer, AlarmKind, AlarmOutcome
from jobring.admin.alarms.chat import DingTalkAlarm, FeishuAlarm, SlackAlarm, WeComAlarm
from jobring.admin.alarms.mail import EmailAlarm
from jobring.admin.alarms.registry import (
    ChannelKind,
    channel_kinds,
    register_channel,
    unregister_channel,
    url_config,
)
from jobring.admin.alarms.service import AlarmService
from jobring.admin.alarms.targets import AlarmTarget, ChannelFactory, TargetError, parse_targets
from jobring.admin.alarms.webhook import WebhookAlarm

__all__ = [
    "AlarmContext",
    "AlarmKind",
    "AlarmOutcome",
    "AlarmService",
    "AlarmTarget",
    "Alarmer",
    "ChannelFactory",
    "ChannelKind",
    "DingTalkAlarm",
    "EmailAlarm",
    "FeishuAlarm",
    "SlackAlarm",
    "TargetError",
    "WeComAlarm",
    "WebhookAlarm",
    "channel_kinds",
    "parse_targets",
    "register_channel",
    "unregister_channel",
    "url_config",
]
