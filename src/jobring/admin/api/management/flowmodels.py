"""The flow settings of jobs and groups as the API reads and answers them (docs/dispatch.md,
"Flow control")."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

from jobring.core.fielderror import FieldError
from jobring.core.flow.ratelimit import MAX_RATE
from jobring.core.flow.scopes import MAX_CONCURRENCY, FlowError
from jobring.core.flow.settings import MAX_TEMPLATE_LENGTH, FlowSettings, parse_flow

__all__ = ["FlowIn", "FlowOut", "flow_out", "flow_text"]

Concurrency = Annotated[int, Field(ge=1, le=MAX_CONCURRENCY)]


class FlowIn(BaseModel):
    """Flow control of a job or of every job of a group; every field optional, all left out
    (or null): no flow control."""

    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [{
        "max_concurrent_runs": 30, "concurrency_key": "{{params.tenant}}", "key_limit": 2,
        "on_limit": "queue", "rate_limit": 10, "rate_period": "second", "priority": 2,
    }]})

    max_concurrent_runs: Concurrency | None = Field(
        None, description="runs at a time, across every admin node")
    concurrency_key: Annotated[str, Field(min_length=1, max_length=MAX_TEMPLATE_LENGTH)] | None = Field(
        None, description="a template rendered per run, e.g. {{params.tenant}}: a counter per value")
    key_limit: Concurrency | None = Field(None, description="runs at a time per concurrency key value")
    on_limit: Literal["queue", "skip", "cancel_oldest"] | None = Field(
        None, description="when a limit is reached: wait (queued, default), skip the run, or cancel the "
                          "oldest running run")
    rate_limit: Annotated[int, Field(ge=1, le=MAX_RATE)] | None = Field(
        None, description="starts per rate_period: per key when a concurrency key is set")
    rate_period: Literal["second", "minute", "hour"] | None = None
    priority: Annotated[int, Field(ge=1, le=3)] | None = Field(
        None, description="1 low, 2 normal (default), 3 high: orders queued runs")


class FlowOut(BaseModel):
    max_concurrent_runs: int | None
    concurrency_key: str | None
    key_limit: int | None
    on_limit: str
    rate_limit: int | None
    rate_period: str
    priority: int | None


def flow_text(body: FlowIn | None) -> str | None:
    """The stored JSON of ``body`` (None: no flow control); FieldError names ``flow.<field>``."""
    if body is None:
        return None
    try:
        return FlowSettings.from_dict(body.model_dump(exclude_none=True)).to_json()
    except FlowError as exc:
        message = str(exc).partition(": ")[2] or str(exc)
        raise FieldError(f"flow.{exc.field}", message) from None


def flow_out(text: str | None) -> FlowOut | None:
    """Stored settings as answered (None: none, or no longer readable)."""
    try:
        settings = parse_flow(text)
    except FlowError:
        return None
    return None if settings is None else FlowOut(**settings.as_dict())
