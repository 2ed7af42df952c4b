"""Executor access tokens: each executor group has its own; the global one is opt-in.

A group's token lets an executor register under that group's appname and report the
results of that group's runs, nothing else. The global token (``JOBRING_ACCESS_TOKEN``,
off unless set) is valid for every group that has no token of its own, for XXL-JOB
executors that share one token: the admin sends a group's own token to its executors, so
an executor holding only the global token could not take that group's runs anyway.
Neither is a credential for job management (``api/addJob`` ... need a user API token).

The executor API checks tokens against an in-memory copy of the groups' tokens, re-read
at most every ``refresh_ms`` (and at once, at most once a second, for a token it does not
know), so a heartbeat or a callback costs no query for the token, and a rotated token is
refused on every node within ``refresh_ms``. A copy past half that age is re-read in the
background while it still answers, so under steady traffic no call waits for the read (a
callback did every ``refresh_ms``: a read on a workflow node start's path).
"""

from __future__ import annotations

import asyncio
import hmac
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING

from jobring.admin.security.tokens import typeable_secret
from jobring.admin.store.records import GroupGuard
from jobring.background import Background
from jobring.core.clock import Clock

if TYPE_CHECKING:
    from jobring.admin.store import Store

log = logging.getLogger(__name__)

GROUP_TOKEN_BYTES = 32
_MISS_REFRESH_MS = 1_000


def new_group_token() -> str:
    """A fresh random group token (43 URL-safe characters)."""
    return typeable_secret(GROUP_TOKEN_BYTES)


@dataclass(frozen=True, slots=True)
class TokenScope:
    """What a presented token may act for: every group (the global token) or some groups."""

    is_global: bool
    group_ids: frozenset[int]  # global: the groups with a token of their own (excluded)
    app_names: frozenset[str]  # global: those groups' app names, case-folded

    def allows_app(self, app_name: str) -> bool:
        if self.is_global:
            # Case-folded: MySQL's default collations match app names without case, so "MY-APP"
            # would reach the group "my-app" there.
            return app_name.casefold() not in self.app_names
        return app_name in self.app_names

    def allows_group(self, group_id: int) -> bool:
        if self.is_global:
            return group_id not in self.group_ids
        return group_id in self.group_ids

    def guard(self) -> GroupGuard:
        """The groups whose runs this token may report, as the condition the result's write
        carries (checked inside the write, never before it)."""
        if self.is_global:
            return GroupGuard(excluded=self.group_ids)
        return GroupGuard(only=self.group_ids)


def _same(expected: str, given: str) -> bool:
    return hmac.compare_digest(expected.encode(), given.encode())


class ExecutorTokens:
    """Resolves a presented executor token to its :class:`TokenScope`."""

    def __init__(
        self, store: Store, global_token: str | None, clock: Clock, *, refresh_ms: int = 2_000
    ) -> None:
        self._store = store
        self._global = global_token or None
        self._clock = clock
        self._refresh_ms = refresh_ms
        self._groups: list[tuple[int, str, str]] = []
        self._read_at: int | None = None
        self._forgotten = 0  # forget() calls so far
        self._lock = asyncio.Lock()
        self._ahead = Background(log)  # the re-read past half of refresh_ms
        self._closed = False  # no re-read in the background after close()

    @property
    def global_enabled(self) -> bool:
        return self._global is not None

    async def _reload(self, max_age_ms: int) -> None:
        async with self._lock:
            # Callers that waited for another's reload use its result.
            if self._read_at is not None and self._clock.now_ms() - self._read_at < max_age_ms:
                return
            forgotten = self._forgotten
            rows = await self._store.groups.tokens()
            self._groups = [(gid, app, token) for gid, app, token in rows if token]
            # A forget() during the read (a rotation on this node) may postdate what it saw:
            # then the copy is read again at the next check.
            self._read_at = self._clock.now_ms() if forgotten == self._forgotten else None

    def _match(self, given: str) -> TokenScope | None:
        if self._global is not None and _same(self._global, given):
            return TokenScope(
                True,
                frozenset(g for g, _, _ in self._groups),
                frozenset(a.casefold() for _, a, _ in self._groups),
            )
        # Every group is compared (constant time per token), so the answer's timing does
        # not tell how much of a token matched.
        hits = [(gid, app) for gid, app, token in self._groups if _same(token, given)]
        if not hits:
            return None
        return TokenScope(False, frozenset(g for g, _ in hits), frozenset(a for _, a in hits))

    async def scope(self, given: str | None) -> TokenScope | None:
        """The scope of ``given``, or None when it is no valid executor token."""
        if not given:
            return None
        age = None if self._read_at is None else self._clock.now_ms() - self._read_at
        if age is None or age >= self._refresh_ms:
            await self._reload(self._refresh_ms)
        elif (age >= self._refresh_ms // 2 and not self._ahead and not self._lock.locked()
              and not self._closed):
            self._ahead.spawn(self._reload(self._refresh_ms // 2), "re-reading the executor tokens")
        found = self._match(given)
        if found is None:
            # A group created or rotated on another node just now; at most one re-read per
            # second however many unknown tokens arrive.
            await self._reload(_MISS_REFRESH_MS)
            found = self._match(given)
        return found

    def forget(self) -> None:
        """Re-read the tokens on the next check (after a rotation on this node), even when a
        read under way, begun before the rotation, ends first."""
        self._read_at = None
        self._forgotten += 1

    async def close(self, wait_s: float = 1.0) -> None:
        """At the admin's stop: let a re-read in the background end (at most ``wait_s``, then
        it is cancelled: it must not outlive the store); none begins after it."""
        self._closed = True
        for task in await self._ahead.wait(wait_s):
            task.cancel()
        await self._ahead.wait()
