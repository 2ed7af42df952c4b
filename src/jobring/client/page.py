"""One page of a listing, as the management API returns it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from jobring.client.call import JsonObject, as_list


@dataclass(frozen=True, slots=True)
class Page:
    """``items`` (JSON objects) and ``total``, the number of rows matching the filter (an
    estimate when ``total_exact`` is False); ``next_cursor``: pass it as ``cursor`` to list
    the next page (listings that support it)."""

    items: list[JsonObject]
    total: int
    offset: int
    limit: int
    total_exact: bool = True
    next_cursor: str | None = None


def as_page(body: Any) -> Page:
    """Decoder for ``{"items": [...], "total": n, "offset": o, "limit": l}``."""
    if not isinstance(body, dict):
        raise TypeError(f"expected a page object, got {type(body).__name__}")
    return Page(
        items=as_list(body["items"]),
        total=int(body["total"]),
        offset=int(body.get("offset", 0)),
        limit=int(body.get("limit", len(body["items"]))),
        total_exact=bool(body.get("total_exact", True)),
        next_cursor=None if body.get("next_cursor") is None else str(body["next_cursor"]),
    )
