"""Schemathesis over the published OpenAPI document: every operation, a bounded number of
generated requests each (valid and invalid), against a live server with an admin session.

Checks: no 5xx, no request the schema allows is refused as invalid (400/422), every status
is documented, content types and bodies match the schema.
"""

from __future__ import annotations

import asyncio
import functools
import os
import re
import socket
import threading
import zoneinfo
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any

import jsonschema_rs
import pytest
import requests
import schemathesis
import uvicorn
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from schemathesis.checks import not_a_server_error
from schemathesis.core import NOT_SET
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    positive_data_acceptance,
    response_schema_conformance,
    status_code_conformance,
)
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Mount

from jobring.admin.api.management import ManagementServices, management_app
from jobring.admin.dispatch.client import ExecutorClient
from jobring.admin.security.passwords import hash_password
from jobring.admin.security.roles import Role
from jobring.admin.services.bootstrap import Secrets
from jobring.admin.services.settings import AdminSettings
from jobring.admin.services.workflows import WorkflowDriver
from jobring.admin.store import Store, create_engine
from jobring.admin.store.records import JobGroup, JobInfo
from jobring.admin.trigger.trigger import TriggerService
from jobring.core.clock import SystemClock
from tests.admin.api_harness import _log_answer
from tests.admin.executor_double import ExecutorDouble

# Per operation. make test runs a fixed budget with fixed examples (a deterministic suite);
# make fuzz (JOBRING_FUZZ_EXAMPLES=200) explores with fresh random examples.
MAX_EXAMPLES = int(os.environ.get("JOBRING_FUZZ_EXAMPLES", "20"))
EXPLORE = "JOBRING_FUZZ_EXAMPLES" in os.environ
PASSWORD = "fuzzing admin password"


def _spec() -> dict[str, Any]:
    # The document does not depend on the services; an unconnected store is enough.
    services = ManagementServices(
        store=Store(create_engine("sqlite+aiosqlite:///:memory:")),
        settings=AdminSettings(),
        secrets=Secrets(access_token="x", session_secret="y"),
    )
    spec: dict[str, Any] = management_app(services).openapi()
    return spec


def _cron() -> st.SearchStrategy[str]:
    """Quartz cron expressions that fire again (the document's "quartz-cron" format)."""

    def field(low: int, high: int) -> st.SearchStrategy[str]:
        number = st.integers(low, high).map(str)
        step = st.tuples(st.sampled_from(["*", str(low)]), st.integers(1, high - low)).map(
            lambda p: f"{p[0]}/{p[1]}")
        return st.one_of(st.just("*"), number, step,
                         st.lists(st.integers(low, high), min_size=2, max_size=4, unique=True).map(
                             lambda ns: ",".join(map(str, sorted(ns)))))

    days = st.one_of(st.tuples(field(1, 28), st.just("?")), st.tuples(st.just("?"), field(1, 7)))
    return st.builds(lambda s, m, h, d, mo: f"{s} {m} {h} {d[0]} {mo} {d[1]}",
                     field(0, 59), field(0, 59), field(0, 23), days, field(1, 12))


_DAYS = st.dates(date(1970, 1, 1), date(2099, 12, 31))
_CLOCK = st.tuples(st.integers(0, 23), st.integers(0, 59)).map(lambda hm: f"{hm[0]:02d}:{hm[1]:02d}")
_INSTANTS = st.datetimes(datetime(1970, 1, 2), datetime(2099, 12, 30), timezones=st.just(UTC))

# The formats the document names that a generic generator cannot know.
schemathesis.openapi.format("quartz-cron", _cron())
schemathesis.openapi.format("calendar-date", _DAYS.map(date.isoformat))
schemathesis.openapi.format("time-of-day", _CLOCK)
schemathesis.openapi.format("calendar-instant", _INSTANTS.map(lambda d: d.isoformat()))
schemathesis.openapi.format("offset-date-time", _INSTANTS.map(lambda d: d.isoformat()))
schemathesis.openapi.format("iana-time-zone", st.sampled_from(sorted(zoneinfo.available_timezones())))
SPEC = _spec()
schema = schemathesis.openapi.from_dict(SPEC)


