"""No tracked file may depend on where this clone lives: a fresh clone anywhere else has no
workspace folder beside it and another absolute path."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def machine_paths() -> list[str]:
    found = {f"{REPO}/", "../shared/", "/shared/spec/", "/shared/xxl-job/"}
    if REPO.parent != Path("/"):
        found.add(f"{REPO.parent}/")
    home = Path.home()
    if home != Path("/"):
        found.add(f"{home}/")
    return sorted(found)


def tracked_files() -> list[Path]:
    try:
        listing = subprocess.run(
            ["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True, timeout=30
        ).stdout
    except (OSError, subprocess.CalledProcessError) as exc:
        pytest.fail(f"git ls-files failed in {REPO}: {exc}")
    return [REPO / name for name in listing.decode().split("\0") if name]


def test_no_tracked_file_names_a_path_of_this_machine() -> None:
    needles = machine_paths()
    offenders = []
    for path in tracked_files():
        if not path.is_file() or path == Path(__file__).resolve():  # this file names them
            continue
        text = path.read_bytes().decode("utf-8", errors="replace")
        offenders += [f"{path.relative_to(REPO)}: {n}" for n in needles if n in text]
    assert not offenders, "tracked files name paths outside the clone:\n" + "\n".join(offenders)


def test_the_check_sees_a_planted_path(tmp_path: Path) -> None:
    planted = tmp_path / "x.md"
    planted.write_text(f"see {REPO}/README.md and ../shared/spec/protocol.md")
    text = planted.read_text()
    found = {n for n in machine_paths() if n in text}
    assert {f"{REPO}/", "../shared/"} <= found
