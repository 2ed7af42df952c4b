"""Password hashing with argon2id (argon2-cffi's defaults, RFC 9106 low-memory profile)."""

from __future__ import annotations

import secrets

from argon2 import PasswordHasher
from argon2.exceptions import InvalidHashError, VerificationError, VerifyMismatchError

_HASHER = PasswordHasher()

MIN_PASSWORD_LENGTH = 8
MAX_PASSWORD_LENGTH = 256


def hash_password(password: str) -> str:
    """Return an argon2id hash string (salted, parameters embedded) of ``password``."""
    return _HASHER.hash(password)


def verify_password(password_hash: str | None, password: str) -> bool:
    """True when ``password`` matches ``password_hash``; False for no hash or a malformed one."""
    if not password_hash:
        # Users adopted from an XXL-JOB database carry only the unsalted MD5, which we refuse.
        return False
    try:
        return _HASHER.verify(password_hash, password)
    except (VerifyMismatchError, VerificationError, InvalidHashError):
        return False


def needs_rehash(password_hash: str) -> bool:
    """True when the hash was made with weaker parameters than the current ones."""
    try:
        return _HASHER.check_needs_rehash(password_hash)
    except InvalidHashError:
        return True


def generate_password() -> str:
    """A random password for a first start (about 128 bits)."""
    return secrets.token_urlsafe(16)


def password_problem(password: str) -> str | None:
    """Why ``password`` is not acceptable as a new password, or None when it is."""
    if len(password) < MIN_PASSWORD_LENGTH:
        return f"password must have at least {MIN_PASSWORD_LENGTH} characters"
    if len(password) > MAX_PASSWORD_LENGTH:
        return f"password must have at most {MAX_PASSWORD_LENGTH} characters"
    return None
