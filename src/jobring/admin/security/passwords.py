"""Password hashing with argon2id (argon2-cffi's defaults, RFC 9106 low-memory profile), run
off the event loop in a small bounded thread pool, and the rules a new password must meet."""

from __future__ import annotations

import asyncio
import re
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from functools import cache
from importlib import resources
from typing import TypeVar

from argon2 import PasswordHasher
from argon2.exceptions import InvalidHashError, VerificationError, VerifyMismatchError

from jobring.admin.security.tokens import typeable_secret
from jobring.errors import JobringError

_HASHER = PasswordHasher()

MIN_PASSWORD_LENGTH = 10
MAX_PASSWORD_LENGTH = 256
HASH_WORKERS = 2
MAX_PENDING_HASHES = 8
T = TypeVar("T")


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
    return typeable_secret(16)


@cache
def common_passwords() -> frozenset[str]:
    """The shipped list of common passwords (lower case), refused as new passwords."""
    text = resources.files("jobring.admin.security").joinpath("common_passwords.txt").read_text("utf-8")
    return frozenset(
        line.strip().lower() for line in text.splitlines() if line.strip() and not line.startswith("#")
    )


_DECORATION = re.compile(r"[\d\W_]+\Z")


def is_common_password(password: str) -> bool:
    """True for a listed password, also with a number or symbols appended ("Summer2024!")."""
    lowered = password.strip().lower()
    listed = common_passwords()
    if lowered in listed:
        return True
    stem = _DECORATION.sub("", lowered)
    return len(stem) >= 4 and stem in listed


def password_problem(password: str) -> str | None:
    """Why ``password`` is not acceptable as a new password, or None when it is."""
    if len(password) < MIN_PASSWORD_LENGTH:
        return f"password must have at least {MIN_PASSWORD_LENGTH} characters"
    if len(password) > MAX_PASSWORD_LENGTH:
        return f"password must have at most {MAX_PASSWORD_LENGTH} characters"
    if len(set(password)) < 4:
        return "password is too simple: use at least 4 different characters"
    if is_common_password(password):
        return "password is too common: pick one that is not on lists of common passwords"
    return None


class HashingBusy(JobringError):
    """More password hashes are waiting than the pool accepts; refuse instead of queueing."""


class PasswordWorkers:
    """argon2 off the event loop: ``workers`` threads (argon2-cffi releases the GIL) and at
    most ``max_pending`` hashes running or waiting; beyond that :class:`HashingBusy` at once,
    so a flood of logins costs neither the event loop nor an unbounded queue."""

    def __init__(self, workers: int = HASH_WORKERS, max_pending: int = MAX_PENDING_HASHES) -> None:
        self.max_pending = max_pending
        self._pool = ThreadPoolExecutor(workers, thread_name_prefix="jobring-argon2")
        self._pending = 0
        self._lock = threading.Lock()

    @property
    def pending(self) -> int:
        return self._pending

    async def run(self, work: Callable[..., T], *args: object) -> T:
        """Run ``work(*args)`` in the pool; HashingBusy when ``max_pending`` are in flight."""
        with self._lock:
            if self._pending >= self.max_pending:
                raise HashingBusy(f"{self._pending} password checks in progress")
            self._pending += 1
        try:
            return await asyncio.get_running_loop().run_in_executor(self._pool, work, *args)
        finally:
            with self._lock:
                self._pending -= 1

    async def verify(self, password_hash: str | None, password: str) -> bool:
        return await self.run(verify_password, password_hash, password)

    async def hash(self, password: str) -> str:
        return await self.run(hash_password, password)


_shared: list[PasswordWorkers] = []


def shared_password_workers() -> PasswordWorkers:
    """The process-wide pool (one admin per process; tests build many apps)."""
    if not _shared:
        _shared.append(PasswordWorkers())
    return _shared[0]
