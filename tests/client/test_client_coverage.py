"""The client and the management API's OpenAPI document agree: every operation the API
offers has a client endpoint, and every client endpoint names a real operation with
declared query parameters and body fields."""

from __future__ import annotations

import inspect
import re
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from jobring.client.call import ApiGroup, Call, Endpoint
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
from tests.client.adminkit import AdminEnv

GROUPS: list[type[ApiGroup[Any]]] = [
    AuthApi, TokensApi, JobsApi, GlueApi, RunsApi, GroupsApi, UsersApi, DashboardApi, SettingsApi, AuditApi,
    CalendarsApi, WorkflowsApi,
]


def _sample(annotation: str) -> Any:
    """A value of the annotated type, every optional parameter given (to see its name on the wire)."""
    if annotation.startswith("Mapping"):
        return {"job_desc": "x"}
    if annotation.startswith("Sequence"):
        return ["x"]
    if annotation.startswith("int"):
        return 7
    if annotation.startswith("bool"):
        return True
    if annotation.startswith("datetime"):
        return datetime(2030, 1, 1, tzinfo=UTC)
    if annotation.startswith("timedelta"):
        return timedelta(minutes=1)
    return "x"


def _client_calls() -> list[tuple[str, Call[Any], bool]]:
    """(name, call, whether its body is built by the client rather than passed through)."""
    calls = []
    for group in GROUPS:
        for name, attr in vars(group).items():
            if isinstance(attr, Endpoint):
                params = inspect.signature(attr.spec).parameters.values()
                args = {p.name: _sample(str(p.annotation)) for p in params}
                passthrough = any(str(p.annotation).startswith("Mapping") for p in params)
                calls.append((f"{group.__name__}.{name}", attr.spec(**args), not passthrough))
    return calls


def _operation(spec: dict[str, Any], call: Call[Any]) -> dict[str, Any] | None:
    for template, operations in spec["paths"].items():
        pattern = "^" + re.sub(r"\{[^}]+\}", "[^/]+", template) + "$"
        if re.match(pattern, call.path) and call.method.lower() in operations:
            return dict(operations[call.method.lower()])
    return None


def _body_fields(spec: dict[str, Any], operation: dict[str, Any]) -> set[str]:
    content = operation.get("requestBody", {}).get("content", {}).get("application/json", {})
    schema = content.get("schema", {})
    for option in [schema, *schema.get("anyOf", [])]:
        ref = option.get("$ref")
        if ref:
            return set(spec["components"]["schemas"][ref.rsplit("/", 1)[1]].get("properties", {}))
    return set()


@pytest.fixture
async def openapi(env: AdminEnv) -> dict[str, Any]:
    async with env.client() as admin:
        response = await admin._http.get("http://admin.test/api/v1/openapi.json")
    assert response.status_code == 200
    document: dict[str, Any] = response.json()
    return document


async def test_every_client_endpoint_is_an_api_operation_with_declared_inputs(
    openapi: dict[str, Any],
) -> None:
    for name, call, built_body in _client_calls():
        operation = _operation(openapi, call)
        assert operation is not None, f"{name}: {call.method} {call.path} is not in the API"
        declared = {p["name"] for p in operation.get("parameters", []) if p["in"] == "query"}
        assert set(call.params or {}) <= declared, f"{name}: undeclared query parameters"
        if isinstance(call.body, dict) and built_body:
            assert set(call.body) <= _body_fields(openapi, operation), f"{name}: undeclared body fields"


async def test_every_api_operation_has_a_client_endpoint(openapi: dict[str, Any]) -> None:
    covered = set()
    for _, call, _ in _client_calls():
        for template, operations in openapi["paths"].items():
            pattern = "^" + re.sub(r"\{[^}]+\}", "[^/]+", template) + "$"
            if re.match(pattern, call.path) and call.method.lower() in operations:
                covered.add((call.method.lower(), template))
    offered = {(method, template) for template, ops in openapi["paths"].items() for method in ops}
    assert offered - covered == set()
