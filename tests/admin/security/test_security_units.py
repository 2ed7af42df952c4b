"""Unit tests of the security primitives: hashing, session signing, tokens, rate limiting."""

from __future__ import annotations

import asyncio
import hashlib
import threading
from pathlib import Path

import pytest

from jobring.admin.security.passwords import (
    HashingBusy,
    PasswordWorkers,
    common_passwords,
    generate_password,
    hash_password,
    needs_rehash,
    password_problem,
    verify_password,
)
from jobring.admin.security.principal import AuthMethod, Principal
from jobring.admin.security.ratelimit import LoginRateLimiter
from jobring.admin.security.secrets_policy import (
    access_token_problem,
    check_secret_policy,
    trusted_proxy_networks,
    weak_secrets,
)
from jobring.admin.security.sessions import (
    csrf_matches,
    csrf_token_for,
    hash_session_id,
    looks_like_session_id,
    new_session_id,
)
from jobring.admin.security.tokens import (
    generate_api_token,
    hash_api_token,
    looks_like_api_token,
    typeable_secret,
)
from jobring.admin.services.executor_tokens import new_group_token
from jobring.admin.services.settings import AdminSettings, load_settings
from jobring.admin.store.records import User
from jobring.configbase import ConfigError
from jobring.core.clock import ManualClock


def test_argon2id_hashes_are_salted_and_verified() -> None:
    first, second = hash_password("s3cret pass"), hash_password("s3cret pass")
    assert first.startswith("$argon2id$") and first != second
    assert verify_password(first, "s3cret pass") and not verify_password(first, "s3cret pasS")
    assert not needs_rehash(first)


@pytest.mark.parametrize("stored", [None, "", hashlib.md5(b"123456").hexdigest(), "$argon2id$garbage"])
def test_missing_legacy_md5_or_malformed_hashes_never_verify(stored: str | None) -> None:
    assert not verify_password(stored, "123456")


@pytest.mark.parametrize(
    "password",
    ["short", "x" * 257, "123456", "password", "Password1", "1234567890", "qwertyuiop", "aaaaaaaaaaaa",
     "abababababab", "Summer2024!!", "letmein12345", "iloveyou!!!!", "Administrator1"],
)
def test_password_rules_refuse_short_simple_and_common(password: str) -> None:
    assert password_problem(password) is not None


@pytest.mark.parametrize("password", ["long enough pw", "correct horse battery", "e2e-password-1234"])
def test_password_rules_accept_long_uncommon_ones(password: str) -> None:
    assert password_problem(password) is None


def test_common_password_list_is_a_few_hundred_lower_case_entries() -> None:
    listed = common_passwords()
    assert 200 <= len(listed) <= 2000
    assert {"123456", "password", "qwerty", "default_token"} <= listed


def test_sessions_ids_hashes_and_csrf() -> None:
    first, second = new_session_id(), new_session_id()
    assert first != second and looks_like_session_id(first)
    assert not looks_like_session_id("short") and not looks_like_session_id("../" + first)
    assert hash_session_id(first) == hashlib.sha256(first.encode()).hexdigest()
    csrf = csrf_token_for("secret-a", first)
    assert csrf == csrf_token_for("secret-a", first)
    assert csrf != csrf_token_for("secret-b", first) and csrf != csrf_token_for("secret-a", second)
    assert csrf_matches(csrf, csrf) and not csrf_matches(csrf, None) and not csrf_matches(csrf, csrf + "x")
    with pytest.raises(ValueError):
        csrf_token_for("", first)


def test_api_tokens() -> None:
    token = generate_api_token()
    assert looks_like_api_token(token) and token != generate_api_token()
    assert hash_api_token(token) == hashlib.sha256(token.encode()).hexdigest()
    assert not looks_like_api_token("jr_short") and not looks_like_api_token("x" * 40)


def test_rate_limiter_backs_off_per_user_and_address() -> None:
    clock = ManualClock(0)
    limiter = LoginRateLimiter(free_failures=3, base_delay_ms=1000, max_delay_ms=8000, clock=clock)
    for _ in range(3):
        assert limiter.retry_after_s("alice", "10.0.0.1") == 0
        limiter.record_failure("alice", "10.0.0.1")
    assert limiter.retry_after_s("alice", "10.0.0.1") == 1
    assert limiter.retry_after_s("ALICE", "10.0.0.1") == 1  # names are compared without case
    # The real user from another address, and another user from this one, are not held up.
    assert limiter.retry_after_s("alice", "10.0.0.2") == 0
    assert limiter.retry_after_s("bob", "10.0.0.1") == 0
    waits = []
    for _ in range(5):
        clock.advance(limiter.retry_after_s("alice", "10.0.0.1") * 1000)
        limiter.record_failure("alice", "10.0.0.1")
        waits.append(limiter.retry_after_s("alice", "10.0.0.1"))
    assert waits == [2, 4, 8, 8, 8]  # doubling, capped
    limiter.record_success("alice", "10.0.0.1")
    assert limiter.retry_after_s("alice", "10.0.0.1") == 0