def _body_is_valid(case: schemathesis.Case) -> bool:
    """Whether the body sent is valid for the operation's documented request body."""
    operation = SPEC["paths"].get(case.operation.path, {}).get(case.method.lower())
    if operation is None:  # a probe with a method the document does not list
        return False
    content = operation.get("requestBody", {}).get("content", {}).get("application/json")
    if content is None:
        return True
    if case.body is NOT_SET:
        return not operation["requestBody"].get("required", False)
    if isinstance(case.body, bytes | bytearray):
        return False  # raw bytes: a malformed-JSON probe, not a document value
    return bool(_body_validator(case.operation.path, case.method.lower()).is_valid(case.body))


@functools.cache
def _body_validator(path: str, method: str) -> Any:
    """The operation's request body validator, compiled once: compiled per case (the whole
    document's components each time) it was a fifth of this test's CPU."""
    schema = SPEC["paths"][path][method]["requestBody"]["content"]["application/json"]["schema"]
    root = {"$ref": "#/$defs/body", "$defs": {"body": schema}, "components": SPEC["components"]}
    return jsonschema_rs.validator_for(root)


# Fields whose valid values depend on the server's state, the clock, another field or a policy,
# which no schema can state: a listing's cursor must be one the server issued; an address to
# disable must be one of the group's; a token's expiry must lie in the future (and within the
# longest lifetime from now); a dashboard spans at most 90 days from from_day to to_day; a
# password must not be known-weak or too simple (docs/security.md); a delayed run's instant
# (``at``) must lie ahead of the clock.
STATEFUL_FIELDS = frozenset({"cursor", "address", "expires_at", "from_day", "password", "at"})
# A workflow's graph must be acyclic and connected and name jobs that exist (refusals name
# ``nodes[i]...`` or ``edges[i]...``): rules across items and the store, not a schema's.
GRAPH_FIELDS = ("nodes", "edges")
# Rules across a body's fields: a delayed run gives either ``at`` or ``delay_ms``; a backfill
# either ``start`` and ``end`` (in that order) or ``dates``. (Not stated as a oneOf in the
# document: the console's types generated from it could not be used as request bodies.)
ACROSS_FIELDS = {"/jobs/{job_id}/trigger-at": {"at", "delay_ms"},
                 "/jobs/{job_id}/backfill": {"start", "end", "dates"}}
# Calendars and timing rules (docs/time.md): a name must be free, a job's calendars must exist;
# an end must follow its start; an inverted calendar must name some time and not use workdays;
# an .ics file's text is checked by parsing it, and a pause reason must be printable.
_RELATIONAL = re.compile(
    r"^(name|ics|invert|workdays|reason|job_group|timing\.calendars\[\d+\]|timing\.end_at"
    r"|(date_ranges|day_windows|periods)\[\d+\]\.end)$")


def _refused_field(response: Any) -> object:
    try:
        body = response.json()
    except ValueError:
        return None
    return body.get("field") if isinstance(body, dict) else None


def valid_request_accepted(ctx: Any, response: Any, case: schemathesis.Case) -> bool | None:
    """positive_data_acceptance, for requests that really are valid: a case schemathesis
    tagged positive after shrinking may carry a body outside the schema (e.g. ``0``)."""
    if not _body_is_valid(case):
        return None
    refused = _refused_field(response)
    if response.status_code == 422 and refused in STATEFUL_FIELDS:
        return None
    if response.status_code == 422 and isinstance(refused, str) and re.fullmatch(r"addresses\.\d+", refused):
        return None  # not an executor address, or one the admin's address policy refuses
    if response.status_code == 422 and isinstance(refused, str) and refused.startswith("alarm_targets."):
        # An alarm target's keys depend on its kind (an object of free keys in the schema); a
        # job body with a timing field draws other examples than before, some with targets.
        return None
    timed = case.operation.path.startswith("/calendars") or case.operation.path == "/schedules/preview"
    if response.status_code in (400, 422) and isinstance(refused, str) and _RELATIONAL.match(refused) and (
            timed or refused.startswith("timing.") or refused == "reason"):
        return None
    if response.status_code == 422 and refused in ACROSS_FIELDS.get(case.operation.path, ()):
        return None
    if response.status_code == 422 and isinstance(refused, str) and refused.endswith("key_limit"):
        return None  # a per-key limit needs a concurrency key (a blank one is none)
    if response.status_code == 422 and isinstance(refused, str) and refused.startswith(GRAPH_FIELDS):
        return None
    result: bool | None = positive_data_acceptance(ctx, response, case)
    return result


