"""A bad value in a request, with the field it came from (for the API's ``{"error", "field"}``
body and the CLI's message)."""

from __future__ import annotations

from jobring.errors import Invalid

__all__ = ["FieldError"]


class FieldError(Invalid):
    """Invalid input; ``field`` names the offending field, and the message starts with it."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}", field)
        self.field: str = field
