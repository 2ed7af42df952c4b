"""A throwaway server database for an end-to-end test: skipped when the server is
unreachable, a failure instead with ``CI=true``; dropped afterwards."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.dbs import (
    BackendUnavailable,
    acreate_test_database,
    adrop_test_database,
    must_fail_when_unavailable,
)


async def server_database(backend: str, directory: Path) -> AsyncIterator[str]:
    """Yield the URL of a new ``backend`` database (use as a pytest fixture body)."""
    try:
        url = await acreate_test_database(backend, directory)
    except BackendUnavailable as exc:
        if must_fail_when_unavailable():
            pytest.fail(str(exc))
        pytest.skip(str(exc))
    try:
        yield url
    finally:
        await adrop_test_database(url)
