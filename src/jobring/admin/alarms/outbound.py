"""The alarms' HTTP client: every webhook and chat POST goes through the alarm address policy
(:func:`jobring.core.addresses.check_alarm_url`) at send time, on the addresses its host
resolves to, and is sent to the very address that was checked (with the URL's Host header
and TLS server name), so a DNS answer that changes between the check and the connection
(rebinding) cannot send it elsewhere. Redirects are not followed and proxy variables of the
environment are not used: either would let the request reach an unchecked address.

A refused target is logged here with its reason (masked URL) and answers like an unreachable
one (transient, then failed after the retries): the run's alarm status never tells an
operator whether an internal address answered.
"""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import httpx
import orjson

from jobring.admin.alarms.base import AlarmOutcome
from jobring.core.addresses import (
    AddressRefused,
    AlarmTargetPolicy,
    AlarmUrl,
    IPAddress,
    alarm_ip_problem,
    check_alarm_url,
    normalise_ip,
)
from jobring.core.masking import mask_url
from jobring.errors import JobringError

log = logging.getLogger(__name__)

Resolver = Callable[[str, int], Awaitable[list[str]]]
RESOLVE_TIMEOUT_S = 5.0


class HostUnresolved(JobringError):
    """The host name of an alarm URL did not resolve (now)."""


class RefusedAnswer(AddressRefused):
    """A host name that resolves to a refused address; the message names the address (for
    the admin's log), :attr:`public` does not (for the operator: no internal DNS oracle)."""

    def __init__(self, host: str, problem: str) -> None:
        super().__init__(f"{host} resolves to a refused address: {problem}")
        self.public = f"{host} resolves to an address alarms may not be sent to"


async def system_resolve(host: str, port: int) -> list[str]:
    """The addresses ``host`` resolves to (the system resolver, off the event loop)."""
    infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


async def pinned_address(
    url: str, policy: AlarmTargetPolicy, resolve: Resolver = system_resolve,
    timeout: float = RESOLVE_TIMEOUT_S,  # noqa: ASYNC109 - bounds the resolver, not a request
) -> tuple[AlarmUrl, IPAddress]:
    """The checked URL and the address to send to. AddressRefused when the URL, or any
    address its host resolves to, is refused; HostUnresolved when the host does not resolve."""
    checked = check_alarm_url(url, policy)
    if checked.ip is not None:
        return checked, checked.ip
    try:
        answers = await asyncio.wait_for(resolve(checked.host, checked.port), timeout)
    except (OSError, TimeoutError) as exc:
        raise HostUnresolved(f"{checked.host} does not resolve: {exc}") from None
    addresses = [ip for ip in (normalise_ip(a.partition("%")[0]) for a in answers) if ip is not None]
    if not addresses:
        raise HostUnresolved(f"{checked.host} resolves to no address")
    for ip in addresses:
        # Any refused answer refuses the name: which one a later connection would use is not ours.
        problem = alarm_ip_problem(ip, policy, name_allowed=checked.name_allowed)
        if problem:
            raise RefusedAnswer(checked.host, problem)
    return checked, addresses[0]


@dataclass(frozen=True)
class AlarmHttp:
    """POSTs alarm messages to checked, pinned addresses. ``transport`` and ``resolve`` are
    for tests (an httpx transport, a resolver)."""

    policy: AlarmTargetPolicy = field(default_factory=AlarmTargetPolicy)
    timeout: float = 10.0
    transport: httpx.AsyncBaseTransport | None = None
    resolve: Resolver = system_resolve

    async def _send(self, url: str, body: dict[str, Any]) -> httpx.Response:
        checked, ip = await pinned_address(url, self.policy, self.resolve, self.timeout)
        headers = {"Content-Type": "application/json", "Host": checked.netloc}
        extensions: dict[str, Any] = {}
        if checked.scheme == "https" and checked.name is not None:
            extensions["sni_hostname"] = checked.name  # the certificate is checked against the name
        async with httpx.AsyncClient(timeout=self.timeout, transport=self.transport, trust_env=False,
                                     follow_redirects=False) as http:
            return await http.post(checked.url_for(ip), content=orjson.dumps(body), headers=headers,
                                   extensions=extensions)

    async def post_json(self, name: str, url: str, body: dict[str, Any], *,
                        error_key: str | None = None) -> AlarmOutcome:
        """POST ``body``; a refused or unresolved target, connection errors, timeouts, 429 and
        5xx are transient, other non-2xx answers permanent. ``error_key``: the JSON field whose
        non-zero value means the robot refused the message."""
        try:
            response = await self._send(url, body)
        except AddressRefused as exc:
            log.warning("alarm %s to %s refused by the alarm address policy: %s", name, mask_url(url), exc)
            return AlarmOutcome.TRANSIENT
        except HostUnresolved as exc:
            log.warning("alarm %s to %s: %s", name, mask_url(url), exc)
            return AlarmOutcome.TRANSIENT
        except httpx.HTTPError as exc:
            log.warning("alarm %s to %s: %s: %s", name, mask_url(url), type(exc).__name__, exc)
            return AlarmOutcome.TRANSIENT
        return _outcome(name, response, error_key)


def _outcome(name: str, response: httpx.Response, error_key: str | None) -> AlarmOutcome:
    if response.status_code == 429 or response.status_code >= 500:
        log.warning("alarm %s answered HTTP %s", name, response.status_code)
        return AlarmOutcome.TRANSIENT
    if not response.is_success:
        log.error("alarm %s answered HTTP %s: %s", name, response.status_code, response.text[:200])
        return AlarmOutcome.FAILED
    if error_key is not None:
        try:
            answer = orjson.loads(response.content)
        except orjson.JSONDecodeError:
            log.error("alarm %s answered non-JSON: %s", name, response.text[:200])
            return AlarmOutcome.FAILED
        code = answer.get(error_key, answer.get("StatusCode", 0)) if isinstance(answer, dict) else None
        if code not in (0, None):
            log.error("alarm %s refused the message: %s", name, response.text[:200])
            return AlarmOutcome.FAILED
    return AlarmOutcome.SENT
