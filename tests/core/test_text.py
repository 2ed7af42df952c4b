"""Single-line text: every character that breaks a line (for str.splitlines and so for the
e-mail package) or is another control character is refused, and one_line removes them all."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from jobring.core.text import one_line, one_line_problem


def test_every_line_breaking_character_is_refused() -> None:
    for code in range(0x110000):
        ch = chr(code)
        if len(f"a{ch}b".splitlines()) > 1 or code < 0x20 or code == 0x7F:
            assert one_line_problem(f"name{ch}") is not None, hex(code)


@given(st.text())
def test_one_line_leaves_a_single_line_and_touches_nothing_else(value: str) -> None:
    cleaned = one_line(value)
    assert one_line_problem(cleaned) is None
    assert len(f"a{cleaned}b".splitlines()) == 1
    if one_line_problem(value) is None:
        assert cleaned == value
