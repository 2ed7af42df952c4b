"""What the admin client raises."""

from __future__ import annotations

from jobring.errors import JobringError


class AdminClientError(JobringError):
    """Base of every error the admin client raises."""


class AdminApiError(AdminClientError):
    """The admin answered with an error: ``status`` is the HTTP status, ``message`` the
    server's explanation and ``field`` the request field it concerns, when it names one."""

    def __init__(self, status: int, message: str, field: str | None = None) -> None:
        super().__init__(f"{message} (field: {field})" if field else message)
        self.status = status
        self.message = message
        self.field = field

    @property
    def is_client_error(self) -> bool:
        """True for 4xx answers: the request was wrong, repeating it will not help."""
        return 400 <= self.status < 500

    def __repr__(self) -> str:
        return f"AdminApiError(status={self.status}, message={self.message!r}, field={self.field!r})"


class AdminConnectionError(AdminClientError):
    """The admin could not be reached (refused, timed out, DNS, TLS...)."""

    def __init__(self, url: str, reason: str) -> None:
        super().__init__(f"cannot reach the admin at {url}: {reason}")
        self.url = url
        self.reason = reason
