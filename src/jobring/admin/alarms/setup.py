"""The admin's alarms built from its settings: the channel factory (SMTP, timeouts, the
alarm address policy) and the :class:`~jobring.admin.alarms.base.Alarmer` with the
admin-wide channels.

Not imported by the package ``__init__``: the settings validate default targets with the
registered channel kinds, so the settings module imports the package, not the reverse."""

from __future__ import annotations

from jobring.admin.alarms.base import Alarmer
from jobring.admin.alarms.smtp import SmtpConfig
from jobring.admin.alarms.targets import ChannelFactory, parse_targets
from jobring.admin.services.settings import AdminSettings, alarm_policy


def channel_factory(settings: AdminSettings) -> ChannelFactory:
    """The factory of the channels the admin's settings allow."""
    smtp = None
    if settings.smtp_host:
        smtp = SmtpConfig(
            host=settings.smtp_host,
            port=settings.smtp_port,
            username=settings.smtp_username,
            password=settings.smtp_password,
            sender=settings.smtp_from or (settings.smtp_username or "jobring@localhost"),
            starttls=settings.smtp_starttls,
            ssl=settings.smtp_ssl,
            timeout=settings.alarm_timeout,
        )
    return ChannelFactory(smtp=smtp, timeout=settings.alarm_timeout, policy=alarm_policy(settings))


def alarmer_from_settings(settings: AdminSettings) -> Alarmer:
    """The admin-wide channels (default targets, the webhook URL) plus each job's targets."""
    factory = channel_factory(settings)
    defaults = parse_targets(settings.alarm_default_targets, "alarm_default_targets")
    channels = [factory.channel(t) for t in defaults]
    if settings.alarm_webhook_url:
        channels.append(factory.channel_of("webhook", {"url": settings.alarm_webhook_url}))
    return Alarmer(
        [c for c in channels if c is not None],
        for_job=factory.for_job,
        timeout=settings.alarm_timeout,
        retries=settings.alarm_retries,
        public_url=settings.public_url,
    )
