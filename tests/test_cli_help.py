"""The CLI as a program: an example in every command's help, no traceback on a closed pipe,
shell completion, and `jobring password`."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from jobring.admin.store import Store
from jobring.cli import build_parser, main
from jobring.cli.examples import walk
from tests.client.adminkit import ADMIN_PASSWORD, AdminEnv, admin_env
from tests.client.clikit import Cli


def test_every_command_help_ends_with_an_example(capsys: pytest.CaptureFixture[str]) -> None:
    commands = walk(build_parser())
    assert len(commands) > 40
    for path, parser in commands:
        assert (parser.epilog or "").startswith("example:\n  "), f"`jobring {path}` has no example"
    with pytest.raises(SystemExit):
        main(["jobs", "add", "--help"])
    out = capsys.readouterr().out
    assert "example:\n  jobring jobs add --group my-app" in out
    with pytest.raises(SystemExit):
        main(["--help"])
    assert "example:\n  make run" in capsys.readouterr().out


def _cli_process(*argv: str, env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-m", "jobring.cli", *argv], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=env)


def test_output_into_a_reader_that_closes_early_ends_quietly(tmp_path: Path) -> None:
    # `jobring cron next ... | head -0`: the reader is gone before anything is written.
    proc = _cli_process("cron", "next", "0/1 * * * * ?", "--count", "1000")
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()
    code = proc.wait(60)
    err = proc.stderr.read().decode()
    proc.stderr.close()
    assert code == 0 and "Traceback" not in err and "BrokenPipe" not in err, err


def test_bash_completion_offers_the_commands(tmp_path: Path) -> None:
    # What `eval "$(register-python-argcomplete jobring)"` makes bash do on `jobring jo<TAB>`.
    answer = tmp_path / "completions"
    env = dict(os.environ, _ARGCOMPLETE="1", _ARGCOMPLETE_IFS="\n", COMP_LINE="jobring jo", COMP_POINT="10",
               _ARGCOMPLETE_STDOUT_FILENAME=str(answer))
    done = subprocess.run([sys.executable, "-m", "jobring.cli"], env=env, capture_output=True, timeout=60,
                          stdin=subprocess.DEVNULL, check=False)
    assert done.returncode == 0, done.stderr
    assert answer.read_text().split() == ["jobs"]


@pytest.fixture
async def env(sqlite_store: Store) -> AsyncIterator[AdminEnv]:
    async for built in admin_env(sqlite_store):
        yield built


async def test_password_changes_the_users_password(
    env: AdminEnv, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("JOBRING_URL", "http://admin.test")
    monkeypatch.setenv("JOBRING_PASSWORD", ADMIN_PASSWORD)
    monkeypatch.setenv("JOBRING_NEW_PASSWORD", "A-brand-new-password-5")
    cli = Cli(capsys, app=env.app)
    changed = await cli("password", "--user", "admin")
    # The CLI's login session ends with the change, and so does the admin's API token of the env.
    assert (changed.code, changed.err) == (
        0, "password of admin changed; 1 session ended and 1 API token revoked\n")
    again = await cli("password", "--user", "admin")  # the old password no longer works
    assert again.code == 2


def test_an_admin_command_without_the_admin_libraries_says_what_to_install(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    # As in `pip install jobring` (no admin extra): importing SQLAlchemy fails.
    for name in ("sqlalchemy", "sqlalchemy.exc"):
        monkeypatch.setitem(sys.modules, name, None)
    code = main(["db", "upgrade", "--database-url", f"sqlite+aiosqlite:///{tmp_path}/x.db"])
    err = capsys.readouterr().err
    assert code == 2 and "pip install 'jobring[admin]'" in err and "sqlalchemy" in err
