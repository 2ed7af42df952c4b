"""No pattern in the package ends with ``$``: in Python's ``re`` it also matches before a final
line break, so ``"admin\\n"`` would pass a check written as ``match(r"^...$")``. Checks use
``fullmatch`` (or ``\\Z``) instead."""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "jobring"
_RE_CALLS = {"compile", "match", "search", "fullmatch", "sub", "subn", "split", "findall", "finditer"}


def _ends_with_dollar(pattern: str) -> bool:
    if not pattern.endswith("$"):
        return False
    backslashes = len(pattern[:-1]) - len(pattern[:-1].rstrip("\\"))
    return backslashes % 2 == 0  # an escaped "\$" is a literal dollar sign


def _is_re_call(node: ast.AST) -> bool:
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and isinstance(node.func.value, ast.Name)
        and node.func.value.id == "re"
        and node.func.attr in _RE_CALLS
        and bool(node.args)
        and isinstance(node.args[0], ast.Constant)
        and isinstance(node.args[0].value, str)
    )


def _patterns(tree: ast.AST) -> list[tuple[int, str]]:
    return [(node.lineno, node.args[0].value) for node in ast.walk(tree)
            if _is_re_call(node) and isinstance(node, ast.Call) and isinstance(node.args[0], ast.Constant)]


def test_no_pattern_ends_with_a_dollar() -> None:
    offenders = [
        f"{path.relative_to(SRC.parent)}:{line}: {pattern!r}"
        for path in sorted(SRC.rglob("*.py"))
        for line, pattern in _patterns(ast.parse(path.read_text(encoding="utf-8")))
        if _ends_with_dollar(pattern)
    ]
    assert not offenders, "use fullmatch (or \\Z) instead of $:\n" + "\n".join(offenders)


def test_the_check_finds_a_dollar_anchor() -> None:
    tree = ast.parse('import re\nNAME = re.compile(r"^[a-z]+$")\nPRICE = re.compile(r"\\$")\n')
    assert [p for _, p in _patterns(tree) if _ends_with_dollar(p)] == ["^[a-z]+$"]
