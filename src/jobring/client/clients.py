"""The two admin clients: :class:`AdminClient` (blocking) and :class:`AsyncAdminClient`.

Both send the same :class:`~jobring.client.call.Call` descriptions through
:class:`~jobring.client.core.ClientCore`; only the I/O differs.
"""

from __future__ import annotations

from types import TracebackType
from typing import Any, Generic, Self, TypeVar

import httpx

from jobring.client.call import Async, Call, M, Sync
from jobring.client.core import DEFAULT_API_PREFIX, DEFAULT_URL, ClientCore
from jobring.client.endpoints import (
    AuditApi,
    AuthApi,
    CalendarsApi,
    DashboardApi,
    GlueApi,
    GroupsApi,
    JobsApi,
    RunsApi,
    SettingsApi,
    TokensApi,
    UsersApi,
    WorkflowsApi,
)

T = TypeVar("T")
DEFAULT_TIMEOUT_S = 10.0


class _Endpoints(Generic[M]):
    """The endpoint groups, bound to the client's send function."""

    auth: AuthApi[M]
    tokens: TokensApi[M]
    jobs: JobsApi[M]
    glue: GlueApi[M]
    runs: RunsApi[M]
    groups: GroupsApi[M]
    users: UsersApi[M]
    dashboard: DashboardApi[M]
    settings: SettingsApi[M]
    audit: AuditApi[M]
    workflows: WorkflowsApi[M]
    calendars: CalendarsApi[M]

    def _bind(self, send: Any) -> None:
        self.auth = AuthApi(send)
        self.tokens = TokensApi(send)
        self.jobs = JobsApi(send)
        self.glue = GlueApi(send)
        self.runs = RunsApi(send)
        self.groups = GroupsApi(send)
        self.users = UsersApi(send)
        self.dashboard = DashboardApi(send)
        self.settings = SettingsApi(send)
        self.audit = AuditApi(send)
        self.workflows = WorkflowsApi(send)
        self.calendars = CalendarsApi(send)


class AdminClient(_Endpoints[Sync]):
    """Blocking client of the admin's management API (``/api/v1``).

    Authenticate with an API token (``token=``, preferred for scripts) or call
    :meth:`login`; the session cookie and CSRF header are then handled for you.
    ``transport`` replaces the network (tests pass an in-process transport).
    """

    def __init__(
        self,
        url: str = DEFAULT_URL,
        *,
        token: str | None = None,
        transport: httpx.BaseTransport | None = None,
        timeout: float = DEFAULT_TIMEOUT_S,
        api_prefix: str = DEFAULT_API_PREFIX,
    ) -> None:
        self._core = ClientCore(url, token, api_prefix)
        self._http = httpx.Client(transport=transport, timeout=timeout)
        self._bind(self._send)

    @property
    def url(self) -> str:
        return self._core.url

    def _send(self, call: Call[T]) -> T:
        request = self._http.build_request(**self._core.request_args(call, self._http.cookies))
        try:
            response = self._http.send(request)
        except httpx.TransportError as exc:
            raise self._core.connection_error(exc) from exc
        return self._core.read(call, response)

    def login(self, username: str, password: str) -> dict[str, Any]:
        """Open a session as ``username``; returns what the admin says about the user."""
        return self.auth.login(username, password)

    def logout(self) -> None:
        self.auth.logout()

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


class AsyncAdminClient(_Endpoints[Async]):
    """Asyncio client of the admin's management API; the same methods as
    :class:`AdminClient`, each returning a coroutine."""

    def __init__(
        self,
        url: str = DEFAULT_URL,
        *,
        token: str | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
        timeout: float = DEFAULT_TIMEOUT_S,
        api_prefix: str = DEFAULT_API_PREFIX,
    ) -> None:
        self._core = ClientCore(url, token, api_prefix)
        self._http = httpx.AsyncClient(transport=transport, timeout=timeout)
        self._bind(self._send)

    @property
    def url(self) -> str:
        return self._core.url

    async def _send(self, call: Call[T]) -> T:
        request = self._http.build_request(**self._core.request_args(call, self._http.cookies))
        try:
            response = await self._http.send(request)
        except httpx.TransportError as exc:
            raise self._core.connection_error(exc) from exc
        return self._core.read(call, response)

    async def login(self, username: str, password: str) -> dict[str, Any]:
        """Open a session as ``username``; returns what the admin says about the user."""
        return await self.auth.login(username, password)

    async def logout(self) -> None:
        await self.auth.logout()

    async def aclose(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()
