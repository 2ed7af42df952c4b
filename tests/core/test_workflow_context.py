"""The workflow context: JSON only, capped, last writer wins, XXL-JOB result messages."""

from __future__ import annotations

import pytest

from jobring.core.workflow.context import (
    CONTEXT_MAX_BYTES,
    MAX_JSON_DEPTH,
    ContextError,
    context_changes,
    json_size,
    merge_context,
    namespace,
    parse_result_message,
)


def test_merge_sets_keys_over_the_old_ones() -> None:
    before = {"rows": 1, "region": "eu"}
    after = merge_context(before, {"rows": 2, "files": ["a"]})
    assert after == {"rows": 2, "region": "eu", "files": ["a"]}
    assert before == {"rows": 1, "region": "eu"}  # a new object


@pytest.mark.parametrize(("additions", "message"), [
    ({"x": float("nan")}, "not a JSON number"),
    ({"x": {"y": [float("inf")]}}, "x.y[0]: inf is not a JSON number"),
    ({"x": {1: "a"}}, "object keys must be strings"),
    ({"x": (1, 2)}, "a Python tuple is not a JSON value"),
    ({"x": object()}, "a Python object is not a JSON value"),
    ({"": 1}, "context keys are strings of 1-256"),
    ({"k" * 257: 1}, "context keys are strings"),
])
def test_non_json_additions_are_refused(additions: dict[object, object], message: str) -> None:
    with pytest.raises(ContextError) as caught:
        merge_context({}, additions)  # type: ignore[arg-type]
    assert message in str(caught.value)


def test_depth_is_capped() -> None:
    value: object = 1
    for _ in range(MAX_JSON_DEPTH):
        value = [value]
    merge_context({}, {"ok": value})
    with pytest.raises(ContextError, match="nested more than"):
        merge_context({}, {"deep": [value]})


def test_size_is_capped() -> None:
    filler = "x" * (CONTEXT_MAX_BYTES - len('{"a":""}'))
    full = merge_context({}, {"a": filler})
    assert json_size(full) == CONTEXT_MAX_BYTES
    grown = CONTEXT_MAX_BYTES + len(',"b":1')
    with pytest.raises(ContextError, match=f"would be {grown} bytes, over the cap"):
        merge_context(full, {"b": 1})
    assert json_size({"é": "€"}) == len('{"é":"€"}'.encode())


@pytest.mark.parametrize(("message", "added", "reason"), [
    ('{"rows": 5, "files": ["a"]}', {"rows": 5, "files": ["a"]}, None),
    ("  {}  ", {}, None),
    (None, None, "result message is empty"),
    ("   ", None, "result message is empty"),
    ("done in 5s", None, "result message is not JSON"),
    ("[1, 2]", None, "not an object (list)"),
    ("42", None, "not an object (int)"),
    ('{"x": NaN}', None, "NaN is not JSON"),
    ("[" * 100_000, None, "not JSON"),
    # As stored after a success that fired child jobs: the admin's section is not the executor's.
    ('{"rows": 5}\n\n>>>>>>>>>>> Trigger child job <<<<<<<<<<<\n1/1 [Job ID=7], Trigger success, '
     "Trigger msg: submitted", {"rows": 5}, None),
    (">>>>>>>>>>> Trigger child job <<<<<<<<<<<\n1/1 [Job ID=7], Trigger success", None, "empty"),
    # ... cut by the stored message's length inside the section's header
    ('{"rows": 5}\n\n>>>>>>>> Trig', {"rows": 5}, None),
])
def test_result_messages(message: str | None, added: dict[str, object] | None, reason: str | None) -> None:
    got, why = parse_result_message(message)
    assert got == added
    if reason is None:
        assert why is None
    else:
        assert why is not None and reason in why


def test_changes_of_a_sub_workflow() -> None:
    before = {"a": 1, "b": [1], "c": "x"}
    after = {"a": 1, "b": [1, 2], "c": "x", "d": True}
    assert context_changes(before, after) == {"b": [1, 2], "d": True}
    assert context_changes({"flag": 1}, {"flag": True}) == {"flag": True}


def test_namespace_reserves_ctx_and_item_names() -> None:
    context = {"rows": 3, "ctx": "shadowed", "item": "shadowed"}
    names = namespace(context)
    assert names["rows"] == 3 and names["ctx"] == context and "item" not in names
    in_item = namespace(context, item={"f": 1}, item_index=2)
    assert in_item["item"] == {"f": 1} and in_item["item_index"] == 2