def test_rate_limiter_forgets_old_failures() -> None:
    clock = ManualClock(0)
    limiter = LoginRateLimiter(free_failures=2, forget_after_ms=60_000, clock=clock)
    limiter.record_failure("a", "ip")
    limiter.record_failure("a", "ip")
    assert limiter.retry_after_s("a", "ip") > 0
    clock.advance(62_000)
    assert limiter.retry_after_s("a", "ip") == 0
    limiter.record_failure("a", "ip")
    assert limiter.retry_after_s("a", "ip") == 0  # counting starts again


def test_rate_limiter_caps_failures_per_address() -> None:
    clock = ManualClock(0)
    limiter = LoginRateLimiter(address_max_failures=4, window_ms=60_000, clock=clock)
    for n in range(4):
        limiter.record_failure(f"user{n}", "10.0.0.9")
    assert limiter.retry_after_s("someone", "10.0.0.9") == 60
    assert limiter.retry_after_s("someone", "10.0.0.8") == 0
    clock.advance(60_000)
    assert limiter.retry_after_s("someone", "10.0.0.9") == 0


def test_rate_limiter_memory_is_bounded() -> None:
    limiter = LoginRateLimiter(clock=ManualClock(0), max_keys=100)
    for n in range(1000):
        limiter.record_failure(f"u{n}", f"ip{n}")
    assert len(limiter._pairs) <= 100 and len(limiter._addresses) <= 100


async def test_password_workers_refuse_beyond_the_bound_without_running_the_work() -> None:
    workers = PasswordWorkers(workers=1, max_pending=2)
    release = threading.Event()
    ran: list[int] = []

    def slow(n: int) -> int:
        release.wait(10)
        ran.append(n)
        return n

    first = asyncio.ensure_future(workers.run(slow, 1))
    second = asyncio.ensure_future(workers.run(slow, 2))
    await asyncio.sleep(0)
    assert workers.pending == 2
    with pytest.raises(HashingBusy):
        await workers.run(slow, 3)
    release.set()
    assert await first == 1 and await second == 2
    assert sorted(ran) == [1, 2] and workers.pending == 0
    assert await workers.verify(hash_password("long enough pw"), "long enough pw")


def test_weak_configured_secrets() -> None:
    assert weak_secrets(AdminSettings()) == []
    assert access_token_problem("default_token") and access_token_problem("short-token")
    assert access_token_problem("aaaaaaaaaaaaaaaaaaaa")
    assert access_token_problem("k3H9-vQ2xLp7wRt5") is None
    bad = weak_secrets(AdminSettings(access_token="default_token", admin_password="123456"))
    assert len(bad) == 2 and "JOBRING_ACCESS_TOKEN" in bad[0] and "123456" not in " ".join(bad)
    with pytest.raises(ConfigError, match="JOBRING_INSECURE"):
        check_secret_policy(AdminSettings(access_token="default_token"))
    assert check_secret_policy(AdminSettings(access_token="default_token", insecure=True))


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


def test_trusted_proxies_from_toml_list_or_env_and_bad_entries(tmp_path: Path) -> None:
    config = tmp_path / "jobring.toml"
    config.write_text('[admin]\ntrusted_proxies = ["10.0.0.0/8", "192.0.2.7"]\n', encoding="utf-8")
    settings = load_settings(config, environ={})
    assert [str(n) for n in trusted_proxy_networks(settings)] == ["10.0.0.0/8", "192.0.2.7/32"]
    from_env = load_settings(environ={"JOBRING_TRUSTED_PROXIES": "127.0.0.1, ::1", "JOBRING_INSECURE": "yes"})
    assert len(trusted_proxy_networks(from_env)) == 2 and from_env.insecure
    assert trusted_proxy_networks(AdminSettings()) == []
    with pytest.raises(ConfigError, match="trusted_proxies"):
        trusted_proxy_networks(AdminSettings(trusted_proxies="10.0.0.0/8,not-an-ip"))


def test_generated_secrets_never_start_with_a_dash(monkeypatch: pytest.MonkeyPatch) -> None:
    # A secret typed on a command line (`--token -x...`) would be read as an option.
    draws = iter(["-first", "-second", "third", "-x", "group-token", "-y", "password"])
    monkeypatch.setattr("jobring.admin.security.tokens.secrets.token_urlsafe", lambda n: next(draws))
    assert typeable_secret(32) == "third"
    assert new_group_token() == "group-token"
    assert generate_password() == "password"
