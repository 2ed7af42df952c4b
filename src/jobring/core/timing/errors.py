"""The one error type of the timing rules: a message that names the offending field."""

from __future__ import annotations


class TimingError(ValueError):
    """Invalid timing input. ``field`` is the path of the offending part (``dates[3]``,
    ``day_windows[0].end``); the message starts with it, as the API's ``{"error", "field"}``."""

    def __init__(self, field: str, problem: str) -> None:
        super().__init__(f"{field}: {problem}")
        self.field = field
        self.problem = problem
