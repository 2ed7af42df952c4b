"""`jobring cron next`: output format, options, and usage errors (exit 2)."""

from __future__ import annotations

import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from jobring.cli import main


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, list[str], str]:
    code = main(["cron", "next", *argv])
    captured = capsys.readouterr()
    return code, captured.out.splitlines(), captured.err


def test_default_count_is_five_in_utc(capsys: pytest.CaptureFixture[str]) -> None:
    code, lines, err = run(capsys, "0 0 12 * * ?", "--after", "2021-03-10T12:00:00Z")
    assert code == 0, err
    assert lines == [f"2021-03-{day}T12:00:00+00:00" for day in (11, 12, 13, 14, 15)]


def test_zone_count_and_naive_after_read_in_zone(capsys: pytest.CaptureFixture[str]) -> None:
    # Third Friday of each month, Berlin: 2026-01-16 (CET), 2026-02-20, then 2026-04-17 in CEST.
    code, lines, _ = run(
        capsys, "0 15 10 ? * 6#3", "--tz", "Europe/Berlin", "--after", "2026-01-01T00:00", "--count", "4"
    )
    assert code == 0
    assert lines == [
        "2026-01-16T10:15:00+01:00",
        "2026-02-20T10:15:00+01:00",
        "2026-03-20T10:15:00+01:00",
        "2026-04-17T10:15:00+02:00",
    ]


def test_after_as_epoch_ms(capsys: pytest.CaptureFixture[str]) -> None:
    # 1_615_377_600_000 ms = 2021-03-10T12:00:00Z.
    code, lines, _ = run(capsys, "*/30 * * * * ?", "--after", "1615377600000", "--count", "2")
    assert code == 0
    assert lines == ["2021-03-10T12:00:30+00:00", "2021-03-10T12:01:00+00:00"]


def test_after_defaults_to_now(capsys: pytest.CaptureFixture[str]) -> None:
    before = datetime.now(UTC)
    code, lines, _ = run(capsys, "* * * * * ?", "--count", "1")
    after = datetime.now(UTC)
    assert code == 0
    fire = datetime.fromisoformat(lines[0])
    assert fire.utcoffset() == timedelta(0)
    # The next whole second after "now", where now was read between before and after.
    assert before < fire <= after.replace(microsecond=0) + timedelta(seconds=1)


def test_fewer_lines_when_the_schedule_ends(capsys: pytest.CaptureFixture[str]) -> None:
    code, lines, err = run(capsys, "0 0 0 1 1 ? 2030-2031", "--after", "2029-06-01T00:00Z", "--count", "5")
    assert code == 0
    assert lines == ["2030-01-01T00:00:00+00:00", "2031-01-01T00:00:00+00:00"]
    assert "no further fire time" in err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["0 0 25 * * ?"], "invalid cron expression '0 0 25 * * ?': hours: value 25 out of range 0-23"),
        (["0 0 12 * * *"], "day-of-month/day-of-week"),
        (["0 0 12 * * ?", "--tz", "Mars/Base"], "--tz: unknown time zone 'Mars/Base'"),
        (["0 0 12 * * ?", "--after", "yesterday"], "--after must be ISO-8601 or epoch milliseconds"),
        (["0 0 12 * * ?", "--after", "99999999999999999999"], "--after must be"),
        (["0 0 12 * * ?", "--count", "0"], "--count must be 1-1000, got 0"),
        (["0 0 12 * * ?", "--count", "1001"], "--count must be 1-1000"),
        (["0 0 12 * * ?", "--count", "many"], "--count must be a whole number"),
    ],
)
def test_bad_input_exits_2_with_reason(
    capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    code, lines, err = run(capsys, *argv)
    assert code == 2
    assert lines == []
    assert err.startswith("jobring: error: ")
    assert message in err


def test_cron_without_subcommand_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["cron"]) == 2


def test_console_script_reports_usage_errors_with_exit_2() -> None:
    # One real process: the installed entry point must turn main()'s result into the exit status.
    script = Path(sys.executable).with_name("jobring")
    result = subprocess.run(
        [str(script), "cron", "next", "0 15 10 L * MON", "--count", "2"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 2
    assert result.stdout == ""
    assert result.stderr.startswith("jobring: error: invalid cron expression '0 15 10 L * MON': day-of-month")


def test_a_unix_expression_is_shown_in_its_quartz_form(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["cron", "next", "*/15 * * * *", "--after", "2026-01-01T00:00:00", "--count", "2"]) == 0
    captured = capsys.readouterr()
    assert captured.out.splitlines() == ["2026-01-01T00:15:00+00:00", "2026-01-01T00:30:00+00:00"]
    assert "as Quartz (stored so): 0 */15 * * * ?" in captured.err
