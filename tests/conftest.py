"""Fixtures shared by every test folder: throwaway databases on each backend.

``db_url``     session-scoped, parametrized over sqlite/postgresql/mariadb: a new database
               per backend, upgraded to the newest schema, shared by the whole session
               (so use ``store``, which empties it, or keep your rows apart).
``store``      a ``Store`` on ``db_url`` with every table emptied first (per test).
``sqlite_store`` an upgraded Store on a new SQLite file per test (fast unit tests of code built
               on the store): a copy of one file upgraded once per session (upgrading a new
               file, ~0.2 s of CPU, was paid by every one of hundreds of tests).
``fresh_db_url`` parametrized too: a new, empty (not upgraded) database per test.

A PostgreSQL/MariaDB server that cannot be reached skips its tests with the reason, or
fails them when ``CI=true``. Plain helpers for end-to-end tests live in ``tests/dbs.py``.
"""

from __future__ import annotations

import shutil
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from sqlalchemy import delete, insert

from jobring.admin.store import Store, create_engine, upgrade_database
from jobring.admin.store.tables import SCHEDULE_LOCK, job_lock, metadata
from tests.dbs import (
    BACKENDS,
    BackendUnavailable,
    create_test_database,
    drop_test_database,
    must_fail_when_unavailable,
    run_in_fresh_loop,
)

_DB_FIXTURES = frozenset({"db_url", "store", "sqlite_store", "fresh_db_url"})
_unavailable: dict[str, str] = {}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if _DB_FIXTURES.intersection(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.db)
        if item.get_closest_marker("quiet") is not None:  # kept out of the lanes that exclude timing
            item.add_marker(pytest.mark.timing)


def _unreachable(backend: str, reason: str) -> None:
    if backend != "sqlite" and must_fail_when_unavailable():
        pytest.fail(f"{reason} (CI=true: PostgreSQL and MariaDB must be available)", pytrace=False)
    pytest.skip(reason)


def _create(backend: str, directory: Path) -> str:
    if backend in _unavailable:
        _unreachable(backend, _unavailable[backend])
    try:
        return create_test_database(backend, directory)
    except BackendUnavailable as exc:
        _unavailable[backend] = str(exc)
        _unreachable(backend, str(exc))
        raise  # not reached: skip/fail raise


@pytest.fixture(scope="session", params=BACKENDS, ids=BACKENDS)
def db_url(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A new database on the parametrized backend, upgraded, shared by the session."""
    url = _create(request.param, tmp_path_factory.mktemp("db"))
    try:
        run_in_fresh_loop(lambda: upgrade_database(url))
        yield url
    finally:
        drop_test_database(url)


@pytest.fixture(params=BACKENDS, ids=BACKENDS)
def fresh_db_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A new, empty (not upgraded) database on the parametrized backend, for one test."""
    url = _create(request.param, tmp_path)
    try:
        yield url
    finally:
        drop_test_database(url)


async def _emptied_store(url: str) -> Store:
    store = Store(create_engine(url, pool_size=10))  # as the admin's: no overflow
    async with store.engine.begin() as conn:
        for table in reversed(metadata.sorted_tables):
            await conn.execute(delete(table))
        await conn.execute(insert(job_lock).values(lock_name=SCHEDULE_LOCK))
    return store


@pytest.fixture
async def store(db_url: str) -> AsyncIterator[Store]:
    """A Store on ``db_url`` with every table emptied (the schedule_lock row re-seeded)."""
    opened = await _emptied_store(db_url)
    try:
        yield opened
    finally:
        await opened.close()


@pytest.fixture(scope="session")
def upgraded_sqlite_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A SQLite file upgraded to the newest schema, closed (no WAL left): copied per test."""
    path = tmp_path_factory.mktemp("upgraded") / "jobring.db"

    async def upgrade() -> None:
        await (await Store.open(f"sqlite+aiosqlite:///{path}")).close()

    run_in_fresh_loop(upgrade)
    return path


@pytest.fixture
async def sqlite_store(tmp_path: Path, upgraded_sqlite_file: Path) -> AsyncIterator[Store]:
    """An upgraded Store on a new SQLite file."""
    path = tmp_path / "jobring.db"
    shutil.copyfile(upgraded_sqlite_file, path)
    opened = await Store.open(f"sqlite+aiosqlite:///{path}")
    try:
        yield opened
    finally:
        await opened.close()
