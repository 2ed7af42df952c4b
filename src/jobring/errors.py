"""The root of jobring's own exceptions, and the kinds of refusal services raise.

Every error jobring raises on purpose derives from :class:`JobringError`, so an embedding
application can catch "anything jobring refused" in one clause. A service that refuses a
request raises one of the :class:`Refused` kinds below; they carry no HTTP status: the
admin's API maps each kind to its answer at the edge (``admin/api/management/errors.py``)."""

from __future__ import annotations


class JobringError(Exception):
    """Base class of the exceptions jobring defines."""


class Refused(JobringError):
    """A request that cannot be done as asked; ``field`` names the input at fault, if one is."""

    def __init__(self, message: str = "", field: str | None = None) -> None:
        super().__init__(message)
        self.field = field


class BadRequest(Refused, ValueError):
    """The request contradicts a rule (a schedule that never fires, an unknown address)."""


class Invalid(Refused, ValueError):
    """A value that cannot be accepted."""


class Forbidden(Refused):
    """Not permitted: to this caller, or on this admin (GLUE disabled)."""


class NotFound(Refused, LookupError):
    """The thing the request names does not exist (or is hidden from the caller)."""


class Conflict(Refused):
    """The request conflicts with what is stored (a name taken, a record still referenced)."""


class Unavailable(Refused):
    """Not available on this node right now."""
