"""Signed session cookies (itsdangerous) and the CSRF token that goes with each session.

A session is stateless: the cookie carries the user id, a CSRF token and a fingerprint of
the user's password hash, signed with the admin's session secret. Changing the password
changes the fingerprint, which ends every older session of that user.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from dataclasses import dataclass

from itsdangerous import BadSignature, URLSafeTimedSerializer

SESSION_COOKIE = "jobring_session"
CSRF_COOKIE = "jobring_csrf"
CSRF_HEADER = "X-CSRF-Token"
DEFAULT_SESSION_MAX_AGE_S = 12 * 3600
_SALT = "jobring.session.v1"


@dataclass(frozen=True, slots=True)
class SessionData:
    user_id: int
    csrf_token: str
    password_fingerprint: str


def password_fingerprint(password_hash: str | None) -> str:
    """A short digest of the stored hash: sessions die when it changes."""
    return hashlib.sha256((password_hash or "").encode("utf-8")).hexdigest()[:16]


def new_csrf_token() -> str:
    return secrets.token_urlsafe(24)


def csrf_matches(expected: str, presented: str | None) -> bool:
    return presented is not None and hmac.compare_digest(expected.encode(), presented.encode())


class SessionSigner:
    """Encodes and checks session cookies; ``max_age_s`` bounds a session's life."""

    def __init__(self, secret: str, max_age_s: int = DEFAULT_SESSION_MAX_AGE_S) -> None:
        if not secret:
            raise ValueError("the session secret must not be empty")
        self._serializer = URLSafeTimedSerializer(secret, salt=_SALT)
        self.max_age_s = max_age_s

    def encode(self, data: SessionData) -> str:
        return self._serializer.dumps([data.user_id, data.csrf_token, data.password_fingerprint])

    def decode(self, cookie: str) -> SessionData | None:
        """The session in ``cookie``, or None when it is forged, malformed or expired."""
        try:
            raw = self._serializer.loads(cookie, max_age=self.max_age_s)
        except BadSignature:  # SignatureExpired is a subclass
            return None
        if (
            not isinstance(raw, list)
            or len(raw) != 3
            or not isinstance(raw[0], int)
            or not all(isinstance(part, str) for part in raw[1:])
        ):
            return None
        return SessionData(user_id=raw[0], csrf_token=raw[1], password_fingerprint=raw[2])
