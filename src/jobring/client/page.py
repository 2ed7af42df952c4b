"""One page of a listing, as the management API returns it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from jobring.client.call import JsonObject, as_list


@dataclass(frozen=True, slots=True)
class Page:
    """``items`` (JSON objects) and ``total``, the number of rows matching the filter."""

    items: list[JsonObject]
    total: int
    offset: int
    limit: int


def as_page(body: Any) -> Page:
    """Decoder for ``{"items": [...], "total": n, "offset": o, "limit": l}``."""
    if not isinstance(body, dict):
        raise TypeError(f"expected a page object, got {type(body).__name__}")
    return Page(
        items=as_list(body["items"]),
        total=int(body["total"]),
        offset=int(body.get("offset", 0)),
        limit=int(body.get("limit", len(body["items"]))),
    )
