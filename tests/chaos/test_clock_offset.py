"""The test-only clock offset of an admin node (JOBRING_CLOCK_OFFSET_MS, read in admin/runtime/app.py)."""

from __future__ import annotations

import time

import pytest

from jobring.admin.runtime.app import _process_clock
from jobring.core.clock import SystemClock


def test_offset_shifts_the_node_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JOBRING_CLOCK_OFFSET_MS", "-1500")
    before = time.time_ns() // 1_000_000
    shifted = _process_clock().now_ms()
    after = time.time_ns() // 1_000_000
    assert before - 1500 <= shifted <= after - 1500


@pytest.mark.parametrize("value", ["", "0"])
def test_no_offset_is_the_system_clock(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv("JOBRING_CLOCK_OFFSET_MS", value)
    assert isinstance(_process_clock(), SystemClock)
