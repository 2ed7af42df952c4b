"""The configured secrets an admin refuses to start with: known defaults, short or common
values. ``JOBRING_INSECURE=true`` (``--insecure``) accepts them, with a loud warning at
every start."""

from __future__ import annotations

import ipaddress
import logging

from jobring.admin.security.passwords import is_common_password, password_problem
from jobring.admin.services.settings import AdminSettings
from jobring.configbase import ConfigError

log = logging.getLogger(__name__)

MIN_ACCESS_TOKEN_LENGTH = 16
# Defaults shipped by XXL-JOB and its clients, and values people try first.
KNOWN_DEFAULT_TOKENS = frozenset({
    "default_token", "xxl-job", "xxl_job", "xxljob", "xxl-job-admin", "token", "access_token",
    "accesstoken", "secret", "changeme", "jobring", "admin", "password", "123456", "test",
})


def access_token_problem(token: str) -> str | None:
    """Why ``token`` is too weak as the executor access token, or None."""
    lowered = token.strip().lower()
    if lowered in KNOWN_DEFAULT_TOKENS or is_common_password(token):
        return "is a well-known default or common value"
    if len(token) < MIN_ACCESS_TOKEN_LENGTH:
        return f"must have at least {MIN_ACCESS_TOKEN_LENGTH} characters"
    if len(set(token)) < 6:
        return "is too simple (too few different characters)"
    return None


def weak_secrets(settings: AdminSettings) -> list[str]:
    """One line per weak configured secret, naming the setting (never the value)."""
    problems: list[str] = []
    if settings.access_token is not None:
        problem = access_token_problem(settings.access_token)
        if problem:
            problems.append(f"access_token (JOBRING_ACCESS_TOKEN) {problem}")
    if settings.admin_password is not None:
        problem = password_problem(settings.admin_password)
        if problem:
            problems.append(f"admin_password (JOBRING_ADMIN_PASSWORD): {problem}")
    if settings.metrics_token is not None:
        problem = access_token_problem(settings.metrics_token)
        if problem:
            problems.append(f"metrics_token (JOBRING_METRICS_TOKEN) {problem}")
    return problems


def trusted_proxy_networks(settings: AdminSettings) -> list[ipaddress.IPv4Network | ipaddress.IPv6Network]:
    """``trusted_proxies`` parsed; ConfigError naming the bad entry."""
    networks: list[ipaddress.IPv4Network | ipaddress.IPv6Network] = []
    for raw in settings.trusted_proxies.split(","):
        entry = raw.strip()
        if not entry:
            continue
        try:
            networks.append(ipaddress.ip_network(entry, strict=False))
        except ValueError:
            raise ConfigError(f"trusted_proxies: {entry!r} is not an IP address or CIDR") from None
    return networks


def check_secret_policy(settings: AdminSettings) -> list[str]:
    """ConfigError for weak configured secrets unless ``insecure``; returns the problems."""
    problems = weak_secrets(settings)
    if problems and not settings.insecure:
        raise ConfigError(
            "weak secret(s): " + "; ".join(problems)
            + ". Use a strong value, or set JOBRING_INSECURE=true (--insecure) to accept it"
            " (never in production)"
        )
    return problems


def enforce_secret_policy(settings: AdminSettings) -> None:
    """Raise ConfigError for weak configured secrets, unless ``insecure`` (then warn loudly)."""
    problems = check_secret_policy(settings)
    if settings.insecure:
        banner = "!" * 78
        lines = problems or ["no weak secret configured right now"]
        log.warning(
            "\n%s\nINSECURE MODE (JOBRING_INSECURE=true): weak secrets are accepted.\n%s\n%s",
            banner, "\n".join(f"  - {line}" for line in lines), banner,
        )
