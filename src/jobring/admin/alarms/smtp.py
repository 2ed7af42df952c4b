"""The SMTP server settings of email alarms, shared by the email channel and the factory
that builds channels (kept apart so neither imports the other)."""

from __future__ import annotations

import smtplib
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class SmtpConfig:
    host: str
    port: int = 25
    username: str | None = None
    password: str | None = None
    sender: str = "jobring@localhost"
    starttls: bool = False
    ssl: bool = False
    timeout: float = 10.0


SmtpFactory = Callable[[SmtpConfig], smtplib.SMTP]
