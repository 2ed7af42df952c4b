from __future__ import annotations

import asyncio
import io
import logging
from pathlib import Path

import pytest

from jobring.admin.security.passwords import verify_password
from jobring.admin.security.roles import Role
from jobring.admin.services.bootstrap import (
    ACCESS_TOKEN_SETTING,
    ADMIN_USERNAME,
    SESSION_SECRET_SETTING,
    bootstrap,
)
from jobring.admin.services.settings import AdminSettings
from jobring.admin.store import Store
from jobring.configbase import ConfigError


async def test_first_start_generates_password_prints_it_once_and_flags_it(sqlite_store: Store) -> None:
    out = io.StringIO()
    secrets = await bootstrap(sqlite_store, AdminSettings(), out)
    password = secrets.admin_password_generated
    assert password is not None and len(password) >= 16
    assert out.getvalue().count(password) == 1
    admin = await sqlite_store.users.by_username(ADMIN_USERNAME)
    assert admin is not None
    assert admin.role == Role.ADMIN
    assert admin.must_change_password
    assert verify_password(admin.password_hash, password)
    assert not verify_password(admin.password_hash, password + "x")

    again = io.StringIO()
    second = await bootstrap(sqlite_store, AdminSettings(), again)
    assert second.admin_password_generated is None
    assert again.getvalue() == ""
    assert second.access_token == secrets.access_token
    assert second.session_secret == secrets.session_secret
    assert await sqlite_store.users.count() == 1


async def test_configured_password_and_token_are_used(sqlite_store: Store) -> None:
    out = io.StringIO()
    settings = AdminSettings(admin_password="configured-pw-1", access_token="tok-from-config-file")
    secrets = await bootstrap(sqlite_store, settings, out)
    assert secrets.admin_password_generated is None
    assert out.getvalue() == ""
    assert secrets.access_token == "tok-from-config-file"
    admin = await sqlite_store.users.by_username(ADMIN_USERNAME)
    assert admin is not None and not admin.must_change_password
    assert verify_password(admin.password_hash, "configured-pw-1")
    # A configured token is not written to the database.
    assert await sqlite_store.settings.get(ACCESS_TOKEN_SETTING) is None


@pytest.mark.parametrize(
    ("token", "password"),
    [("default_token", None), ("short-tok", None), (None, "123456"), (None, "password12")],
)
async def test_weak_configured_secrets_stop_the_start(
    sqlite_store: Store, token: str | None, password: str | None
) -> None:
    settings = AdminSettings(access_token=token, admin_password=password)
    with pytest.raises(ConfigError, match="JOBRING_INSECURE"):
        await bootstrap(sqlite_store, settings, io.StringIO())
    assert await sqlite_store.users.count() == 0


async def test_insecure_accepts_weak_secrets_and_warns_at_every_start(
    sqlite_store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    settings = AdminSettings(access_token="default_token", admin_password="123456", insecure=True)
    for start in (1, 2):
        caplog.clear()
        with caplog.at_level(logging.WARNING):
            secrets = await bootstrap(sqlite_store, settings, io.StringIO())
        assert secrets.access_token == "default_token"
        warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
        assert any("INSECURE MODE" in w and "JOBRING_ACCESS_TOKEN" in w for w in warnings), start


async def test_generated_secrets_are_random_per_database(tmp_path: Path) -> None:
    session_secrets = []
    for name in ("a", "b"):
        store = await Store.open(f"sqlite+aiosqlite:///{tmp_path / name}.db")
        try:
            secrets = await bootstrap(store, AdminSettings(), io.StringIO())
            # No global executor token unless configured (each group has its own).
            assert secrets.access_token is None
            assert await store.settings.get(ACCESS_TOKEN_SETTING) is None
            assert await store.settings.get(SESSION_SECRET_SETTING) == secrets.session_secret
            assert len(secrets.session_secret) >= 32
            session_secrets.append(secrets.session_secret)
        finally:
            await store.close()
    assert session_secrets[0] != session_secrets[1]


async def test_nodes_starting_together_agree(tmp_path: Path) -> None:
    url = f"sqlite+aiosqlite:///{tmp_path / 'shared.db'}"
    first = await Store.open(url)
    nodes = [first, Store(first.engine), Store(first.engine)]
    try:
        outs = [io.StringIO() for _ in nodes]
        starts = (bootstrap(s, AdminSettings(), o) for s, o in zip(nodes, outs, strict=True))
        results = await asyncio.gather(*starts)
        assert len({r.access_token for r in results}) == 1
        assert len({r.session_secret for r in results}) == 1
        generated = [r.admin_password_generated for r in results if r.admin_password_generated]
        assert len(generated) == 1
        assert sum(o.getvalue().count("generated password") for o in outs) == 1
        assert await first.users.count() == 1
    finally:
        await first.close()


async def test_nodes_starting_together_agree_on_every_backend(store: Store) -> None:
    nodes = [store, Store(store.engine), Store(store.engine)]
    outs = [io.StringIO() for _ in nodes]
    results = await asyncio.gather(
        *(bootstrap(s, AdminSettings(), o) for s, o in zip(nodes, outs, strict=True))
    )
    assert len({(r.access_token, r.session_secret) for r in results}) == 1
    assert len([r for r in results if r.admin_password_generated]) == 1
    assert await store.users.count() == 1
    assert results[0].access_token is None
