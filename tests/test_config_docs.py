"""docs/configuration.md lists every setting with its environment variable and default, so
the document cannot drift from the settings classes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from jobring.admin.loop.loop import LoopConfig
from jobring.admin.services.settings import AdminSettings, LoopSettings
from jobring.executor.config import ExecutorSettings

DOC = Path(__file__).resolve().parent.parent / "docs" / "configuration.md"


def _literal(value: Any) -> str:
    if value is None:
        return "`(unset)`"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if isinstance(value, str):
        return f'`"{value}"`'
    if value == ():
        return "`[]`"
    return f"`{value!r}`"


def _rows() -> list[str]:
    return [line for line in DOC.read_text(encoding="utf-8").splitlines() if line.startswith("| `")]


def _row(key: str) -> str:
    found = [line for line in _rows() if line.startswith(f"| `{key}` |")]
    assert found, f"{key} is not documented in docs/configuration.md"
    return found[0]


@pytest.mark.parametrize("name", [n for n in AdminSettings.model_fields if n != "loop"])
def test_every_admin_setting_is_documented(name: str) -> None:
    admin_rows = [line for line in _rows() if f"| `JOBRING_{name.upper()}` |" in line]
    assert admin_rows, f"JOBRING_{name.upper()} is not documented"
    row = admin_rows[0]
    assert row.startswith(f"| `{name}` |")
    assert f"| {_literal(AdminSettings.model_fields[name].default)} |" in row


@pytest.mark.parametrize("name", list(LoopSettings.model_fields))
def test_every_loop_tunable_is_documented(name: str) -> None:
    row = _row(f"loop.{name}")
    assert f"| `JOBRING_LOOP__{name.upper()}` |" in row
    if name != "max_inflight_batches":  # the admin picks it by database backend
        assert f"| {_literal(getattr(LoopConfig(), name))} |" in row


@pytest.mark.parametrize("name", list(ExecutorSettings.model_fields))
def test_every_executor_setting_is_documented(name: str) -> None:
    rows = [line for line in _rows() if f"| `JOBRING_EXECUTOR_{name.upper()}` |" in line
            and line.startswith(f"| `{name}` |")]
    assert rows, f"JOBRING_EXECUTOR_{name.upper()} is not documented"
    assert f"| {_literal(ExecutorSettings.model_fields[name].default)} |" in rows[0]


def test_the_readme_links_the_configuration() -> None:
    readme = DOC.parent.parent / "README.md"
    assert "(docs/configuration.md)" in readme.read_text(encoding="utf-8")
