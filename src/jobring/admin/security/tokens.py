"""Personal API tokens: ``jr_`` + 43 random URL-safe characters, stored only as a sha256 hash."""

from __future__ import annotations

import hashlib
import secrets

TOKEN_PREFIX = "jr_"


def typeable_secret(nbytes: int) -> str:
    """``secrets.token_urlsafe(nbytes)`` that never starts with ``-``: a secret a user passes
    on a command line (``--token -x...``) would otherwise be read as an option."""
    while (secret := secrets.token_urlsafe(nbytes)).startswith("-"):
        pass
    return secret


def generate_api_token() -> str:
    """A new token (256 bits of randomness); shown to its owner once, never stored."""
    return TOKEN_PREFIX + secrets.token_urlsafe(32)


def hash_api_token(token: str) -> str:
    """The value kept at rest: sha256 hex. A fast hash is fine for 256-bit random secrets."""
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def looks_like_api_token(token: str) -> bool:
    return token.startswith(TOKEN_PREFIX) and 20 <= len(token) <= 200
