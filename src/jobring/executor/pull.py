"""Pull dispatch, the executor's side: no listening socket; calls come over a long poll.

One poll loop per admin URL long-polls ``api/pull`` with the executor's token; each call
it brings (/run, /kill, /log, /beat, /idleBeat, /received) is answered by the same code
that answers them over HTTP for a push executor, and the answer goes back to the admin
node that sent the call: with that URL's next poll, or at once in a short poll (wait 0)
when the long poll is still waiting. Polling every admin URL lets every admin node that
the executor knows deliver to it (docs/dispatch.md, "Pull mode").

The polls of an ``http://`` admin URL go over jobring's lean keep-alive HTTP/1.1 client
(:mod:`jobring.http1.client`, the one the admin dispatches push calls with): a poll is one
pre-encoded request on a connection kept between polls. ``https://`` URLs (TLS) use the
executor's httpx client. A call answered without waiting (a /run is accepted or refused at
once) is answered in the poll's own step, without a task (:mod:`jobring.executor.eager`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import re
import secrets
import socket
from collections.abc import Awaitable, Callable, Sequence

import httpx
import orjson

from jobring.errors import JobringError
from jobring.executor.callback import admin_headers
from jobring.executor.eager import first_step, resume
from jobring.http1.client import Connect, Http1Client, HttpError
from jobring.protocol.models import SUCCESS_CODE

log = logging.getLogger(__name__)

Handle = Callable[[str, bytes], Awaitable[bytes]]  # (path such as "/run", body) -> answer JSON
POLL_WAIT_MS = 20_000
_MAX_ANSWERS = 1_000  # per request (the admin takes at most 1,000)
_FIRST_RETRY_S = 0.5
_COLLECT_STEPS = 4  # loop steps a poll waits for the answers of the calls it just took
_CHUNK = 16  # calls of a batch answered before their answers may leave (see _exchange)
# A poll's answer carries up to 1,000 calls, each a /run body with the job's parameter.
_MAX_POLL_ANSWER = 32 << 20
# Below the admin server's keep-alive (uvicorn: 5 s), so a kept connection is not reused
# just as the server closes it.
_KEEPALIVE_S = 2.0
_POLL_ERRORS = (httpx.HTTPError, HttpError, ValueError)


def pull_address(explicit: str | None, scheme: str = "pull") -> str:
    """The executor's ``pull://<name>/`` (``broker://<name>/``) address: the configured one,
    else one made of the host name, the process id and a few random characters (unique per
    process)."""
    if explicit:
        return explicit if explicit.endswith("/") else explicit + "/"
    host = re.sub(r"[^a-z0-9.-]+", "-", socket.gethostname().lower()).strip("-.") or "executor"
    return f"{scheme}://{host[:150]}-{os.getpid()}-{secrets.token_hex(3)}/"


class PollTransport:
    """The poll requests: jobring's HTTP/1.1 client for ``http://`` admin URLs (``lean``,
    the default), the executor's httpx client for the others (TLS) and when not ``lean``."""

    def __init__(self, client: httpx.AsyncClient, access_token: str | None, *, wait_ms: int,
                 connect_timeout_s: float, lean: bool = True, connect: Connect | None = None) -> None:
        self._client = client
        self._headers = admin_headers(access_token, None)
        self._timeout = httpx.Timeout(connect_timeout_s + wait_ms / 1000, connect=connect_timeout_s)
        # Connections per admin URL: the long poll, a short poll with answers, one spare.
        self._lean = Http1Client(self._headers, connect_timeout=connect_timeout_s,
                                 read_timeout=connect_timeout_s + wait_ms / 1000, keepalive_s=_KEEPALIVE_S,
                                 max_per_host=3, max_body=_MAX_POLL_ANSWER, connect=connect) if lean else None

    async def post(self, url: str, body: bytes, waits: bool) -> tuple[int, bytes]:
        """(status, body) of one poll request; raises one of ``_POLL_ERRORS``."""
        if self._lean is not None and Http1Client.handles(url):
            return await self._lean.post(url, body)
        response = await self._client.post(url, content=body, headers=self._headers,
                                           timeout=self._timeout if waits else None)
        return response.status_code, response.content

    async def aclose(self) -> None:
        if self._lean is not None:
            await self._lean.aclose()


