"""`jobring calendars ...` and the job timing options of `jobring jobs ...` against the real app
in-process: add, import, show, edit and delete calendars; a job's calendars, window, limit and
jitter; `jobs next` listing the excluded instants; a pause with its reason."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from jobring.admin.store import Store
from jobring.cli.calendars import _users
from tests.client.adminkit import AdminEnv, admin_env
from tests.client.clikit import Cli, cli_for

ICS = (
    "BEGIN:VCALENDAR\r\nVERSION:2.0\r\nPRODID:-//t//EN\r\nBEGIN:VEVENT\r\nUID:1\r\n"
    "DTSTART;VALUE=DATE:20300102\r\nEND:VEVENT\r\nEND:VCALENDAR\r\n"
)


@pytest.fixture
async def env(sqlite_store: Store) -> AsyncIterator[AdminEnv]:
    async for built in admin_env(sqlite_store):
        yield built


@pytest.fixture
def cli(env: AdminEnv, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> Cli:
    return cli_for(env, capsys, monkeypatch)


async def test_calendars_add_import_show_edit_delete(env: AdminEnv, cli: Cli, tmp_path: Path) -> None:
    await env.group("billing", "Billing")
    added = await cli(
        "calendars",
        "add",
        "ops",
        "--group",
        "billing",
        "--zone",
        "Europe/Berlin",
        "--date",
        "2030-01-01",
        "--range",
        "2030-02-01..2030-02-03",
        "--window",
        "22:00-06:00",
        "--workdays",
        "mon,tue,wed,thu,fri",
    )
    assert added.code == 0, added.err
    assert "calendar ops (id" in added.out and "dates: 1" in added.out
    bad = await cli("calendars", "add", "bad", "--date", "2030-02-30")
    assert bad.code == 2 and "dates[0]" in bad.err
    malformed = await cli("calendars", "add", "bad", "--range", "2030-02-01")
    assert malformed.code == 2 and "--range" in malformed.err
    ics = tmp_path / "h.ics"
    ics.write_text(ICS)
    imported = await cli(
        "calendars", "import", "holidays", "--ics", str(ics), "--until", "2031-01-01", "--json"
    )
    assert imported.code == 0, imported.err
    assert json.loads(imported.out)["spec"]["dates"] == ["2030-01-02"]
    dates = tmp_path / "dates.txt"
    dates.write_text("2030-05-01\n2030-05-02, 2030-05-03\n")
    again = await cli("calendars", "import", "holidays", "--dates", str(dates), "--replace", "--json")
    assert json.loads(again.out)["spec"]["dates"] == ["2030-05-01", "2030-05-02", "2030-05-03"]
    listing = await cli("calendars", "list")
    assert listing.out.split()[:6] == ["ID", "NAME", "GROUP", "ZONE", "PARTS", "JOBS"]
    assert "holidays" in listing.out and "global" in listing.out
    shown = await cli("calendars", "show", "ops")
    assert shown.code == 0 and '"zone": "Europe/Berlin"' in shown.out
    edited = await cli("calendars", "edit", "ops", "--date", "2030-03-03", "--json")
    assert json.loads(edited.out)["spec"]["dates"] == ["2030-03-03"]
    assert "day_windows" not in json.loads(edited.out)["spec"]  # an edit replaces the parts
    assert (await cli("calendars", "show", "nope")).code == 2
    assert (await cli("calendars", "delete", "ops")).code == 0
    assert "ops" not in (await cli("calendars", "list")).out


async def test_job_timing_options_next_and_pause(env: AdminEnv, cli: Cli) -> None:
    await env.group("billing", "Billing")
    assert (await cli("calendars", "add", "holidays", "--date", "2030-01-02")).code == 0
    added = await cli(
        "jobs",
        "add",
        "--group",
        "billing",
        "--desc",
        "d",
        "--handler",
        "h",
        "--cron",
        "0 0 3 * * ?",
        "--timezone",
        "UTC",
        "--calendar",
        "holidays",
        "--jitter",
        "0",
        "--max-runs",
        "10",
        "--start-at",
        "2030-01-01T00:00:00Z",
        "--json",
    )
    assert added.code == 0, added.err
    job = json.loads(added.out)
    assert job["timing"]["calendars"] == ["holidays"] and job["timing"]["max_runs"] == 10
    unknown = await cli(
        "jobs",
        "add",
        "--group",
        "billing",
        "--desc",
        "d",
        "--handler",
        "h",
        "--cron",
        "0 0 3 * * ?",
        "--calendar",
        "nope",
    )
    assert unknown.code == 2 and "timing.calendars[0]" in unknown.err
    nxt = await cli("jobs", "next", str(job["id"]), "--count", "2")
    assert nxt.code == 0, nxt.err
    lines = nxt.out.splitlines()
    assert lines[0].startswith("2030-01-01 03:00:00")
    assert lines[1].startswith("2030-01-02 03:00:00") and "excluded: calendar 'holidays'" in lines[1]
    assert lines[2].startswith("2030-01-03 03:00:00")
    # An edit changes the rules it names and keeps the others.
    edited = await cli(
        "jobs", "edit", str(job["id"]), "--calendar-action", "move", "--max-runs", "0", "--json"
    )
    timing = json.loads(edited.out)["timing"]
    assert (timing["calendar_action"], timing["max_runs"], timing["calendars"]) == (
        "move",
        None,
        ["holidays"],
    )
    edited = await cli("jobs", "edit", str(job["id"]), "--overlap", "buffer_one", "--catch-up", "600",
                       "--catch-up-mode", "once", "--dst-gap", "next_valid", "--json")
    assert edited.code == 0, edited.err
    timing = json.loads(edited.out)["timing"]
    assert timing["overlap"] == "buffer_one" and timing["max_runs"] is None
    assert timing["catch_up"] == {"window_seconds": 600, "mode": "once", "limit": 100}
    assert timing["dst"] == {"gap": "next_valid", "repeat": "second"}
    # A partial catch-up or DST change keeps the parts not named.
    edited = await cli("jobs", "edit", str(job["id"]), "--catch-up-limit", "5", "--dst-repeat", "both",
                       "--overlap", "allow_all", "--json")
    timing = json.loads(edited.out)["timing"]
    assert timing["catch_up"] == {"window_seconds": 600, "mode": "once", "limit": 5}
    assert timing["dst"] == {"gap": "next_valid", "repeat": "both"} and timing["overlap"] == "allow_all"
    edited = await cli("jobs", "edit", str(job["id"]), "--catch-up", "0", "--json")
    assert json.loads(edited.out)["timing"]["catch_up"] is None
    bad = await cli("jobs", "edit", str(job["id"]), "--catch-up", "5")
    assert bad.code == 2 and "timing.catch_up.window_seconds" in bad.err
    cleared = await cli("jobs", "edit", str(job["id"]), "--no-timing", "--json")
    assert json.loads(cleared.out)["timing"] is None
    assert (await cli("jobs", "start", str(job["id"]))).code == 0
    stopped = await cli("jobs", "stop", str(job["id"]), "--reason", "waiting for upstream", "--json")
    note = json.loads(stopped.out)["pause_note"]
    assert note["reason"] == "waiting for upstream" and note["by"]


def test_the_jobs_of_groups_the_caller_may_not_read_are_counted_without_ids() -> None:
    assert _users({"used_by": [3, 5], "used_by_hidden": 2}, ", ") == "3, 5, +2 in other groups"
    assert _users({"used_by": [], "used_by_hidden": 1}, ",") == "+1 in other groups"
    assert _users({"used_by": [4]}, ",") == "4"
