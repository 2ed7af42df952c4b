"""The admin's HTTP client for executors: /run (3.5: /trigger), /beat, /idleBeat, /kill, /log.

Keep-alive connections are pooled per executor address. On the network plain http goes
through the lean HTTP/1.1 client of :mod:`jobring.http1.client`: the per-call CPU
bounds how fast a burst of fires due at one instant goes out (a general client was half of
the admin's CPU at 1,000 fires/s, bench/RESULTS.md). https (rare for executors) goes
through httpx, the client the rest of jobring uses. Tests inject ``connect`` (how the lean
client opens a connection) so the production client runs against an in-memory executor
double. An injected httpx transport sends every call through ``httpx.AsyncClient``
instead; only the benchmark's comparison of clients uses it.

Answers are parsed as JSON whatever their content type (the Java executor says
``text/html``). Transport errors, timeouts and unreadable answers become a failed
``ReturnT`` with a readable message, never an exception, so a trigger can always record
what happened.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Awaitable, Sequence
from typing import Any, Protocol

import httpx

from jobring.admin.dispatch.broker import BrokerPublisher, BrokerUnavailable
from jobring.admin.dispatch.pull import PullCallError, PullHub
from jobring.core.addresses import address_key, broker_name, is_broker_address, is_polled_address
from jobring.core.routing import Probe
from jobring.http1.client import Connect, Http1Client, HttpError
from jobring.protocol.broker import executor_queue, group_queue, run_routing
from jobring.protocol.models import (
    ACCESS_TOKEN_HEADER,
    APPNAME_HEADER,
    MSG_V35_APP_MISSING,
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
# Idle keep-alive connections are dropped before executors drop them (pyxxl: 75 s,
# the Java executor: 90 s), so a reused connection is rarely one the peer just closed.
_KEEPALIVE_S = 15.0
# The answer to a run published to the broker (the executor's own answer never comes back:
# a refusal arrives as a failed callback).
_QUEUED = b'{"code":200,"msg":"queued on the broker"}'
# Calls about a run that any broker executor of the group may have taken.
_FANNED = ("kill", "log", "received")
# The executor's answer for a log it does not have (jobring.executor.runlog; the Java one's).
MSG_LOG_FILE_NOT_EXISTS = "readLog fail, logFile not exists"


def executor_url(address: str, path: str) -> str:
    """``address`` as registered (usually with a trailing slash) joined with an endpoint name."""
    return address.rstrip("/") + "/" + path


class ExecutorCallError(HttpError):
    """A call that got no HTTP answer, whichever client made it; ``timeout`` tells a timeout
    from a failed connection."""


@functools.lru_cache(maxsize=4096)
def _token_line(token: str | None, app: str | None = None) -> bytes:
    """The access-token header line (and for a 3.5 executor the appname line) for the lean
    client (cached: one per group token and appname)."""
    lines = b""
    for name, value in ((ACCESS_TOKEN_HEADER, token), (APPNAME_HEADER, app)):
        if not value:
            continue
        if any(ch in value for ch in "\r\n"):
            raise ValueError(f"{name} must not contain line breaks")
        lines += f"{name}: {value}\r\n".encode("latin-1")
    return lines


def _token_headers(token: str | None, app: str | None = None) -> dict[str, str] | None:
    if app is None:
        return {ACCESS_TOKEN_HEADER: token} if token else None
    return {ACCESS_TOKEN_HEADER: token or "", APPNAME_HEADER: app}


async def _pull_answer(pending: Awaitable[bytes]) -> tuple[int, bytes]:
    try:
        return 200, await pending
    except PullCallError as exc:
        raise ExecutorCallError(exc.kind, exc.detail, timeout=exc.timeout) from exc


def _log_found(answer: ReturnT) -> bool:
    content = answer.content
    return answer.ok and isinstance(content, dict) and content.get("logContent") != MSG_LOG_FILE_NOT_EXISTS


async def _published(pending: Awaitable[None]) -> tuple[int, bytes]:
    try:
        await pending
    except BrokerUnavailable as exc:
        raise ExecutorCallError(exc.kind, exc.detail, timeout=exc.timeout) from exc
    return 200, _QUEUED


async def _no_answer(error: ExecutorCallError) -> tuple[int, bytes]:
    raise error


class _Http(Protocol):
    async def post(self, url: str, body: bytes, token: str | None, app: str | None = None
                   ) -> tuple[int, bytes]: ...

    def post_now(self, url: str, body: bytes, token: str | None, app: str | None = None
                 ) -> Awaitable[tuple[int, bytes]]: ...

    async def aclose(self) -> None: ...


class _HttpxHttp:
    def __init__(
        self, headers: dict[str, str], connect: float, read: float, limit: int,
        transport: httpx.AsyncBaseTransport | None,
    ) -> None:
        # Waiting for a free connection is bounded by the dispatch lanes, not by a timeout.
        timeout = httpx.Timeout(read, connect=connect, pool=None)
        limits = httpx.Limits(max_connections=limit, max_keepalive_connections=limit,
                              keepalive_expiry=_KEEPALIVE_S)
        self._client = httpx.AsyncClient(timeout=timeout, limits=limits, transport=transport, headers=headers)

    async def post(self, url: str, body: bytes, token: str | None, app: str | None = None
                   ) -> tuple[int, bytes]:
        try:
            response = await self._client.post(url, content=body, headers=_token_headers(token, app))
        except httpx.TimeoutException as exc:
            raise ExecutorCallError(type(exc).__name__, str(exc), timeout=True) from exc
        except httpx.HTTPError as exc:
            raise ExecutorCallError(type(exc).__name__, str(exc), timeout=False) from exc
        return response.status_code, response.content

    def post_now(self, url: str, body: bytes, token: str | None, app: str | None = None
                 ) -> Awaitable[tuple[int, bytes]]:
        return self.post(url, body, token, app)  # httpx writes when the coroutine runs

    async def aclose(self) -> None:
        await self._client.aclose()


class _LeanHttp:
    """Plain http through :class:`Http1Client`; https (rare for executors) through httpx."""

    def __init__(self, headers: dict[str, str], connect: float, read: float, limit: int,
                 max_answer: int, opener: Connect | None) -> None:
        self._plain = Http1Client(headers, connect_timeout=connect, read_timeout=read,
                                  keepalive_s=_KEEPALIVE_S, max_per_host=limit, max_body=max_answer,
                                  connect=opener)
        self._tls = _HttpxHttp(headers, connect, read, limit, None)

    async def post(self, url: str, body: bytes, token: str | None, app: str | None = None
                   ) -> tuple[int, bytes]:
        if not self._plain.handles(url):
            return await self._tls.post(url, body, token, app)
        return await self._converted(self._plain.post(url, body, _token_line(token, app)))

    def post_now(self, url: str, body: bytes, token: str | None, app: str | None = None
                 ) -> Awaitable[tuple[int, bytes]]:
        if not self._plain.handles(url):
            return self._tls.post(url, body, token, app)
        return self._converted(self._plain.post_now(url, body, _token_line(token, app)))

    @staticmethod
    async def _converted(pending: Awaitable[tuple[int, bytes]]) -> tuple[int, bytes]:
        try:
            return await pending
        except HttpError as exc:
            raise ExecutorCallError(exc.kind, exc.detail, timeout=exc.timeout) from exc

    async def aclose(self) -> None:
        await self._plain.aclose()
        await self._tls.aclose()


class ExecutorClient:
    """Calls executors on behalf of the admin.

    Every call sends an access token: the ``token`` given with the call (the executor
    group's own token), else the client's ``access_token`` (the global one, if enabled).
    At most ``max_connections`` connections per executor address are open at once (more
    calls wait for one). ``max_answer_bytes`` bounds an answer's body: larger than the
    http1 default because a Java executor's /log answers the rest of the log file.
    ``connect`` opens the lean client's connections (tests: an in-memory executor double);
    ``transport`` routes every call through httpx instead (benchmark comparison only).
    """

    def __init__(
        self,
        *,
        access_token: str | None,
        connect_timeout: float = 3.0,
        read_timeout: float = 3.0,
        max_connections: int = 400,
        max_answer_bytes: int = 16 << 20,
        connect: Connect | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
        pull: PullHub | None = None,
        broker: BrokerPublisher | None = None,
    ) -> None:
        headers = dict(_JSON_HEADERS)
        # Runs for executors at broker:// addresses are published to RabbitMQ
        # (admin/dispatch/broker.py); their other calls go through the pull mailboxes.
        self.broker = broker
        # Executors at pull:// addresses are never dialed: their calls wait in this node's
        # mailboxes for their polls (admin/dispatch/pull.py).
        self.pull = pull
        self._pull_timeout_s = connect_timeout + read_timeout
        self._default_token = access_token or None
        # (appname, address) of executors that registered under that appname speaking
        # XXL-JOB 3.5: calls for that appname's groups go to /trigger with XXL-JOB-APPNAME.
        # Learned per node from the heartbeats it receives (with a token of that appname),
        # so one group's token cannot change how another group's executor is called.
        self._v35: set[tuple[str, str]] = set()
        self._http: _Http
        if transport is not None:
            self._http = _HttpxHttp(headers, connect_timeout, read_timeout, max_connections, transport)
        else:
            self._http = _LeanHttp(headers, connect_timeout, read_timeout, max_connections,
                                   max_answer_bytes, connect)

    async def aclose(self) -> None:
        await self._http.aclose()
        if self.broker is not None:
            await self.broker.aclose()

    def learn_dialect(self, app_name: str, address: str, *, v35: bool) -> None:
        """Record how ``address`` spoke in its last heartbeat under ``app_name``: ``v35`` when
        it sent XXL-JOB-APPNAME (3.5), else 2.x-3.4."""
        if v35:
            self._v35.add((app_name, address))
        else:
            self._v35.discard((app_name, address))

    def dialect_of(self, address: str, app_name: str) -> str:
        """"3.5" or "2" (2.x-3.4 share the executor side), as learned for ``address`` under
        ``app_name``."""
        return "3.5" if (app_name, address) in self._v35 else "2"

    def _app(self, address: str, app_name: str | None) -> str | None:
        """The XXL-JOB-APPNAME to send on a call for ``app_name``'s group, None for 2.x-3.4."""
        return app_name if app_name is not None and (app_name, address) in self._v35 else None

    async def call(
        self, address: str, path: str, body: dict[str, Any] | None, token: str | None = None,
        app_name: str | None = None,
    ) -> ReturnT:
        """POST ``body`` to ``address``/``path`` for a group of ``app_name``; the executor's
        answer or a failed ReturnT."""
        app = self._app(address, app_name)
        if app is not None and path == "run":
            path = "trigger"
        url = executor_url(address, path)
        payload = dumps(body) if body is not None else b""
        if is_broker_address(address):
            if path in ("run", "trigger"):
                return await self._answer(url, self._brokered(address, payload, app_name))
            if path in _FANNED and self.pull is not None and app_name:
                return await self._fanned(address, path, payload, app_name)
        if is_polled_address(address):
            return await self._answer(url, self._pulled(address, path, payload, app_name))
        return await self._answer(url, self._http.post(url, payload, token or self._default_token, app))

    def _pulled(self, address: str, path: str, body: bytes, app_name: str | None
                ) -> Awaitable[tuple[int, bytes]]:
        """A call to a pull executor: queued now in its mailbox on this node."""
        if self.pull is None:
            return _no_answer(ExecutorCallError("PullDisabled", "this admin node takes no executor polls",
                                                timeout=False))
        return _pull_answer(self.pull.send(address_key(address), path, body, app_name, self._pull_timeout_s))

    async def _fanned(self, address: str, path: str, body: bytes, app_name: str,
                      runs: Sequence[tuple[int, int]] = ()) -> ReturnT:
        """kill, log or received for a broker executor: the run may have been taken by any
        broker executor of the group (from the group's queue), not only the one recorded.
        A kill goes to those that accepted one of ``runs`` (the run's (logId, logDateTime)
        candidates) when that is known, else to all of them (success if one succeeds);
        received is the union of their answers; a log is read where it exists, the recorded
        executor asked first."""
        assert self.pull is not None
        first = address_key(address)
        keys = [first, *(k for k in self.pull.live_keys(app_name, "broker") if k != first)]
        if path == "log":
            tried: list[ReturnT] = []
            for key in keys:  # one at a time: most logs are where the run was recorded
                answer = await self._answer(executor_url(key, path), self._pulled(key, path, body, app_name))
                if _log_found(answer):
                    return answer
                tried.append(answer)
            return tried[0]
        if path == "kill" and runs and len(keys) > 1:
            keys = await self._holders(keys, runs, app_name)
        asked = [self._answer(executor_url(k, path), self._pulled(k, path, body, app_name)) for k in keys]
        answers = await asyncio.gather(*asked)
        if path == "received":
            found = sorted({i for a in answers if a.ok and isinstance(a.content, dict)
                            for i in a.content.get("received") or []})
            return ReturnT.success({"received": found}) if any(a.ok for a in answers) else answers[0]
        return next((a for a in answers if a.ok), answers[0])

    async def _holders(self, keys: list[str], runs: Sequence[tuple[int, int]], app_name: str) -> list[str]:
        """The broker executors among ``keys`` that may hold one of ``runs``: those that say
        they accepted one (their received-runs record) and those that cannot say; all of
        ``keys`` when none says so."""
        body = dumps({"runs": [list(run) for run in runs]})
        asked = [self._answer(executor_url(k, "received"), self._pulled(k, "received", body, app_name))
                 for k in keys]
        answers = await asyncio.gather(*asked)
        holders: list[str] = []
        unsure: list[str] = []
        for key, answer in zip(keys, answers, strict=True):
            content = answer.content
            listed = content.get("received") if answer.ok and isinstance(content, dict) else None
            if not isinstance(listed, list):
                unsure.append(key)
            elif listed:
                holders.append(key)
        return holders + unsure if holders else keys

    def _brokered(self, address: str, body: bytes, app_name: str | None, pinned: bool | None = None
                  ) -> Awaitable[tuple[int, bytes]]:
        """A run for a broker executor: published to its group's queue (any executor of the
        group may take it), or to its own queue when it must run there (``pinned``: the route
        strategy's choice is the point, core.routing.PINNED_STRATEGIES; None: only when it is one
        shard of a broadcast, read from the body)."""
        if self.broker is None:
            return _no_answer(ExecutorCallError("BrokerDisabled", "this admin node has no dispatch broker "
                                                "(JOBRING_DISPATCH_BROKER)", timeout=False))
        if not app_name:
            return _no_answer(ExecutorCallError("BrokerNoAppname", "a run for a broker executor must name "
                                                "its group's appname", timeout=False))
        try:
            own = run_routing(body)[1] if pinned is None else pinned
            queue = executor_queue(app_name, broker_name(address)) if own else group_queue(app_name)
        except ValueError as exc:
            return _no_answer(ExecutorCallError("BrokerRefused", str(exc), timeout=False))
        return _published(self.broker.publish(queue, body, own=own, timeout_s=self._pull_timeout_s))

    def run_now(self, address: str, param: TriggerParam, token: str | None = None,
                app_name: str | None = None, *, pinned: bool | None = None) -> Awaitable[ReturnT]:
        """/run (/trigger for a 3.5 executor), written at once when a keep-alive connection to
        the executor is idle (see ``Http1Client.post_now``); the awaitable gives the answer,
        as :meth:`run` does. ``pinned``: the run must run at ``address`` (broker executors:
        see ``_brokered``)."""
        return self.run_body_now(address, dumps(param.to_dict()), token, app_name, pinned=pinned)

    def run_body_now(self, address: str, body: bytes, token: str | None = None,
                     app_name: str | None = None, *, pinned: bool | None = None) -> Awaitable[ReturnT]:
        """:meth:`run_now` with the TriggerParam already encoded as JSON (``body``)."""
        if is_broker_address(address):
            return self._answer(executor_url(address, "run"), self._brokered(address, body, app_name, pinned))
        if is_polled_address(address):
            return self._answer(executor_url(address, "run"), self._pulled(address, "run", body, app_name))
        app = self._app(address, app_name)
        url = executor_url(address, "run" if app is None else "trigger")
        return self._answer(url, self._http.post_now(url, body, token or self._default_token, app))

    @staticmethod
    async def _answer(url: str, pending: Awaitable[tuple[int, bytes]]) -> ReturnT:
        try:
            status, content = await pending
        except ExecutorCallError as exc:
            what = "timed out" if exc.timeout else "unreachable"
            return ReturnT.fail(f"executor {url} {what} ({exc.kind}): {exc.detail}")
        if status != 200:
            text = content[:500].decode("utf-8", errors="replace")
            return ReturnT.fail(f"executor {url} answered HTTP {status}: {text}")
        try:
            return ReturnT.decode(content)
        except ProtocolError as exc:
            return ReturnT.fail(f"executor {url} answered something that is not a ReturnT: {exc}")

    async def run(self, address: str, param: TriggerParam, token: str | None = None,
                  app_name: str | None = None) -> ReturnT:
        return await self.call(address, "run", param.to_dict(), token, app_name)

    async def rerun_if_35(
        self, address: str, param: TriggerParam, token: str | None, app_name: str | None, answer: ReturnT
    ) -> ReturnT:
        """``answer`` to a /run, unless it is a 3.5 executor's refusal of a call without
        XXL-JOB-APPNAME (this node has not had its heartbeat yet): then the address is
        learned as 3.5 and the run sent again, once, to /trigger."""
        if answer.msg != MSG_V35_APP_MISSING or not app_name or (app_name, address) in self._v35:
            return answer
        log.info("executor %s speaks XXL-JOB 3.5: triggering it at /trigger", address)
        self.learn_dialect(app_name, address, v35=True)
        return await self.run(address, param, token, app_name)

    async def beat(self, address: str, token: str | None = None, app_name: str | None = None) -> ReturnT:
        return await self.call(address, "beat", None, token, app_name)

    async def idle_beat(self, address: str, job_id: int, token: str | None = None,
                        app_name: str | None = None) -> ReturnT:
        return await self.call(address, "idleBeat", IdleBeatParam(job_id).to_dict(), token, app_name)

    async def kill(self, address: str, job_id: int, token: str | None = None,
                   app_name: str | None = None, *, runs: Sequence[tuple[int, int]] = ()) -> ReturnT:
        """Kill the job's runs at ``address``. For a broker executor, ``runs`` (the run's
        (logId, logDateTime) candidates, e.g. :func:`kill_candidates`) lets the kill reach
        only the broker executors that accepted it, not every one of the group."""
        body = KillParam(job_id).to_dict()
        if runs and is_broker_address(address) and self.pull is not None and app_name:
            return await self._fanned(address, "kill", dumps(body), app_name, runs)
        return await self.call(address, "kill", body, token, app_name)

    async def log(self, address: str, param: LogParam, token: str | None = None,
                  app_name: str | None = None) -> ReturnT:
        """The run's log; ``content`` is the LogResult dict when the call succeeded."""
        body = param.to_dict()
        if self._app(address, app_name) is not None:  # 3.5 spells it in full
            body["logDateTime"] = body.pop("logDateTim")
        return await self.call(address, "log", body, token, app_name)

    # Probes for the routing strategies (same signature as core.routing.Probe).
    async def beat_probe(self, address: str, job_id: int) -> ReturnT:
        return await self.beat(address)

    async def idle_beat_probe(self, address: str, job_id: int) -> ReturnT:
        return await self.idle_beat(address, job_id)

    def probes(self, token: str | None, app_name: str | None = None) -> tuple[Probe, Probe]:
        """``beat`` and ``idleBeat`` probes that send ``token`` (a group's executors); with the
        group's ``app_name``, a 3.5 executor's refusal of a probe without it teaches its dialect
        (as in :meth:`rerun_if_35`) and the probe is sent again."""

        def learned(address: str, answer: ReturnT) -> bool:
            if answer.msg != MSG_V35_APP_MISSING or not app_name or (app_name, address) in self._v35:
                return False
            log.info("executor %s speaks XXL-JOB 3.5 (answer to a probe)", address)
            self.learn_dialect(app_name, address, v35=True)
            return True

        async def beat(address: str, job_id: int) -> ReturnT:
            answer = await self.beat(address, token, app_name)
            return await self.beat(address, token, app_name) if learned(address, answer) else answer

        async def idle_beat(address: str, job_id: int) -> ReturnT:
            answer = await self.idle_beat(address, job_id, token, app_name)
            if learned(address, answer):
                return await self.idle_beat(address, job_id, token, app_name)
            return answer

        return beat, idle_beat