@dataclass
class LiveAdmin:
    base_url: str
    session: requests.Session
    headers: dict[str, str] = field(default_factory=dict)


async def _prepare(db: Path) -> tuple[Starlette, Store, TriggerService, ExecutorClient]:
    store = await Store.open(f"sqlite+aiosqlite:///{db}")
    double = ExecutorDouble(["exec-a:9999"])
    for address in double.addresses:  # an executor that serves run logs (else /log is a 502)
        double.answer(address, "log", _log_answer)
    client = ExecutorClient(access_token="fuzz", connect=double.connect)
    trigger = TriggerService(
        store, client, node_id="fuzz", clock=SystemClock(), admin_timezone="UTC"
    )
    services = ManagementServices(
        store=store,
        settings=AdminSettings(glue_enabled=True),
        secrets=Secrets(access_token="fuzz", session_secret="fuzz-session"),
        trigger=trigger,
        executors=client,
    )
    services.workflows = WorkflowDriver(store, trigger, client, services.clock, node_id="fuzz")
    group = await store.groups.create(
        JobGroup(app_name="fuzz", title="fuzz", address_type=1, address_list=",".join(double.addresses)),
        services.now_naive_utc(),
    )
    for n in range(3):
        await store.jobs.create(JobInfo(job_group=group, job_desc=f"job {n}", executor_handler="h"))
    await store.users.create(username="admin", role=int(Role.ADMIN), password_hash=hash_password(PASSWORD))
    # As in the admin: paths the mount's pattern cannot match (e.g. a newline in an id)
    # are answered by the outer app, in the API's error shape.
    app = Starlette(
        routes=[Mount("/api/v1", app=management_app(services))], exception_handlers={404: _not_found}
    )
    return app, store, trigger, client


async def _not_found(request: Request, exc: Exception) -> JSONResponse:
    return JSONResponse({"error": "Not Found", "field": None}, status_code=404)


@pytest.fixture(scope="module")
def live_admin(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveAdmin]:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    ready = threading.Event()
    holder: dict[str, Any] = {}

    async def serve() -> None:
        app, store, trigger, client = await _prepare(tmp_path_factory.mktemp("fuzz") / "fuzz.db")
        server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off"))
        holder["server"] = server
        ready.set()
        try:
            await server.serve(sockets=[sock])
        finally:
            await trigger.close()
            await client.aclose()
            await store.close()

    thread = threading.Thread(target=lambda: asyncio.run(serve()), name="fuzz-admin", daemon=True)
    thread.start()
    try:
        assert ready.wait(30)
        base = f"http://127.0.0.1:{port}/api/v1"
        for _ in range(300):
            if holder["server"].started:
                break
            threading.Event().wait(0.05)  # a bounded poll for the server's own start flag
        login = requests.post(
            f"{base}/auth/login", json={"username": "admin", "password": PASSWORD}, timeout=10
        )
        assert login.status_code == 200, login.text
        cookie = "; ".join(f"{k}={v}" for k, v in login.cookies.items())
        with requests.Session() as session:  # keep-alive: one connection for the whole run
            yield LiveAdmin(base, session, {"Cookie": cookie, "X-CSRF-Token": login.json()["csrf_token"]})
    finally:
        if "server" in holder:
            holder["server"].should_exit = True
        thread.join(30)
        sock.close()


@schema.parametrize()
@settings(
    max_examples=MAX_EXAMPLES,
    derandomize=not EXPLORE,
    deadline=None,
    suppress_health_check=[
        HealthCheck.too_slow,
        HealthCheck.filter_too_much,
        HealthCheck.function_scoped_fixture,
    ],
)
def test_api_conforms_to_its_openapi(case: schemathesis.Case, live_admin: LiveAdmin) -> None:
    case.call_and_validate(
        base_url=live_admin.base_url,
        session=live_admin.session,
        headers=live_admin.headers,
        checks=[
            not_a_server_error,
            valid_request_accepted,  # a request the schema allows is not refused (400/422)
            status_code_conformance,
            content_type_conformance,
            response_schema_conformance,
        ],
        timeout=30,
    )
