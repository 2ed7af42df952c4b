"""``api/pull``: the long poll of jobring pull executors (docs/dispatch.md, "Pull mode").

Authenticated like every executor call (``XXL-JOB-ACCESS-TOKEN``: the group's executor
token or the global one). Body::

    {"address": "pull://<name>/", "appname": "<app>", "wait_ms": 20000,
     "answers": [[<call id>, "<the executor's answer, ReturnT JSON>"], ...]}

``"leaving": true`` (with ``wait_ms`` 0): the executor's last request as it stops, sending
its last answers; it takes no calls, and the node stops delivering to it at once.

Answer: a ReturnT whose ``content`` is ``{"calls": [[<call id>, "<path>", "<body JSON>"], ...]}``
(``path``: run, kill, log, beat, idleBeat, received). The token must be valid for
``appname``; the mailbox polled is that of (``appname``, ``address``), so a token never
takes, answers nor blocks the calls of another appname's executor, even one at the same
``pull://`` name, and no answer says whether another appname polls an address. An answer
whose id is not a call taken by this mailbox is ignored without a word. A poll beyond the
appname's limits (docs/dispatch.md, "Pull mode") is refused with 429.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import orjson

from jobring.admin.dispatch.pull import PullHub, PullLimit
from jobring.admin.services.executor_tokens import TokenScope
from jobring.core.addresses import AddressRefused, address_key, check_executor_address, is_polled_address
from jobring.protocol.models import ReturnT

MAX_WAIT_MS = 30_000
MAX_ANSWERS = 1_000


class PullApi:
    def __init__(self, hub: PullHub) -> None:
        self._hub = hub

    async def poll(
        self, body: bytes, scope: TokenScope, app_header: str | None, receive: Callable[[], Awaitable[Any]],
    ) -> tuple[ReturnT, int]:
        """(answer, HTTP status) of one poll."""
        try:
            request = orjson.loads(body)
        except orjson.JSONDecodeError:
            return ReturnT.fail("pull: the body is not JSON"), 400
        if not isinstance(request, dict):
            return ReturnT.fail("pull: the body must be a JSON object"), 400
        address, app = request.get("address"), request.get("appname")
        wait_ms, answers = request.get("wait_ms"), request.get("answers")
        if not isinstance(address, str) or not is_polled_address(address):
            return ReturnT.fail("pull: address must be a pull://<name>/ or broker://<name>/ address"), 400
        try:
            key = address_key(check_executor_address(address))
        except AddressRefused as exc:
            return ReturnT.fail(f"pull: address refused: {exc}"), 400
        if not isinstance(app, str) or not app or len(app) > 64:
            return ReturnT.fail("pull: appname must be 1-64 characters"), 400
        if not scope.allows_app(app) or (app_header is not None and app_header != app):
            return ReturnT.fail(f"pull: access token not valid for appname {app!r}"), 403
        if not isinstance(wait_ms, int) or isinstance(wait_ms, bool) or not 0 <= wait_ms <= MAX_WAIT_MS:
            return ReturnT.fail(f"pull: wait_ms must be an integer 0-{MAX_WAIT_MS}"), 400
        leaving = request.get("leaving", False)
        if not isinstance(leaving, bool) or (leaving and wait_ms):
            return ReturnT.fail("pull: leaving must be true or false (true only with wait_ms 0)"), 400
        parsed = _answers(answers)
        if parsed is None:
            return ReturnT.fail(f"pull: answers must be at most {MAX_ANSWERS} [id, text] pairs"), 400
        self._hub.answer(key, app, parsed)
        try:
            # The global token's polls, whatever appnames they name, share one set of limits.
            calls = await self._hub.poll(key, app, wait_ms, _disconnect(receive) if wait_ms else None,
                                         quota="" if scope.is_global else app, leaving=leaving)
        except PullLimit as exc:
            return ReturnT.fail(f"pull: too many polls: {exc}"), 429
        content = {"calls": [[c.id, c.path, c.body.decode("utf-8", errors="replace")] for c in calls]}
        return ReturnT.success(content), 200


def _answers(value: object) -> list[tuple[int, bytes]] | None:
    if value is None:
        return []
    if not isinstance(value, list) or len(value) > MAX_ANSWERS:
        return None
    out: list[tuple[int, bytes]] = []
    for item in value:
        if (not isinstance(item, list) or len(item) != 2 or not isinstance(item[0], int)
                or isinstance(item[0], bool) or not isinstance(item[1], str)):
            return None
        out.append((item[0], item[1].encode()))
    return out


async def _disconnect(receive: Callable[[], Awaitable[Any]]) -> None:
    """Completes when the poll's client has gone (the ASGI server's http.disconnect)."""
    while True:
        message = await receive()
        if message.get("type") == "http.disconnect":
            return
