"""The settings system: precedence (options > env > file > defaults), the [admin.loop]
table and its rules, errors naming the field and its source, the executor's file."""

from __future__ import annotations

from dataclasses import fields
from pathlib import Path

import pytest

from jobring.admin.loop.loop import LoopConfig
from jobring.admin.runtime.app import loop_config_of
from jobring.admin.services.settings import AdminSettings, LoopSettings, load_settings
from jobring.cli import main
from jobring.configbase import ConfigError
from jobring.executor.config import load_executor_settings


def _toml(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "jobring.toml"
    path.write_text(text, encoding="utf-8")
    return path


def test_options_beat_env_beat_file_beat_defaults(tmp_path: Path) -> None:
    path = _toml(tmp_path, '[admin]\nport = 8001\nhost = "0.0.0.0"\nfast_pool_size = 7\n')
    env = {"JOBRING_PORT": "8002", "JOBRING_HOST": "127.0.0.2"}
    settings = load_settings(path, environ=env, port=8003)
    assert (settings.port, settings.host, settings.fast_pool_size, settings.slow_pool_size) == (
        8003, "127.0.0.2", 7, 100)
    assert load_settings(path, environ=env).port == 8002
    assert load_settings(path, environ={}).port == 8001
    # The file comes from JOBRING_CONFIG when not given; a file without [admin] is read whole.
    top = tmp_path / "top.toml"
    top.write_text("port = 8004\ntrusted_proxies = [\"10.0.0.0/8\", \"192.0.2.7\"]\n", encoding="utf-8")
    from_env = load_settings(environ={"JOBRING_CONFIG": str(top)})
    assert (from_env.port, from_env.trusted_proxies) == (8004, "10.0.0.0/8,192.0.2.7")
    # Such a file holds the loop's tunables as [loop].
    top.write_text("port = 8005\n[loop]\ncycle_ms = 900\n", encoding="utf-8")
    assert load_settings(top, environ={}).loop.given() == {"cycle_ms": 900}


def test_direct_construction_ignores_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JOBRING_PORT", "9")
    assert AdminSettings().port == 8080
    assert load_settings(environ={"JOBRING_PORT": "9"}).port == 9


def test_empty_text_unsets_an_optional_setting(tmp_path: Path) -> None:
    path = _toml(tmp_path, 'timezone = "Asia/Shanghai"\n')
    assert load_settings(path, environ={}).timezone == "Asia/Shanghai"
    assert load_settings(path, environ={"JOBRING_TIMEZONE": ""}).timezone is None


@pytest.mark.parametrize(("source", "needle"), [
    ({"JOBRING_PORT": "eighty"}, "port: expected an integer, got 'eighty' (from JOBRING_PORT)"),
    ({"JOBRING_TAKEOVER": "maybe"}, "takeover: expected true/false, got 'maybe' (from JOBRING_TAKEOVER)"),
    ({"JOBRING_MAX_HEADER_BYTES": "0"}, "max_header_bytes: must be positive"),
    ({"JOBRING_FAST_POOL_SIZE": "-3"},
     "fast_pool_size: must be positive, got '-3' (from JOBRING_FAST_POOL_SIZE)"),
    ({"JOBRING_LOOP__CYCLE_MS": "0"},
     "loop.cycle_ms: must be positive, got '0' (from JOBRING_LOOP__CYCLE_MS)"),
    ({"JOBRING_LOOP__MAX_COALESCE_MS": "-1"}, "loop.max_coalesce_ms: must be at least 0"),
    ({"JOBRING_WORKFLOW_STALE_CLAIM_MS": "500"},
     "workflow_stale_claim_ms: must be between 1000 and 86400000 (milliseconds), got 500 "
     "(from JOBRING_WORKFLOW_STALE_CLAIM_MS)"),
    ({"JOBRING_WORKFLOW_STALE_CLAIM_MS": "5000"},
     "workflow_stale_claim_ms (5000) must exceed executor_connect_timeout + executor_read_timeout "
     "(6000 ms)"),
    ({"JOBRING_WORKFLOW_STALE_CLAIM_MS": "4000", "JOBRING_EXECUTOR_READ_TIMEOUT": "1.5"},
     "(4500 ms): an admin still waiting for an executor's answer would be taken over"),
])
def test_errors_name_the_field_and_where_its_value_came_from(source: dict[str, str], needle: str) -> None:
    with pytest.raises(ConfigError) as caught:
        load_settings(environ=source)
    assert needle in str(caught.value)


def test_the_workflow_stale_claim_delay_is_a_setting() -> None:
    assert load_settings(environ={}).workflow_stale_claim_ms == 30_000
    assert load_settings(environ={"JOBRING_WORKFLOW_STALE_CLAIM_MS": "7000"}).workflow_stale_claim_ms == 7_000


def test_file_errors_name_the_file_and_the_key(tmp_path: Path) -> None:
    path = _toml(tmp_path, "[admin]\ncolour = 1\n")
    with pytest.raises(ConfigError, match="unknown setting 'colour'"):
        load_settings(path, environ={})
    path = _toml(tmp_path, "[admin.loop]\nlease_ms = 'long'\n")
    with pytest.raises(ConfigError) as caught:
        load_settings(path, environ={})
    assert f"loop.lease_ms: expected an integer, got 'long' (from {path})" in str(caught.value)
    path = _toml(tmp_path, "[admin.loop]\nleases = 5\n")
    with pytest.raises(ConfigError, match="unknown setting 'leases'"):
        load_settings(path, environ={})


def test_loop_table_from_file_and_env_builds_loop_config_by_field_name(tmp_path: Path) -> None:
    path = _toml(tmp_path, "[admin]\npre_read_ms = 4000\n[admin.loop]\ncycle_ms = 500\nlease_ms = 8000\n")
    env = {"JOBRING_LOOP__LEASE_MS": "9000", "jobring_loop__claim_limit": "50"}
    settings = load_settings(path, environ=env)
    assert settings.loop.given() == {"cycle_ms": 500, "lease_ms": 9000, "claim_limit": 50}
    config = loop_config_of(settings, "postgresql")
    assert (config.pre_read_ms, config.cycle_ms, config.lease_ms, config.claim_limit) == (4000, 500, 9000, 50)
    assert config.max_inflight_batches == 16 and config.fence_ahead_ms == LoopConfig().fence_ahead_ms
    assert loop_config_of(AdminSettings(), "sqlite") == LoopConfig(pre_read_ms=5000, max_inflight_batches=4)
    # An explicit max_inflight_batches wins over the backend's default.
    tuned = load_settings(environ={"JOBRING_LOOP__MAX_INFLIGHT_BATCHES": "2"})
    assert loop_config_of(tuned, "sqlite").max_inflight_batches == 2


def test_every_loop_setting_is_a_loop_config_field() -> None:
    config_fields = {f.name for f in fields(LoopConfig)}
    assert set(LoopSettings.model_fields) <= config_fields
    assert config_fields - set(LoopSettings.model_fields) == {"pre_read_ms"}  # a top-level setting


@pytest.mark.parametrize(("env", "needle"), [
    ({"JOBRING_LOOP__LEASE_MS": "1500"}, "loop.lease_ms (1500) must exceed"),
    ({"JOBRING_LOOP__LEASE_GUARD_MS": "9500"}, "must exceed loop.cycle_ms + loop.lease_guard_ms"),
    ({"JOBRING_LOOP__PREPARE_AHEAD_MS": "1000"}, "loop.prepare_ahead_ms (1000) must exceed loop.cycle_ms"),
    ({"JOBRING_LOOP__CYCLE_MS": "5000", "JOBRING_LOOP__LEASE_MS": "20000",
      "JOBRING_LOOP__PREPARE_AHEAD_MS": "6000"}, "pre_read_ms (5000) must exceed loop.cycle_ms (5000)"),
    ({"JOBRING_LOOP__FENCE_EVERY_MS": "1000"}, "loop.fence_every_ms (1000) must be below"),
    # no loop key set: the rules still hold against LoopConfig's defaults
    ({"JOBRING_PRE_READ_MS": "500"}, "pre_read_ms (500) must exceed loop.cycle_ms (1000)"),
])
def test_loop_rules_are_checked_with_the_defaults_of_the_others(env: dict[str, str], needle: str) -> None:
    with pytest.raises(ConfigError) as caught:
        load_settings(environ=env)
    assert needle in str(caught.value)


def test_cli_reports_a_bad_loop_setting_with_exit_2(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("JOBRING_CONFIG", str(_toml(tmp_path, "[admin.loop]\nfence_ahead_ms = 0\n")))
    assert main(["admin", "--database-url", f"sqlite:///{tmp_path / 'x.db'}"]) == 2
    err = capsys.readouterr().err
    assert "invalid settings" in err and "loop.fence_ahead_ms: must be positive" in err
    assert str(tmp_path / "jobring.toml") in err


def test_executor_file_table_under_env_and_arguments(tmp_path: Path) -> None:
    path = tmp_path / "shared.toml"
    path.write_text(
        '[admin]\nport = 8080\n[executor]\napp_name = "from-file"\nport = 9101\n'
        'admin_addresses = ["http://a:8080/xxl-job-admin/"]\n',
        encoding="utf-8",
    )
    env = {"JOBRING_EXECUTOR_CONFIG": str(path), "JOBRING_EXECUTOR_PORT": "9102"}
    s = load_executor_settings(env)
    assert (s.app_name, s.port, s.admin_addresses) == ("from-file", 9102, ("http://a:8080/xxl-job-admin/",))
    assert load_executor_settings(env, port=9103).port == 9103
    path.write_text("[executor]\ncolor = 1\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="unknown setting 'color'"):
        load_executor_settings(env)
