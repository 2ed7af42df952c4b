"""Templates: node params, concurrency keys and business dates through one engine."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from jobring.core.expression import ExpressionError
from jobring.core.templating import (
    MAX_OUTPUT_CHARS,
    MAX_TEMPLATE_CHARS,
    TemplateError,
    parse_template,
    render_template,
)

LOGICAL = datetime(2026, 3, 1, 0, 0, tzinfo=UTC)
VARS = {
    "rows": 1234, "region": "eu", "a": {"b": [{"c": "deep"}]}, "flag": False, "none": None,
    "params": {"tenant": "acme"}, "logical_date": LOGICAL,
    "data_interval_start": LOGICAL - timedelta(days=1), "data_interval_end": LOGICAL,
}


@pytest.mark.parametrize(("template", "expected"), [
    ("plain text", "plain text"),
    ("", ""),
    ("--rows={{ rows }}", "--rows=1234"),
    ("{{rows}}{{region}}", "1234eu"),
    ("{{ a.b[0].c }}", "deep"),
    ("{{ a.b }}", '[{"c":"deep"}]'),
    ("{{ flag }}/{{ none }}", "false/null"),
    ("tenant-{{params.tenant}}", "tenant-acme"),
    ('{{ logical_date | fmt("%Y%m%d") }}', "20260301"),
    ('{{ logical_date - 1d | fmt("%Y-%m-%d") }}', "2026-02-28"),
    ('{{ logical_date + 2h | fmt("%H:%M") }}', "02:00"),
    ('{{ logical_date - 1w + 30m + 15s | fmt("%d %H:%M:%S") }}', "22 00:30:15"),
    ("{{ logical_date }}", "2026-03-01T00:00:00+00:00"),
    ('{{ data_interval_start | fmt("%Y%m%d") }}..{{ data_interval_end | fmt("%Y%m%d") }}',
     "20260228..20260301"),
    ('{{ missing | default("eu") }}', "eu"),
    ("{{ rows > 1000 }}", "true"),
    ('{{ "{{" }} literal', "{{ literal"),
    ('{{ "}}" }}', "}}"),
    ("a }} b", "a }} b"),
    ("line1\n{{ region }}\nline3", "line1\neu\nline3"),
])
def test_render(template: str, expected: str) -> None:
    assert render_template(template, VARS) == expected


@pytest.mark.parametrize(("template", "where", "message"), [
    ("rows={{ missing }}", "column 9", "variable 'missing' does not exist"),
    ("x\n  y {{ a.b[3].c }}", "line 2, column 11", "[3] does not exist"),
    ("{{ logical_date - 1d }}x{{ 1d }}", "column 28", "a duration cannot be rendered"),
    ("{{ region | fmt('%Y') }}", "column 11", "fmt formats a datetime"),
])
def test_render_errors_name_the_position(template: str, where: str, message: str) -> None:
    with pytest.raises(TemplateError) as caught:
        render_template(template, VARS)
    assert str(caught.value).startswith(f"{where}: ")
    assert message in caught.value.message


@pytest.mark.parametrize(("template", "where", "message"), [
    ("a {{ rows", "column 3", "'{{' without its '}}'"),
    ("a {{ }} b", "column 6", "expected a value, found '}}'"),
    ("x\n{{ rows + }}", "line 2, column 11", "expected a value, found '}}'"),
    ("{{ rows | upper }}", "column 11", "unknown filter 'upper'"),
    ("{{ a.__class__.__mro__ }}ok{{ os.system('x') }}", "column 40", "unexpected '('"),
    ("{{ '}} }}", "column 4", "string not closed"),
])
def test_syntax_errors_name_the_position(template: str, where: str, message: str) -> None:
    with pytest.raises(TemplateError) as caught:
        parse_template(template)
    assert str(caught.value).startswith(f"{where}: ")
    assert message in caught.value.message
    assert isinstance(caught.value, ExpressionError)


def test_output_and_template_are_capped() -> None:
    long_value = {"s": "x" * 600}
    assert len(render_template("{{ s }}", long_value)) == 600
    with pytest.raises(TemplateError, match="output longer than 512"):
        render_template("{{ s }}", long_value, max_chars=512)
    with pytest.raises(TemplateError, match=f"output longer than {MAX_OUTPUT_CHARS}"):
        render_template("y" * (MAX_OUTPUT_CHARS + 1), {})
    with pytest.raises(TemplateError, match="template longer than"):
        parse_template("z" * (MAX_TEMPLATE_CHARS + 1))


def test_parse_once_render_often() -> None:
    template = parse_template("{{ region }}-{{ params.tenant }}-{{ rows | default(0) }}")
    assert template.variables == {"region", "params", "rows"}
    assert not template.is_constant
    assert parse_template("no holes").is_constant
    assert template.render({"region": "us", "params": {"tenant": "t"}}) == "us-t-0"
    assert template.render(VARS) == "eu-acme-1234"
