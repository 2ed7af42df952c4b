"""The expression language: values, strict types, missing values, errors with positions, bounds."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from jobring.core.expression import (
    FILTERS,
    MAX_DEPTH,
    MAX_SOURCE_CHARS,
    ExpressionError,
    Value,
    parse_expression,
    render_value,
    where,
)

DAY = datetime(2026, 3, 10, 12, 30, tzinfo=UTC)
CTX: dict[str, Value] = {
    "rows": 1234, "region": "eu", "ratio": 0.5, "ok": True, "none": None,
    "tags": ["a", "b"], "obj": {"x": [1, {"y": 2}], "odd key": "v", "in": 3},
}
NAMES: dict[str, Value] = {**CTX, "ctx": dict(CTX), "day": DAY, "later": DAY + timedelta(hours=1),
                           "naive": datetime(2026, 3, 10)}


def ev(source: str) -> Value:
    return parse_expression(source).evaluate(NAMES)


@pytest.mark.parametrize(("source", "expected"), [
    ('ctx.rows > 1000 && ctx.region == "eu"', True),
    ("rows > 1000 and region in ['eu', 'us']", True),
    ("rows < 1000 or not ok", False),
    ("!(rows <= 1234)", False),
    ("rows >= 1234 and ratio < 1", True),
    ("obj.x[1].y", 2),
    ('obj.x[-1]["y"] + 1', 3),
    ('obj["odd key"]', "v"),
    ("obj.in", 3),
    ("rows - 34", 1200),
    ("ratio + 1", 1.5),
    ("- -rows", 1234),
    ("1 == 1.0", True),
    ("true == 1", False),
    ("null == none", True),
    ("[1, [2]] == [1, [2]]", True),
    ('"e" in region', True),
    ('"x" in obj', True),
    ('"b" in tags', True),
    ("2 in tags", False),
    ("day + 1d == later - 1h + 1d", True),
    ("day - 1w < day", True),
    ("-1d + 2d == 1d", True),
    ('day - 1d | fmt("%Y%m%d")', "20260309"),
    ('day | fmt("%H:%M")', "12:30"),
    ("missing | default(3) > 2", True),
    ('none | default("z")', "z"),
    ("rows | default(0)", 1234),
    ("missing | exists", False),
    ("obj.nope.deeper | exists", False),
    ("tags[5] | exists", False),
    ("none | exists", True),
    ("tags | len", 2),
    ("region | len == 2", True),
    ("obj.x | json", '[1,{"y":2}]'),
    ("false and missing", False),
    ("true or missing", True),
    ("1e3 == 1000", True),
])
def test_values(source: str, expected: Value) -> None:
    assert ev(source) == expected
    assert type(ev(source)) is type(expected)


@pytest.mark.parametrize(("source", "column", "message"), [
    ("rows >", 7, "expected a value, found the end"),
    ("a < b < c", 7, "comparisons do not chain"),
    ("x | nope", 5, "unknown filter 'nope'"),
    ("1.5h", 1, "durations: whole numbers"),
    ("3x", 1, "bad number or duration"),
    ('"abc', 1, "string not closed"),
    ('"a\\qb"', 3, "unknown escape"),
    ("missing > 1", 1, "variable 'missing' does not exist"),
    ("obj.nope + 1", 4, "field 'nope' does not exist"),
    ("tags[9] == 1", 5, "[9] does not exist"),
    ("rows and true", 1, "expected a boolean, got a number"),
    ("not region", 5, "expected a boolean, got a string"),
    ("region < 1", 8, "cannot order a string and a number"),
    ("ok < true", 4, "cannot order a boolean and a boolean"),
    ("naive < day", 7, "naive and an aware"),
    ("tags.y", 5, "cannot read field 'y' of a list"),
    ("obj[0]", 4, "cannot read [0] of an object"),
    ("rows[true]", 5, "cannot read a boolean index of a number"),
    ("day + 1", 5, "cannot compute datetime + number"),
    ("region + region", 8, "cannot compute string + string"),
    ("tags[0] + 'x'", 9, "cannot compute string + string"),
    ("ok and missing", 8, "variable 'missing' does not exist"),
    ("obj == {'y': 2}", 8, "unexpected character '{'"),
    ("1 in 2", 3, "cannot look for a number in a number"),
    ('rows | fmt("%Y")', 6, "fmt formats a datetime, not a number"),
    ("day | fmt(1)", 5, "fmt takes a format string"),
    ("day | fmt", 5, "filter 'fmt' takes 1 argument"),
    ("rows | len", 6, "len takes a string, list or object"),
    ("day | json", 5, "json takes JSON data"),
    ("[day]", 2, "a datetime cannot be put in a list"),
    ("day + 9999999w", 5, "result out of range"),
    ("99999999999999w", 1, "duration '99999999999999w' out of range"),
    ("1e999", 1, "out of range"),
    ("1" * 40, 1, "number longer than"),
    ("a.1", 3, "expected a field name"),
    ("$", 1, "unexpected character '$'"),
    ("a }} b", 3, "unexpected '}}'"),
    ("(1", 3, "expected ')', found the end"),
    ("f(1)", 2, "unexpected '('"),
    ('__import__("os")', 11, "unexpected '('"),
    ("rows.__class__", 5, "cannot read field '__class__' of a number"),
    ("obj.__class__ == 1", 4, "field '__class__' does not exist"),
])
def test_errors_name_the_position(source: str, column: int, message: str) -> None:
    with pytest.raises(ExpressionError) as caught:
        ev(source)
    assert message in caught.value.message
    assert caught.value.position == column - 1
    assert str(caught.value).startswith(f"column {column}: ")


def test_missing_field_access_on_a_missing_value_names_the_first_missing_part() -> None:
    with pytest.raises(ExpressionError, match="variable 'nothing' does not exist"):
        ev("nothing.a.b == 1")


def test_bounds() -> None:
    nested = "(" * (MAX_DEPTH + 1) + "1" + ")" * (MAX_DEPTH + 1)
    with pytest.raises(ExpressionError, match="nested more than"):
        parse_expression(nested)
    assert parse_expression("(" * (MAX_DEPTH - 1) + "1" + ")" * (MAX_DEPTH - 1)).evaluate({}) == 1
    with pytest.raises(ExpressionError, match="nested more than"):
        parse_expression("!" * 40 + "true")
    with pytest.raises(ExpressionError, match="deeper than"):
        parse_expression("+".join(["1"] * 100))
    with pytest.raises(ExpressionError, match="deeper than"):
        parse_expression("a" + ".b" * 100)
    with pytest.raises(ExpressionError, match="longer than"):
        parse_expression("1" + " " * MAX_SOURCE_CHARS)


def test_variables_are_the_top_level_names() -> None:
    assert parse_expression('ctx.a > 1 and b[c] == "x" | default(d)').variables == {"ctx", "b", "c", "d"}


class Hostile:
    """Records any use; the evaluator must refuse it without touching it."""

    touched: list[str] = []

    def __getattr__(self, name: str) -> object:
        Hostile.touched.append(name)
        return 1

    def __eq__(self, other: object) -> bool:
        Hostile.touched.append("__eq__")
        return True

    def __hash__(self) -> int:
        Hostile.touched.append("__hash__")
        return 1

    def __getitem__(self, key: object) -> object:
        Hostile.touched.append("__getitem__")
        return 1

    def __len__(self) -> int:
        Hostile.touched.append("__len__")
        return 1

    def __lt__(self, other: object) -> bool:
        Hostile.touched.append("__lt__")
        return True

    def __str__(self) -> str:
        Hostile.touched.append("__str__")
        return "hostile"

    __repr__ = __str__


HOSTILE_USES = ["h", "h.x", "h[0]", "h == 1", "h < 1", "h | len", "h | json", "h | exists", "d.h", "d.h.x",
                "l[0]", "l[0] == 1", "1 in l == true", "[h]"]


@pytest.mark.parametrize("source", HOSTILE_USES)
def test_python_objects_are_never_touched(source: str) -> None:
    Hostile.touched.clear()
    names = {"h": Hostile(), "d": {"h": Hostile()}, "l": [Hostile()]}
    try:
        parse_expression(source).evaluate(names)  # type: ignore[arg-type]
    except ExpressionError as exc:
        assert "not readable here" in exc.message or "chain" in exc.message
    assert Hostile.touched == []


def test_list_membership_compares_without_touching_foreign_values() -> None:
    Hostile.touched.clear()
    assert parse_expression("1 in l").evaluate({"l": [Hostile(), 1]}) is True  # type: ignore[dict-item]
    assert Hostile.touched == []


def test_render_value() -> None:
    assert render_value("x") == "x"
    assert render_value(True) == "true"
    assert render_value(None) == "null"
    assert render_value(1.5) == "1.5"
    assert render_value({"a": [1, "é"]}) == '{"a":[1,"é"]}'
    assert render_value(DAY) == "2026-03-10T12:30:00+00:00"
    with pytest.raises(ValueError, match="duration"):
        render_value(timedelta(days=1))


def test_where() -> None:
    assert where("abc", 2) == "column 3"
    assert where("ab\ncd", 4) == "line 2, column 2"


def test_filter_table_matches_the_grammar() -> None:
    assert set(FILTERS) == {"fmt", "default", "exists", "len", "json"}
