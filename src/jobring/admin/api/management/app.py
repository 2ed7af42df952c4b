"""The management REST API app, mounted by the admin at ``/api/v1``.

OpenAPI at ``/api/v1/openapi.json``, docs at ``/api/v1/docs``. Errors are always
``{"error": "...", "field": "..."|null}``; bodies over ``max_body_bytes`` get 413 before
parsing and JSON nested too deep gets 400.
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI

from jobring.admin.api.json_errors import InternalErrors
from jobring.admin.api.management import (
    audit,
    auth,
    backfills,
    calendars,
    dashboard,
    flow,
    glue,
    groups,
    jobs,
    runs,
    subtasks,
    users,
    workflow_runs,
    workflow_schedules,
    workflows,
)
from jobring.admin.api.management.docs import install_docs
from jobring.admin.api.management.errors import install_error_handlers
from jobring.admin.api.management.limits import RequestGuard
from jobring.admin.api.management.services import ManagementServices
from jobring.admin.services.audit import SourceCapture
from jobring.protocol.edge import NoStore

API_PREFIX = "/api/v1"

DESCRIPTION = """\
Authenticate with a session (``POST /auth/login`` sets an HttpOnly cookie and returns a CSRF
token that must be sent as ``X-CSRF-Token`` on POST/PUT/PATCH/DELETE) or with a personal API
token (``Authorization: Bearer jr_...``, created with ``POST /tokens``).

Roles: **viewer** reads within permitted executor groups; **operator** also writes and
triggers there; **admin** may do everything, including users and settings.

Every error answer has the body ``{"error": "<message>", "field": "<field name>" | null}``.
"""


def _api_app() -> FastAPI:
    app = FastAPI(
        title="jobring management API",
        version="1",
        description=DESCRIPTION,
        openapi_url="/openapi.json",
        docs_url=None,  # served from the package by install_docs, not from a CDN
        redoc_url=None,
    )
    install_error_handlers(app)
    install_docs(app)
    for module in (auth, jobs, backfills, calendars, glue, runs, subtasks, flow, groups, users, dashboard,
                   audit, workflows, workflow_runs, workflow_schedules):
        app.include_router(module.router)
    return app


def management_app(services: ManagementServices) -> FastAPI:
    """Build the API app; mount it at ``/api/v1`` (its URLs are relative to the mount)."""
    app = _api_app()
    app.state.services = services
    app.add_middleware(RequestGuard, max_body_bytes=services.max_body_bytes)
    app.add_middleware(SourceCapture)
    # Sessions, tokens and job data: no answer is kept by a cache (the admin app adds it
    # outside everything too, for server errors).
    app.add_middleware(NoStore)
    app.add_middleware(InternalErrors)  # outermost: just inside Starlette's ServerErrorMiddleware
    return app


def openapi_document() -> dict[str, Any]:
    """The API's OpenAPI document, built without a store (the console's types come from it)."""
    return _api_app().openapi()
