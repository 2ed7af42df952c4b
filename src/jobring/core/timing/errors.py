"""The one error type of the timing rules: a message that names the offending field."""

from __future__ import annotations

from enum import StrEnum
from typing import TypeVar

from jobring.errors import JobringError

_E = TypeVar("_E", bound=StrEnum)


class TimingError(JobringError, ValueError):
    """Invalid timing input. ``field`` is the path of the offending part (``dates[3]``,
    ``day_windows[0].end``); the message starts with it, as the API's ``{"error", "field"}``."""

    def __init__(self, field: str, problem: str) -> None:
        super().__init__(f"{field}: {problem}")
        self.field = field
        self.problem = problem


def parse_choice(kind: type[_E], value: object, field: str) -> _E:
    """One of a StrEnum's values, case-insensitive; TimingError listing the allowed ones."""
    allowed = ", ".join(member.value for member in kind)
    if isinstance(value, str):
        try:
            return kind(value.strip().lower())
        except ValueError:
            pass
    raise TimingError(field, f"must be one of {allowed}, got {value!r}")
