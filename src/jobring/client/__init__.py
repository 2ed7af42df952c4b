"""Python client of the admin's management REST API (``/api/v1``).

    from jobring.client import AdminClient

    with AdminClient("http://127.0.0.1:8080", token="jr_...") as admin:
        page = admin.jobs.list(group=1, trigger_status=1)
        admin.jobs.trigger(page.items[0]["id"], executor_param="once")

:class:`AsyncAdminClient` offers the same methods as coroutines. Errors the admin reports
raise :class:`AdminApiError` (status, message, field); an unreachable admin raises
:class:`AdminConnectionError`. A run's ``state`` is one of :class:`RunState`'s values;
``runs.list(state=...)`` filters on them.
"""

from jobring.client.clients import AdminClient, AsyncAdminClient
from jobring.client.errors import AdminApiError, AdminClientError, AdminConnectionError
from jobring.client.page import Page
from jobring.core.runstate import RunState

__all__ = [
    "AdminApiError",
    "AdminClient",
    "AdminClientError",
    "AdminConnectionError",
    "AsyncAdminClient",
    "Page",
    "RunState",
]
