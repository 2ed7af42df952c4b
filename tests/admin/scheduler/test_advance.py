"""The advance writer's copy of a held row after its next time was written."""

from __future__ import annotations

from dataclasses import fields, replace

from jobring.admin.loop.advance import advanced_row
from jobring.admin.store.records import JobInfo


def test_advanced_row_is_the_row_with_new_fire_times() -> None:
    values: dict[str, object] = {}
    for index, f in enumerate(fields(JobInfo)):
        # Every field distinct, so a field taken from the wrong position shows.
        values[f.name] = index if f.type == "int" else f"v{index}" if f.type == "str" else f.default
    row = JobInfo(**values)  # type: ignore[arg-type]
    assert advanced_row(row, 7, 9) == replace(row, trigger_last_time=7, trigger_next_time=9)
    assert advanced_row(row, 7, 9).job_desc == row.job_desc