class PullChannel:
    """The poll loops of one pull executor (one per admin URL)."""

    def __init__(
        self, transport: PollTransport, admin_urls: Sequence[str], app_name: str, address: str,
        handle: Handle, *, wait_ms: int = POLL_WAIT_MS, max_backoff_s: float = 10.0,
    ) -> None:
        self._transport = transport
        self._urls = [u + "api/pull" for u in admin_urls]
        self._app_name = app_name
        self.address = address
        self._handle = handle
        self._wait_ms = wait_ms
        self._max_backoff_s = max_backoff_s
        self._answers: dict[str, list[list[object]]] = {u: [] for u in self._urls}
        self._ready: dict[str, asyncio.Event] = {u: asyncio.Event() for u in self._urls}
        self._tasks: list[asyncio.Task[None]] = []
        self._calls: set[asyncio.Task[None]] = set()
        self._serving: dict[str, set[asyncio.Task[None]]] = {u: set() for u in self._urls}
        self._collecting: set[str] = set()  # URLs whose poll loop waits for answers to carry
        self._working: set[str] = set()  # admin URLs whose last poll was answered
        self.polling = asyncio.Event()  # set while the last poll of some admin URL was answered
        self.calls_served = 0

    def start(self) -> None:
        for url in self._urls:
            self._tasks.append(asyncio.create_task(self._poll_loop(url), name="jobring-pull-poll"))
            self._tasks.append(asyncio.create_task(self._answer_loop(url), name="jobring-pull-answers"))

    async def stop(self, grace_s: float = 3.0) -> None:
        """Stop polling (the admin sees the polls close), then send the answers of calls
        already taken, for up to ``grace_s``."""
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks = []
        if self._calls:
            await asyncio.wait(self._calls, timeout=grace_s)
        for url in self._urls:
            if not self._answers[url] and url not in self._working:
                continue  # nothing to send, and this node does not deliver here anyway
            # The last answers; "leaving" tells the node to stop delivering here at once
            # (else a poll just ended would keep this executor alive there for its grace).
            with contextlib.suppress(*_POLL_ERRORS, _Refused, TimeoutError):
                async with asyncio.timeout(grace_s):
                    await self._exchange(url, 0, leaving=True)
        await self._transport.aclose()

    async def _poll_loop(self, url: str) -> None:
        retry_s, failing, accepted = _FIRST_RETRY_S, False, False
        while True:
            if self._serving[url]:
                # Calls just taken (a /run is answered in a loop step or two): their answers
                # ride the next poll instead of a request of their own.
                self._collecting.add(url)
                try:
                    for _ in range(_COLLECT_STEPS):
                        await asyncio.sleep(0)
                        if not self._serving[url]:
                            break
                finally:
                    self._collecting.discard(url)
                if self._serving[url]:
                    self._ready[url].set()  # what is still running is answered by a short poll
            try:
                # The first poll of a streak does not wait: ``polling`` tells at once that the
                # admin takes this executor's polls.
                await self._exchange(url, self._wait_ms if accepted else 0, carried=True)
                accepted = True
            except (*_POLL_ERRORS, _Refused) as exc:
                self._working.discard(url)
                if not self._working:
                    self.polling.clear()
                accepted = False
                if not failing:
                    log.warning("pull: polling %s failed (%s); retrying", url, exc)
                failing = True
                await asyncio.sleep(retry_s)
                retry_s = min(retry_s * 2, self._max_backoff_s)
                continue
            if failing:
                log.info("pull: polling %s again", url)
            failing, retry_s = False, _FIRST_RETRY_S
            self._working.add(url)
            self.polling.set()

    async def _answer_loop(self, url: str) -> None:
        """Sends answers at once while the long poll of ``url`` waits (a short poll)."""
        ready = self._ready[url]
        while True:
            await ready.wait()
            ready.clear()
            if not self._answers[url]:
                continue
            try:
                await self._exchange(url, 0)
            except (*_POLL_ERRORS, _Refused) as exc:
                log.warning("pull: answering %s failed (%s); the long poll carries the answers", url, exc)
                await asyncio.sleep(_FIRST_RETRY_S)

    async def _exchange(self, url: str, wait_ms: int, *, carried: bool = False, leaving: bool = False
                        ) -> None:
        """One poll: send the answers ready for ``url``, serve the calls it brings (``carried``:
        the caller's next poll carries the answers given at once; ``leaving``: the last one)."""
        pending = self._answers[url]
        answers, self._answers[url] = pending[:_MAX_ANSWERS], pending[_MAX_ANSWERS:]
        if self._answers[url]:
            self._ready[url].set()
        request = {"address": self.address, "appname": self._app_name, "wait_ms": wait_ms, "answers": answers}
        if leaving:
            request["leaving"] = True
        body = orjson.dumps(request)
        try:
            status, raw = await self._transport.post(url, body, wait_ms > 0)
        except BaseException:
            self._answers[url][:0] = answers  # not sent (or not known to be): sent again
            raise
        try:
            answer = orjson.loads(raw)
        except orjson.JSONDecodeError:
            raise _Refused(f"HTTP {status}, not JSON") from None
        content = answer.get("content") if isinstance(answer, dict) else None
        if not isinstance(content, dict) or answer.get("code") != SUCCESS_CODE:
            msg = answer.get("msg") if isinstance(answer, dict) else None
            raise _Refused(f"HTTP {status}: {msg}")
        calls = content.get("calls") or []
        if not calls:
            return
        # Answers given at once ride the poll loop's next poll (no short poll of their own),
        # except in a large batch: every _CHUNK calls the answers so far leave at once in a
        # short poll (when none is in flight), so the admin works on them while the rest are
        # answered here. Batches split so, and the two sides work at the same time instead of
        # in turn.
        collecting = url in self._collecting
        self._collecting.add(url)
        left = iter(calls)
        try:
            for done, (call_id, path, call_body) in enumerate(left, 1):
                self._start(url, int(call_id), str(path), str(call_body).encode())
                if carried and done % _CHUNK == 0 and done < len(calls):
                    self._ready[url].set()
                    await asyncio.sleep(0)
        except asyncio.CancelledError:
            for call_id, path, call_body in left:  # taken: answered, or the admin waits in vain
                self._start(url, int(call_id), str(path), str(call_body).encode())
            raise
        finally:
            if not collecting:
                self._collecting.discard(url)
        if not carried and self._answers[url]:
            self._ready[url].set()  # the long poll waits on the admin: a short poll takes them

    def _start(self, url: str, call_id: int, path: str, body: bytes) -> None:
        """Answer a call: at once when it needs no waiting, else in a task of its own."""
        serve = self._serve(url, call_id, path, body)
        try:
            done, yielded = first_step(serve)
        except Exception:
            log.exception("pull: answering a %s call failed", path[:32])
            return
        if done:
            return
        task = asyncio.create_task(resume(serve, yielded))
        serving = self._serving[url]
        self._calls.add(task)
        serving.add(task)
        task.add_done_callback(self._calls.discard)
        task.add_done_callback(serving.discard)

    async def _serve(self, url: str, call_id: int, path: str, body: bytes) -> None:
        answer = await self._handle("/" + path, body)
        self.calls_served += 1
        self._answers[url].append([call_id, answer.decode()])
        if url not in self._collecting:
            self._ready[url].set()


class _Refused(JobringError):
    """The admin refused the poll (a wrong token, an address of another appname)."""
