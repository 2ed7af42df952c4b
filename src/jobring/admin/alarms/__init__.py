"""Alarms for failed runs: email (SMTP) and webhook channels behind one ``Alarmer``."""

from jobring.admin.alarms.base import AlarmContext, Alarmer, AlarmOutcome, alarmer_from_settings
from jobring.admin.alarms.mail import EmailAlarm
from jobring.admin.alarms.webhook import WebhookAlarm

__all__ = ["AlarmContext", "AlarmOutcome", "Alarmer", "EmailAlarm", "WebhookAlarm", "alarmer_from_settings"]
