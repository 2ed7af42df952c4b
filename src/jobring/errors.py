"""The root of jobring's own exceptions.

Every error jobring raises on purpose derives from :class:`JobringError`, so an embedding
application can catch "anything jobring refused" in one clause. Domain errors carry no
HTTP status: the admin's API maps them to answers at its edge."""

from __future__ import annotations


class JobringError(Exception):
    """Base class of the exceptions jobring defines."""
