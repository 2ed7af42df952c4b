"""Server-side sessions: the cookie carries a random session id; the database keeps only its
sha256 with the user, expiry and a revoked flag, so logout, a password or role change and
user deletion end a session on every admin node at its next request.

The CSRF token of a session is an HMAC of the session id under the admin's session secret:
nothing more to store, and it cannot be derived without the secret.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import re
import secrets

SESSION_COOKIE = "jobring_session"
CSRF_COOKIE = "jobring_csrf"
CSRF_HEADER = "X-CSRF-Token"
DEFAULT_SESSION_MAX_AGE_S = 12 * 3600
SESSION_TOUCH_INTERVAL_MS = 60_000
_SESSION_ID = re.compile(r"[A-Za-z0-9_-]{32,100}")  # fullmatch: "$" would take a final "\n"


def new_session_id() -> str:
    """A new session id (256 bits of randomness); only ever sent in the HttpOnly cookie."""
    return secrets.token_urlsafe(32)


def hash_session_id(session_id: str) -> str:
    """What the database keeps: sha256 hex (enough for a 256-bit random value)."""
    return hashlib.sha256(session_id.encode("utf-8")).hexdigest()


def looks_like_session_id(value: str) -> bool:
    return bool(_SESSION_ID.fullmatch(value))


def csrf_token_for(secret: str, session_id: str) -> str:
    """The session's CSRF token: HMAC-SHA256 of the session id under ``secret``."""
    if not secret:
        raise ValueError("the session secret must not be empty")
    digest = hmac.new(secret.encode("utf-8"), b"csrf:" + session_id.encode("utf-8"), hashlib.sha256)
    return base64.urlsafe_b64encode(digest.digest()).decode("ascii").rstrip("=")


def csrf_matches(expected: str, presented: str | None) -> bool:
    return presented is not None and hmac.compare_digest(expected.encode(), presented.encode())
