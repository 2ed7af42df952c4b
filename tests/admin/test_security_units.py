"""Unit tests of the security primitives: hashing, session signing, tokens, rate limiting."""

from __future__ import annotations

import hashlib

import pytest
from itsdangerous import URLSafeTimedSerializer

from jobring.admin.security.passwords import hash_password, needs_rehash, password_problem, verify_password
from jobring.admin.security.principal import AuthMethod, Principal
from jobring.admin.security.ratelimit import LoginRateLimiter
from jobring.admin.security.sessions import SessionData, SessionSigner, password_fingerprint
from jobring.admin.security.tokens import generate_api_token, hash_api_token, looks_like_api_token
from jobring.admin.store.records import User
from jobring.core.clock import ManualClock


def test_argon2id_hashes_are_salted_and_verified() -> None:
    first, second = hash_password("s3cret pass"), hash_password("s3cret pass")
    assert first.startswith("$argon2id$") and first != second
    assert verify_password(first, "s3cret pass") and not verify_password(first, "s3cret pasS")
    assert not needs_rehash(first)


@pytest.mark.parametrize("stored", [None, "", hashlib.md5(b"123456").hexdigest(), "$argon2id$garbage"])
def test_missing_legacy_md5_or_malformed_hashes_never_verify(stored: str | None) -> None:
    assert not verify_password(stored, "123456")


def test_password_rules() -> None:
    assert password_problem("short") is not None
    assert password_problem("x" * 257) is not None
    assert password_problem("long enough") is None


def test_session_round_trip_and_tampering() -> None:
    signer = SessionSigner("secret-a")
    data = SessionData(7, "csrf", password_fingerprint("$argon2id$x"))
    cookie = signer.encode(data)
    assert signer.decode(cookie) == data
    assert SessionSigner("secret-b").decode(cookie) is None
    assert signer.decode(cookie + "x") is None
    assert signer.decode("") is None
    # Correctly signed but not our shape.
    forged = URLSafeTimedSerializer("secret-a", salt="jobring.session.v1").dumps({"uid": 1})
    assert signer.decode(forged) is None
    assert password_fingerprint("a") != password_fingerprint("b")
    with pytest.raises(ValueError):
        SessionSigner("")


def test_api_tokens() -> None:
    token = generate_api_token()
    assert looks_like_api_token(token) and token != generate_api_token()
    assert hash_api_token(token) == hashlib.sha256(token.encode()).hexdigest()
    assert not looks_like_api_token("jr_short") and not looks_like_api_token("x" * 40)


def test_rate_limiter_window_and_independent_keys() -> None:
    clock = ManualClock(0)
    limiter = LoginRateLimiter(max_failures=3, window_ms=60_000, clock=clock)
    for _ in range(3):
        assert limiter.retry_after_s(["user:a"]) == 0
        limiter.record_failure(["user:a", "ip:1"])
    assert limiter.retry_after_s(["user:a"]) == 60
    assert limiter.retry_after_s(["user:b", "ip:1"]) == 60  # the address is limited too
    assert limiter.retry_after_s(["user:b", "ip:2"]) == 0
    clock.advance(30_000)
    assert limiter.retry_after_s(["user:a"]) == 30
    clock.advance(30_000)
    assert limiter.retry_after_s(["user:a"]) == 0
    limiter.record_failure(["user:c"])
    limiter.record_success(["user:c"])
    assert limiter.retry_after_s(["user:c"]) == 0


def test_rate_limiter_memory_is_bounded() -> None:
    limiter = LoginRateLimiter(max_failures=2, window_ms=60_000, clock=ManualClock(0), max_keys=100)
    for n in range(1000):
        limiter.record_failure([f"ip:{n}"])
    assert len(limiter._failures) <= 100


@pytest.mark.parametrize(
    ("role", "permission", "read_1", "write_1", "read_2", "readable"),
    [
        (1, None, True, True, True, None),
        (0, "1", True, True, False, [1]),
        (2, "1", True, False, False, [1]),
        (0, None, False, False, False, []),
        (9, "1,2", True, False, True, [1, 2]),  # an unknown role code is a viewer
    ],
)
def test_principal_permissions(
    role: int, permission: str | None, read_1: bool, write_1: bool, read_2: bool, readable: list[int] | None
) -> None:
    p = Principal(User(id=1, username="u", role=role, permission=permission), AuthMethod.TOKEN)
    assert (p.can_read_group(1), p.can_write_group(1), p.can_read_group(2)) == (read_1, write_1, read_2)
    assert p.readable_group_ids() == readable
