"""`jobring executor module:attr`: target resolution and bad input (exit 2)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from jobring.cli import main
from jobring.cli.executor import load_target


@pytest.mark.parametrize(
    ("target", "needle"),
    [
        ("jobring.demo", "module:attr"),
        ("no_such_module_xyz:executor", "cannot import"),
        ("jobring.demo:nothing", "no attribute"),
        ("jobring.demo:hello", "not a jobring Executor"),
    ],
)
def test_bad_target_exits_2_with_a_message(
    target: str, needle: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["executor", target]) == 2
    assert needle in capsys.readouterr().err


def test_missing_token_exits_2(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("JOBRING_EXECUTOR_ACCESS_TOKEN", raising=False)
    assert main(["executor", "jobring.demo:executor", "--host", "127.0.0.1", "--port", "0"]) == 2
    assert "access token is missing" in capsys.readouterr().err


def test_open_executor_on_a_public_interface_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    args = ["executor", "jobring.demo:executor", "--allow-open", "--host", "0.0.0.0", "--port", "0"]
    assert main(args) == 2
    assert "loopback" in capsys.readouterr().err


def test_bad_flag_values_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["executor", "jobring.demo:executor", "--port", "abc"])
    assert exc.value.code == 2
    assert main(["executor", "jobring.demo:executor", "--admin", "not-a-url", "--token", "t"]) == 2
    assert "http(s) URL" in capsys.readouterr().err


def test_target_module_is_found_in_the_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "cwd_jobs_for_test.py").write_text(
        "from jobring import Executor\nexecutor = Executor(app_name='cwd-app', environ={})\n"
    )
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(tmp_path))])
    executor = load_target("cwd_jobs_for_test:executor")
    assert executor.settings.app_name == "cwd-app"


def test_a_bad_setting_read_when_the_target_module_is_imported_exits_2(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "bad_env_jobs_for_test.py").write_text(
        "from jobring import Executor\nexecutor = Executor(app_name='a')\n"
    )
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))  # load_target adds the working directory
    monkeypatch.setenv("JOBRING_EXECUTOR_PORT", "nine")
    monkeypatch.delitem(sys.modules, "bad_env_jobs_for_test", raising=False)
    assert main(["executor", "bad_env_jobs_for_test:executor"]) == 2
    err = capsys.readouterr().err
    assert "invalid settings: port: expected an integer, got 'nine' (from JOBRING_EXECUTOR_PORT)" in err
