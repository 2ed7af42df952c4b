"""Alarms: email, webhook, Slack, DingTalk, WeCom and Feishu channels behind one ``Alarmer``,
sent off the scheduling path by the ``AlarmService`` queue."""

from jobring.admin.alarms.base import AlarmContext, Alarmer, AlarmKind, AlarmOutcome, alarmer_from_settings
from jobring.admin.alarms.chat import DingTalkAlarm, FeishuAlarm, SlackAlarm, WeComAlarm
from jobring.admin.alarms.mail import EmailAlarm
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
    "DingTalkAlarm",
    "EmailAlarm",
    "FeishuAlarm",
    "SlackAlarm",
    "TargetError",
    "WeComAlarm",
    "WebhookAlarm",
    "alarmer_from_settings",
    "parse_targets",
]
