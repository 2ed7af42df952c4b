"""Heartbeat registration with the admin (``api/registry`` / ``api/registryRemove``)."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import socket
from collections.abc import Callable, Iterable, Sequence
from datetime import UTC, datetime

import httpx
import orjson
import psutil

from jobring.executor.callback import AdminUnavailable, admin_headers, post_to_admins
from jobring.protocol.models import (
    MAX_DECLARED_HANDLERS,
    MAX_HANDLER_NAME,
    STARTED_AT_HEADER,
    RegistryParam,
)

log = logging.getLogger(__name__)

REGISTRY_GROUP = "EXECUTOR"
_FIRST_RETRY_S = 1.0


def detect_ipv4() -> str:
    """The first non-loopback IPv4 address of this host, or 127.0.0.1 when there is none."""
    try:
        interfaces = psutil.net_if_addrs()
    except OSError as exc:
        log.warning("cannot list network interfaces (%s); using 127.0.0.1", exc)
        return "127.0.0.1"
    for addresses in interfaces.values():
        for address in addresses:
            if address.family == socket.AF_INET and not address.address.startswith("127."):
                return address.address
    return "127.0.0.1"


class Registrar:
    """Beats ``api/registry`` every interval; retries failures sooner, with backoff.

    ``handlers`` gives the handler names to declare in each beat (read at every beat: a
    handler added after the start is declared at the next one); None declares nothing.
    """

    def __init__(
        self,
        client: httpx.AsyncClient,
        admin_urls: Sequence[str],
        access_token: str | None,
        app_name: str,
        address: str,
        *,
        interval_s: float = 30.0,
        started_at_ms: int | None = None,
        handlers: Callable[[], Iterable[str]] | None = None,
        alive: asyncio.Event | None = None,
    ) -> None:
        self._client = client
        # A pull executor beats only while its poll works (``alive`` set), after its first
        # beat: the registry then shows it online only while the admin can deliver to it.
        self._alive = alive
        self._admin_urls = list(admin_urls)
        self._headers = admin_headers(access_token, app_name)
        # jobring extension, in a header so the body stays XXL-JOB's: when this process
        # started. A jobring admin fails the runs it dispatched here before that instant
        # (this process cannot know them); other admins ignore the header.
        self._beat_headers = dict(self._headers)
        if started_at_ms is not None:
            self._beat_headers[STARTED_AT_HEADER] = str(started_at_ms)
        self._param = RegistryParam(REGISTRY_GROUP, app_name, address)
        # registryRemove sends the reference's body: nothing to declare when leaving.
        self._body = orjson.dumps(self._param.to_dict())
        self._handlers = handlers
        self._too_many_warned = False
        self._interval_s = interval_s
        self._app_name = app_name
        self._task: asyncio.Task[None] | None = None
        self.address = address
        self.registered = asyncio.Event()
        # For Executor.status(): the last beat's outcome.
        self.last_registered_at: datetime | None = None
        self.last_error: str | None = None
        self.last_ok: bool | None = None

    def start(self) -> None:
        if not self._admin_urls:
            log.warning("no admin address configured: the executor will not register")
            return
        self._task = asyncio.create_task(self._loop(), name="jobring-registry")

    async def _loop(self) -> None:
        retry_s = _FIRST_RETRY_S
        # What the last failure was ("token", "unreachable"), so a streak of the same
        # failure is logged once and then retried quietly.
        failing: str | None = None
        ever_registered = False
        while True:
            if ever_registered and self._alive is not None and not self._alive.is_set():
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._alive.wait(), self._interval_s)
                if not self._alive.is_set():
                    log.warning("no working poll of the admin: registry beat skipped")
                    continue
            try:
                accepted_by = await post_to_admins(
                    self._client, self._admin_urls, "api/registry", self._beat_body(), self._beat_headers
                )
            except AdminUnavailable as exc:
                kind = "token" if exc.token_refused else "unreachable"
                self._report_failure(kind, failing, exc, retry_s)
                self.last_error, self.last_ok = f"registry beat failed: {exc}", False
                failing = kind
                self.registered.clear()
                await asyncio.sleep(retry_s)
                retry_s = min(retry_s * 2, self._interval_s)
                continue
            if failing is not None or not ever_registered:
                again = " again" if ever_registered else ""
                log.info("registered%s as %s with %s (app %s)", again, self.address, accepted_by,
                         self._app_name)
            ever_registered = True
            failing, retry_s = None, _FIRST_RETRY_S
            self.last_registered_at, self.last_ok = datetime.now(UTC), True
            self.registered.set()
            await asyncio.sleep(self._interval_s)

    def _beat_body(self) -> bytes:
        if self._handlers is None:
            return self._body
        # A name longer than a job's handler column can name no job: not declared.
        names = tuple(sorted({n for n in self._handlers() if 0 < len(n) <= MAX_HANDLER_NAME}))
        if len(names) > MAX_DECLARED_HANDLERS:
            if not self._too_many_warned:
                log.warning("%d handlers: more than the %d an admin takes in a heartbeat; declaring none, "
                            "so a jobring admin may route any job of group %s here", len(names),
                            MAX_DECLARED_HANDLERS, self._app_name)
                self._too_many_warned = True
            return self._body
        return orjson.dumps(dataclasses.replace(self._param, handlers=names).to_dict())

    def _report_failure(self, kind: str, previous: str | None, exc: AdminUnavailable, retry_s: float) -> None:
        if kind == previous:
            log.debug("registry beat failed (%s); retry in %.1f s", exc, retry_s)
        elif kind == "token":
            # The group's token is what a jobring admin hands out; the global one only when enabled.
            log.error("the admin refused the access token: set JOBRING_EXECUTOR_ACCESS_TOKEN (or "
                      "access_token=...) to the token of group %s, printed on the admin by `jobring groups "
                      "token %s` (or to its global executor token, `jobring settings token`, when "
                      "enabled); retrying quietly", self._app_name, self._app_name)
        else:
            log.warning("cannot register with the admin (%s); retrying quietly", exc)

    async def stop(self) -> None:
        """Stop beating and tell the admin this executor leaves (best effort, logged)."""
        if self._task is None:
            return
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task
        self._task = None
        try:
            await post_to_admins(
                self._client, self._admin_urls, "api/registryRemove", self._body, self._headers
            )
        except AdminUnavailable as exc:
            log.warning("registryRemove failed: %s", exc)
