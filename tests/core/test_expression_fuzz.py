"""Fuzzing the expression language and templates: whatever the input, the only error is ours.

Three sources of input: arbitrary text, soups of the language's own tokens (which reach deep
into the parser), and well-formed random expressions (which reach every operator at run time).
Each is parsed and evaluated against JSON data, datetimes and a hostile Python object; the only
exception allowed is ExpressionError, results are always values of the language, and the
hostile object is never touched (no attribute, item or operator of it is used).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jobring.core.expression import ExpressionError, Value, parse_expression, render_value
from jobring.core.expression.evaluation import is_json_data
from jobring.core.templating import parse_template

FUZZ = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])


class Hostile:
    touched = 0

    def __getattribute__(self, name: str) -> object:
        Hostile.touched += 1
        return object.__getattribute__(self, name)


DATA: dict[str, object] = {
    "rows": 1234, "ratio": -0.5, "name": "eu", "flag": True, "nothing": None,
    "list": [1, "two", [3], {"four": 4}, None, False], "obj": {"a": {"b": [1, 2]}, "": 0, "x y": "z"},
}
NAMES: dict[str, object] = {**DATA, "ctx": dict(DATA), "day": datetime(2026, 1, 31, 23, 0, tzinfo=UTC),
                            "naive": datetime(2026, 1, 1), "span": timedelta(hours=3), "h": Hostile(),
                            "hl": [Hostile()], "hd": {"k": Hostile()}}
RESULT_TYPES = (type(None), bool, int, float, str, list, dict, datetime, timedelta)

VOCABULARY = [
    "rows", "ratio", "name", "flag", "nothing", "list", "obj", "ctx", "day", "naive", "span", "missing",
    "h", "hl", "hd", "a", "b", "x", "true", "false", "null", "and", "or", "not", "in",
    "0", "1", "-1", "2.5", "1e3", "1e999", "3d", "2h", "15m", "30s", "1w", "7x", "1.5h", "999999999999w",
    '"eu"', "'a b'", '"\\n"', '"\\q"', '"', "'", "==", "!=", "<", "<=", ">", ">=", "&&", "||", "!", "+", "-",
    "|", ".", ",", "(", ")", "[", "]", "{", "}", "}}", "{{", "$", "fmt", "default", "exists", "len", "json",
    '"%Y%m%d"', '"%"', '"\\x00"',
]


def check(source: str) -> None:
    before = Hostile.touched
    try:
        expression = parse_expression(source)
        value = expression.evaluate(NAMES)  # type: ignore[arg-type]
    except ExpressionError as exc:
        assert 0 <= exc.position <= len(source)
        assert exc.message
    else:
        assert isinstance(value, RESULT_TYPES)
        try:
            render_value(value)
        except ValueError:  # a duration, or a name's list that holds a Python object
            assert type(value) is timedelta or not is_json_data(value)
    assert Hostile.touched == before


@FUZZ
@given(st.text(max_size=120))
def test_arbitrary_text(source: str) -> None:
    check(source)


@FUZZ
@given(st.lists(st.sampled_from(VOCABULARY), max_size=30).map(" ".join))
def test_token_soup(source: str) -> None:
    check(source)


@FUZZ
@given(st.lists(st.sampled_from(VOCABULARY), max_size=30).map("".join))
def test_token_soup_without_spaces(source: str) -> None:
    check(source)


LEAVES = st.sampled_from(["rows", "ratio", "name", "flag", "nothing", "list", "obj", "ctx", "day", "span",
                          "missing", "h", "hl", "hd", "0", "1", "2.5", "3d", "2h", '"eu"', "true", "null",
                          "[1, 2]", "[]", "obj.a", "list[3]", 'obj["x y"]', "hl[0]", "hd.k"])


def _compound(inner: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    binary = st.sampled_from(["==", "!=", "<", "<=", ">", ">=", "in", "and", "or", "+", "-"])
    filters = st.sampled_from(['fmt("%Y-%m-%d %H")', "default(0)", "exists", "len", "json"])
    return st.one_of(
        st.tuples(inner, binary, inner).map(lambda t: f"({t[0]} {t[1]} {t[2]})"),
        st.tuples(st.sampled_from(["not ", "-", "!"]), inner).map(lambda t: f"{t[0]}({t[1]})"),
        st.tuples(inner, filters).map(lambda t: f"({t[0]} | {t[1]})"),
        st.tuples(inner, st.sampled_from([".a", ".b", "[0]", "[-1]", '["x y"]', ".k"])).map("".join),
        st.lists(inner, max_size=3).map(lambda items: f"[{', '.join(items)}]"),
    )


@FUZZ
@given(st.recursive(LEAVES, _compound, max_leaves=25))
def test_well_formed_expressions(source: str) -> None:
    check(source)


@settings(max_examples=60, deadline=None)
@given(st.integers(min_value=0, max_value=400), st.sampled_from(["(", "[", "-", "!", "not "]))
def test_deep_nesting_is_refused_not_a_recursion_error(depth: int, opener: str) -> None:
    closer = {"(": ")", "[": "]"}.get(opener, "")
    check(opener * depth + "1" + closer * depth)


@FUZZ
@given(st.lists(st.sampled_from(["text ", "{{", "}}", " rows ", " name | len ", '"}}"', "{", "}", "\n",
                                 " missing ", " day | fmt('%Y') ", " span "]), max_size=20).map("".join))
def test_templates(text: str) -> None:
    before = Hostile.touched
    try:
        rendered = parse_template(text).render(NAMES, max_chars=500)  # type: ignore[arg-type]
    except ExpressionError as exc:
        assert 0 <= exc.position <= len(text)
    else:
        assert len(rendered) <= 500
    assert Hostile.touched == before


def test_results_are_values() -> None:
    value: Value = parse_expression("[rows, name, [flag]]").evaluate(NAMES)  # type: ignore[arg-type]
    assert value == [1234, "eu", [True]]
