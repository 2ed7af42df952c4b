"""Run results to the admin: batched, with a durable spool for what cannot be delivered.

One task sends everything. Results queue in memory and go out in batches (``api/callback``,
a JSON array). A batch no admin takes is appended to a spool file (one JSON line per
result, fsync'd) and retried with exponential backoff, also after a restart: the spool is
loaded on start. Entries are unique by logId (the first outcome recorded wins), so a result
is never sent with two different outcomes; a repeat of the same outcome is ignored by the admin.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections import deque
from collections.abc import Callable, Sequence
from pathlib import Path

import httpx
import orjson

from jobring.errors import JobringError
from jobring.executor.adminhttp import AdminHttp, AdminHttpError
from jobring.protocol.models import (
    ACCESS_TOKEN_HEADER,
    APPNAME_HEADER,
    MSG_TOKEN_WRONG,
    HandleCallbackParam,
    ReturnT,
)

log = logging.getLogger(__name__)

SPOOL_FILE_NAME = "callback-spool.jsonl"
_INITIAL_BACKOFF_S = 0.5
# Under a steady stream of results, one post per this long carries what gathered (a post
# costs far more than an item); after a quieter spell a result goes out at once. Short, so a
# result waits at most this long: at 1,000 runs/s about 2 results per post.
LINGER_S = 0.002
_I64, _U64 = -(2**63), 2**64 - 1  # the integers JSON (orjson) carries


class AdminUnavailable(JobringError):
    """No admin address took the request; ``token_refused`` when one answered that the
    access token is wrong (retrying will not help until the token is fixed)."""

    def __init__(self, message: str, *, token_refused: bool = False) -> None:
        super().__init__(message)
        self.token_refused = token_refused


class AdminRefused(AdminUnavailable):
    """An admin answered that the request itself is malformed (HTTP 400/413): sending the
    same request again cannot succeed."""


_REFUSED_STATUSES = (400, 413)


async def post_to_admins(
    client: httpx.AsyncClient | AdminHttp,
    admin_urls: Sequence[str],
    api: str,
    body: bytes,
    headers: dict[str, str],
) -> str:
    """POST to each admin address in order until one answers ReturnT code 200; returns
    the admin base URL that took it."""
    problems: list[str] = []
    token_refused = False
    refused = False
    for base in admin_urls:
        url = base + api
        try:
            if isinstance(client, AdminHttp):
                status, content = await client.post(url, body, headers)
            else:
                response = await client.post(url, content=body, headers=headers)
                status, content = response.status_code, response.content
        except (httpx.HTTPError, AdminHttpError) as exc:
            problems.append(f"{url}: {type(exc).__name__}: {exc}")
            continue
        if status != 200:
            refused = refused or status in _REFUSED_STATUSES
            problems.append(f"{url}: HTTP {status} {content[:200]!r}")
            continue
        try:
            answer = ReturnT.decode(content)
        except ValueError:
            problems.append(f"{url}: answer is not a ReturnT: {content[:200]!r}")
            continue
        if answer.ok:
            return base
        token_refused = token_refused or answer.msg == MSG_TOKEN_WRONG
        problems.append(f"{url}: code {answer.code} {answer.msg}")
    why = "; ".join(problems) or "no admin address configured"
    if refused:
        raise AdminRefused(why)
    raise AdminUnavailable(why, token_refused=token_refused)


def admin_headers(access_token: str | None, app_name: str | None = None) -> dict[str, str]:
    headers = {"Content-Type": "application/json;charset=UTF-8"}
    if access_token:
        headers[ACCESS_TOKEN_HEADER] = access_token
    if app_name:
        # Required by XXL-JOB 3.5 admins; earlier admins ignore headers they do not know.
        headers[APPNAME_HEADER] = app_name
    return headers


def callback_dialect(protocol: str) -> bool | None:
    """True: 3.5 callback bodies; False: 2.x-3.4 ones; None ("auto"): found out on the
    first delivery."""
    return {"2": False, "3": False, "3.5": True}.get(protocol)


class CallbackSpool:
    """Results not yet delivered, kept in a file one JSON object per line."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._items: dict[int, HandleCallbackParam] = {}

    def __len__(self) -> int:
        return len(self._items)

    def load(self) -> None:
        self._items.clear()
        try:
            raw = self.path.read_bytes()
        except FileNotFoundError:
            return
        for number, line in enumerate(raw.splitlines(), 1):
            if not line.strip():
                continue
            try:
                item = HandleCallbackParam.decode(orjson.loads(line))
            except (orjson.JSONDecodeError, ValueError):
                # A torn last line after a crash: everything before it is intact.
                log.warning("callback spool %s: skipping unreadable line %d", self.path, number)
                continue
            self._items.setdefault(item.log_id, item)

    def items(self) -> list[HandleCallbackParam]:
        return list(self._items.values())

    def append(self, batch: Sequence[HandleCallbackParam]) -> None:
        new = [item for item in batch if item.log_id not in self._items]
        if not new:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        data = b"".join(orjson.dumps(item.to_dict()) + b"\n" for item in new)
        with open(self.path, "ab") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        for item in new:
            self._items[item.log_id] = item

    def remove(self, delivered: Sequence[HandleCallbackParam]) -> None:
        for item in delivered:
            self._items.pop(item.log_id, None)
        if not self._items:
            with contextlib.suppress(FileNotFoundError):
                self.path.unlink()
            return
        tmp = self.path.with_suffix(".tmp")
        with open(tmp, "wb") as fh:
            fh.write(b"".join(orjson.dumps(i.to_dict()) + b"\n" for i in self._items.values()))
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, self.path)


