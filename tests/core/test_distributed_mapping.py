"""Map limits (each refusal names its limit), sub-task keys, batches."""

from __future__ import annotations

import pytest

from jobring.core.distributed.mapping import (
    MAX_ITEM_BYTES,
    MAX_MAP_DEPTH,
    MAX_MAP_ITEMS,
    MAX_SUBTASKS,
    REDUCE_INLINE_RESULTS,
    REDUCE_PAGE_SIZE,
    ROOT_KEY,
    MapLimitError,
    call_batches,
    depth_of,
    plan_map,
    reduce_pages,
    subtask_key,
)


def test_a_map_call_gives_keyed_subtasks_with_compact_json() -> None:
    subtasks = plan_map(ROOT_KEY, 0, "sub_task", [{"id": 1, "name": "ä"}, [1, 2], "x"], subtasks_so_far=0)
    assert [s.key for s in subtasks] == ["r/0.0", "r/0.1", "r/0.2"]
    assert [s.item_json for s in subtasks] == ['{"id":1,"name":"ä"}', "[1,2]", '"x"']
    assert {s.depth for s in subtasks} == {1} and {s.task_name for s in subtasks} == {"sub_task"}
    nested = plan_map("r/0.1", 3, "leaf", [None], subtasks_so_far=3)
    assert nested[0].key == "r/0.1/3.0" and nested[0].depth == 2 and depth_of(nested[0].key) == 2


def test_repeating_a_call_gives_the_same_keys() -> None:
    # A parent dispatched again repeats its calls: same keys, so the unique key drops the copies.
    first = plan_map("r/2.5", 1, "t", ["a", "b"], subtasks_so_far=10)
    assert first == plan_map("r/2.5", 1, "t", ["a", "b"], subtasks_so_far=12)


def expect_limit(limit: str, field: str, parent: str = ROOT_KEY, name: str = "t", items: object = ("a",),
                 so_far: int = 0) -> MapLimitError:
    with pytest.raises(MapLimitError) as err:
        plan_map(parent, 0, name, items, subtasks_so_far=so_far)  # type: ignore[arg-type]
    assert err.value.limit == limit and err.value.field == field
    if limit.startswith("MAX_"):
        assert limit in str(err.value)
    return err.value


def test_each_limit_is_named_when_exceeded() -> None:
    expect_limit("MAX_MAP_ITEMS", "items", items=["x"] * (MAX_MAP_ITEMS + 1))
    plan_map(ROOT_KEY, 0, "t", ["x"] * MAX_MAP_ITEMS, subtasks_so_far=0)
    expect_limit("MAX_ITEM_BYTES", "items", items=["x" * MAX_ITEM_BYTES])
    expect_limit("MAX_MAP_CALL_BYTES", "items", items=["x" * (MAX_ITEM_BYTES - 10)] * 70)
    expect_limit("MAX_SUBTASKS", "items", so_far=MAX_SUBTASKS)
    plan_map(ROOT_KEY, 0, "t", ["x"], subtasks_so_far=MAX_SUBTASKS - 1)
    deepest = "r" + "/0.0" * MAX_MAP_DEPTH
    expect_limit("MAX_MAP_DEPTH", "parent_key", parent=deepest)
    plan_map("r" + "/0.0" * (MAX_MAP_DEPTH - 1), 0, "t", ["x"], subtasks_so_far=0)


@pytest.mark.parametrize("name", ["", "reduce", "root", "9lives", "a b", "x" * 65])
def test_bad_task_names(name: str) -> None:
    expect_limit("task_name", "task_name", name=name)


def test_malformed_calls() -> None:
    expect_limit("json", "items", items=[float("nan")])
    expect_limit("json", "items", items=[object()])
    expect_limit("key", "parent_key", parent="r/x")
    with pytest.raises(MapLimitError):
        plan_map(ROOT_KEY, -1, "t", [], subtasks_so_far=0)


def test_batches_and_reduce_pages() -> None:
    assert call_batches(2_500) == [range(0, 1000), range(1000, 2000), range(2000, 2500)]
    assert call_batches(0) == []
    with pytest.raises(ValueError):
        call_batches(5, 0)
    assert reduce_pages(REDUCE_INLINE_RESULTS) is None
    pages = reduce_pages(100_000)
    assert pages is not None and len(pages) == 100_000 // REDUCE_PAGE_SIZE
    assert subtask_key("r", 2, 7) == "r/2.7"
