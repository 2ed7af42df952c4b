"""The admin's HTTP client for executors: /run, /beat, /idleBeat, /kill, /log.

One ``httpx.AsyncClient`` (a keep-alive pool per executor address) is shared by every
call. Answers are parsed as JSON whatever their content type (the Java executor says
``text/html``). Transport errors, timeouts and unreadable answers become a failed
``ReturnT`` with a readable message, never an exception, so a trigger can always record
what happened.
"""

from __future__ import annotations

import logging
from typing import Any

import httpx

from jobring.protocol.models import (
    ACCESS_TOKEN_HEADER,
    IdleBeatParam,
    KillParam,
    LogParam,
    ProtocolError,
    ReturnT,
    TriggerParam,
    dumps,
)

log = logging.getLogger(__name__)

_JSON_HEADERS = {"Content-Type": "application/json;charset=UTF-8"}


def executor_url(address: str, path: str) -> str:
    """``address`` as registered (usually with a trailing slash) joined with an endpoint name."""
    return address.rstrip("/") + "/" + path


class ExecutorClient:
    """Calls executors on behalf of the admin."""

    def __init__(
        self,
        *,
        access_token: str | None,
        connect_timeout: float = 3.0,
        read_timeout: float = 3.0,
        max_connections: int = 400,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self._headers = dict(_JSON_HEADERS)
        if access_token:
            self._headers[ACCESS_TOKEN_HEADER] = access_token
        timeout = httpx.Timeout(read_timeout, connect=connect_timeout)
        limits = httpx.Limits(max_connections=max_connections, max_keepalive_connections=max_connections)
        self._http = httpx.AsyncClient(
            timeout=timeout, limits=limits, transport=transport, headers=self._headers
        )

    async def aclose(self) -> None:
        await self._http.aclose()

    async def call(self, address: str, path: str, body: dict[str, Any] | None) -> ReturnT:
        """POST ``body`` to ``address``/``path``; the executor's answer or a failed ReturnT."""
        url = executor_url(address, path)
        try:
            response = await self._http.post(url, content=dumps(body) if body is not None else b"")
        except httpx.TimeoutException as exc:
            return ReturnT.fail(f"executor {url} timed out ({type(exc).__name__}): {exc}")
        except httpx.HTTPError as exc:
            return ReturnT.fail(f"executor {url} unreachable ({type(exc).__name__}): {exc}")
        if response.status_code != 200:
            return ReturnT.fail(
                f"executor {url} answered HTTP {response.status_code}: {response.text[:500]}"
            )
        try:
            return ReturnT.decode(response.content)
        except ProtocolError as exc:
            return ReturnT.fail(f"executor {url} answered something that is not a ReturnT: {exc}")

    async def run(self, address: str, param: TriggerParam) -> ReturnT:
        return await self.call(address, "run", param.to_dict())

    async def beat(self, address: str) -> ReturnT:
        return await self.call(address, "beat", None)

    async def idle_beat(self, address: str, job_id: int) -> ReturnT:
        return await self.call(address, "idleBeat", IdleBeatParam(job_id).to_dict())

    async def kill(self, address: str, job_id: int) -> ReturnT:
        return await self.call(address, "kill", KillParam(job_id).to_dict())

    async def log(self, address: str, param: LogParam) -> ReturnT:
        """The run's log; ``content`` is the LogResult dict when the call succeeded."""
        return await self.call(address, "log", param.to_dict())

    # Probes for the routing strategies (same signature as core.routing.Probe).
    async def beat_probe(self, address: str, job_id: int) -> ReturnT:
        return await self.beat(address)

    async def idle_beat_probe(self, address: str, job_id: int) -> ReturnT:
        return await self.idle_beat(address, job_id)