class CallbackSender:
    """Queues results (``report`` is non-blocking) and delivers them from one task."""

    def __init__(
        self,
        client: httpx.AsyncClient,
        admin_urls: Sequence[str],
        access_token: str | None,
        spool_dir: str | os.PathLike[str],
        *,
        batch_size: int = 1000,
        max_backoff_s: float = 30.0,
        linger_s: float = LINGER_S,
        clock: Callable[[], float] | None = None,
        app_name: str | None = None,
        protocol: str = "auto",
    ) -> None:
        # Plain-http admins through the lean path (posts are frequent: see LINGER_S).
        timeout = client.timeout
        self._http = AdminHttp(client, max(timeout.connect or 0.0, timeout.read or 0.0) or 30.0)
        self._admin_urls = list(admin_urls)
        self._headers = admin_headers(access_token, app_name)
        # The admin's callback dialect (see callback_dialect); kept once an admin took a batch.
        self.v35: bool | None = callback_dialect(protocol)
        self._spool = CallbackSpool(Path(spool_dir) / SPOOL_FILE_NAME)
        self._batch_size = batch_size
        self._max_backoff_s = max_backoff_s
        self._linger_s = linger_s
        self._last_post_at = float("-inf")
        self._pending: deque[HandleCallbackParam] = deque()
        self._wakeup = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._closing = False
        self._backoff_s = _INITIAL_BACKOFF_S
        self._retry_at = 0.0
        self._clock = clock or asyncio.get_running_loop().time
        self.delivered_count = 0
        # For Executor.status(): the last delivery's outcome (None before the first one).
        self.last_error: str | None = None
        self.last_ok: bool | None = None
        self.dropped_count = 0

    @property
    def pending_count(self) -> int:
        return len(self._pending)

    @property
    def spooled_count(self) -> int:
        return len(self._spool)

    def report(self, result: HandleCallbackParam) -> None:
        """Queue one result; called from the event loop, never blocks.

        A result that cannot be sent at all (a value JSON cannot carry) is dropped with an
        error in the log: kept, it would fail every batch and spool write it is part of.
        """
        try:
            # Encoded once here only when it may fail (the common result, ints in JSON's
            # 64-bit range and no message, always encodes): a message may hold a lone
            # surrogate, workflow additions anything.
            if (result.handle_msg is not None or result.workflow_context is not None
                    or not _I64 <= result.log_id <= _U64 or not _I64 <= result.log_date_tim <= _U64
                    or not _I64 <= result.handle_code <= _U64):
                orjson.dumps(result.to_dict())
        except TypeError as exc:
            self.dropped_count += 1
            log.error("callback: result of logId=%r cannot be encoded, dropped: %s", result.log_id, exc)
            return
        self._pending.append(result)
        self._wakeup.set()

    async def start(self) -> None:
        await asyncio.to_thread(self._spool.load)
        if len(self._spool):
            log.info("callback spool: %d undelivered result(s) loaded from %s",
                     len(self._spool), self._spool.path)
        self._task = asyncio.create_task(self._loop(), name="jobring-callback-sender")

    async def close(self, flush_timeout_s: float = 5.0) -> None:
        """Deliver what is queued (within flush_timeout_s); spool whatever the admin did not take."""
        self._closing = True
        self._wakeup.set()
        if self._task is not None:
            try:
                await asyncio.wait_for(asyncio.shield(self._task), flush_timeout_s)
            except TimeoutError:
                self._task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await self._task
            self._task = None
        if self._pending:
            batch = list(self._pending)
            self._pending.clear()
            await asyncio.to_thread(self._spool.append, batch)
            log.warning("callback: %d result(s) spooled at shutdown for delivery after restart", len(batch))
        await self._http.aclose()

    async def _loop(self) -> None:
        while True:
            if not self._pending and (self._closing or not len(self._spool)):
                if self._closing:
                    return
                await self._wait(None)
                continue
            try:
                await self._step()
            except Exception:
                # The one task that delivers every result must outlive any single failure
                # (a spool write that failed, a bug): log it, back off, go on.
                log.exception("callback sender: unexpected error; retrying in %.1f s", self._backoff_s)
                self._schedule_retry("unexpected error")
                await self._wait(self._retry_at - self._clock())

    async def _step(self) -> None:
        if len(self._spool) and self._clock() >= self._retry_at:
            await self._retry_spool()
        if self._pending:
            await self._send_pending()
        elif len(self._spool) and not self._closing:
            await self._wait(self._retry_at - self._clock())

    async def _wait(self, max_wait_s: float | None) -> None:
        if max_wait_s is not None and max_wait_s <= 0:
            return
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._wakeup.wait(), max_wait_s)
        self._wakeup.clear()

    async def _send_pending(self) -> None:
        since_last = self._clock() - self._last_post_at
        if since_last < self._linger_s and len(self._pending) < self._batch_size and not self._closing:
            # Under sustained load, gather results for a moment: one request per linger
            # period carries many results (HTTP per request costs far more than per item).
            # After a quiet period the first result goes out at once.
            await asyncio.sleep(self._linger_s - since_last)
        batch = [self._pending.popleft() for _ in range(min(self._batch_size, len(self._pending)))]
        if len(self._spool) and self._clock() < self._retry_at:
            # The admin failed recently: do not hammer it; keep the results safe instead.
            await asyncio.to_thread(self._spool.append, batch)
            return
        try:
            self._last_post_at = self._clock()
            delivered = await self._deliver(batch)
        except AdminUnavailable as exc:
            await asyncio.to_thread(self._spool.append, batch)
            self._schedule_retry(f"{len(batch)} result(s) spooled: {exc}")
            return
        except BaseException:
            # Stopped mid-request (close() spools it) or an unexpected error (the loop logs
            # it and tries again later): the batch goes back, it is not lost.
            self._pending.extendleft(reversed(batch))
            raise
        self.delivered_count += delivered

    async def _retry_spool(self) -> None:
        items = self._spool.items()
        for start in range(0, len(items), self._batch_size):
            batch = items[start:start + self._batch_size]
            try:
                delivered = await self._deliver(batch)
            except AdminUnavailable as exc:
                self._schedule_retry(f"spool retry failed ({len(self._spool)} waiting): {exc}")
                return
            await asyncio.to_thread(self._spool.remove, batch)
            self.delivered_count += delivered
        log.info("callback spool delivered")
        self._backoff_s = _INITIAL_BACKOFF_S

    def _schedule_retry(self, why: str) -> None:
        self.last_error, self.last_ok = f"callback: {why}", False
        log.warning("callback: %s; retry in %.1f s", why, self._backoff_s)
        self._retry_at = self._clock() + self._backoff_s
        self._backoff_s = min(self._backoff_s * 2, self._max_backoff_s)

    async def _deliver(self, batch: Sequence[HandleCallbackParam]) -> int:
        """Post a batch; when an admin refuses it as malformed, post its items one by one and
        drop (with an error in the log) only those refused alone, so one bad result never
        holds back the others. Returns how many were delivered; raises AdminUnavailable when
        no admin takes them."""
        try:
            await self._post(batch)
        except AdminRefused as exc:
            if len(batch) > 1:
                log.warning("callback: a batch of %d result(s) was refused (%s); sending them one by one",
                            len(batch), exc)
                return sum([await self._deliver([item]) for item in batch])
            self.dropped_count += 1
            log.error("callback: the admin refused the result of logId=%r, dropped: %s", batch[0].log_id, exc)
            return 0
        return len(batch)

    async def _post(self, batch: Sequence[HandleCallbackParam]) -> None:
        if self.v35 is not None:
            await self._post_as(batch, v35=self.v35)
        else:
            # protocol="auto": a 2.x-3.4 admin takes the bare array and a 3.5 admin refuses it
            # (it reads an object); the first body an admin takes fixes the dialect.
            try:
                await self._post_as(batch, v35=False)
                self.v35 = False
            except AdminUnavailable as first:
                if first.token_refused:
                    raise
                try:
                    await self._post_as(batch, v35=True)
                except AdminUnavailable:
                    raise first from None
                self.v35 = True
                log.info("callback: the admin speaks XXL-JOB 3.5 (callbackList bodies)")
        self.last_ok = True

    async def _post_as(self, batch: Sequence[HandleCallbackParam], *, v35: bool) -> None:
        body = HandleCallbackParam.encode_batch(batch, v35=v35)
        await post_to_admins(self._http, self._admin_urls, "api/callback", body, self._headers)
