from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from jobring.admin.store import Store
from tests.client.adminkit import AdminEnv, admin_env


@pytest.fixture
async def env(sqlite_store: Store) -> AsyncIterator[AdminEnv]:
    async for built in admin_env(sqlite_store):
        yield built


@pytest.fixture
async def glue_env(sqlite_store: Store) -> AsyncIterator[AdminEnv]:
    async for built in admin_env(sqlite_store, glue_enabled=True):
        yield built
