"""Executor construction: settings from arguments and env, security refusal, registration."""

from __future__ import annotations

import pytest

from jobring import Executor, JobHandler
from jobring.configbase import ConfigError
from jobring.executor.config import check_security, load_executor_settings


def test_every_setting_comes_from_env_and_explicit_arguments_win() -> None:
    env = {
        "JOBRING_EXECUTOR_APP_NAME": "env-app",
        "JOBRING_EXECUTOR_ADMIN_ADDRESSES": "http://a:8080/xxl-job-admin/, http://b:8080/xxl-job-admin",
        "JOBRING_EXECUTOR_ACCESS_TOKEN": "env-token",
        "JOBRING_EXECUTOR_PORT": "9100",
        "JOBRING_EXECUTOR_GLUE_ENABLED": "true",
        "JOBRING_EXECUTOR_LOG_RETENTION_DAYS": "7",
        "JOBRING_EXECUTOR_BEAT_INTERVAL_S": "12.5",
    }
    ex = Executor(environ=env)
    s = ex.settings
    assert (s.app_name, s.access_token, s.port, s.glue_enabled, s.log_retention_days) == (
        "env-app", "env-token", 9100, True, 7)
    assert s.admin_addresses == ("http://a:8080/xxl-job-admin/", "http://b:8080/xxl-job-admin")
    assert s.admin_urls() == ["http://a:8080/xxl-job-admin/", "http://b:8080/xxl-job-admin/"]
    assert s.beat_interval_s == 12.5
    explicit = Executor(app_name="mine", port=9200, admin_addresses=["http://c/"], environ=env).settings
    assert (explicit.app_name, explicit.port, explicit.admin_addresses) == ("mine", 9200, ("http://c/",))
    assert explicit.access_token == "env-token"


@pytest.mark.parametrize(
    ("env", "needle"),
    [
        ({}, "app_name is required"),
        ({"JOBRING_EXECUTOR_APP_NAME": "a", "JOBRING_EXECUTOR_PORT": "nine"}, "JOBRING_EXECUTOR_PORT"),
        ({"JOBRING_EXECUTOR_APP_NAME": "a", "JOBRING_EXECUTOR_PORT": "70000"}, "port"),
        ({"JOBRING_EXECUTOR_APP_NAME": "a", "JOBRING_EXECUTOR_ADMIN_ADDRESSES": "admin:8080"}, "http(s) URL"),
        ({"JOBRING_EXECUTOR_APP_NAME": "a", "JOBRING_EXECUTOR_ALLOW_OPEN": "maybe"}, "true/false"),
        ({"JOBRING_EXECUTOR_APP_NAME": "a", "JOBRING_EXECUTOR_BEAT_INTERVAL_S": "0"}, "beat_interval_s"),
        ({"JOBRING_EXECUTOR_APP_NAME": "a", "JOBRING_EXECUTOR_MAX_CONNECTIONS": "100"},
         "max_unauthenticated_connections (256) must be below max_connections (100)"),
        ({"JOBRING_EXECUTOR_APP_NAME": "a", "JOBRING_EXECUTOR_UNAUTHENTICATED_IDLE_TIMEOUT_S": "0"},
         "unauthenticated_idle_timeout_s"),
    ],
)
def test_bad_settings_are_refused_with_a_clear_message(env: dict[str, str], needle: str) -> None:
    with pytest.raises(ConfigError, match=needle.replace("(", r"\(").replace(")", r"\)")):
        load_executor_settings(env)


def test_unknown_argument_is_a_type_error() -> None:
    with pytest.raises(TypeError, match="colour"):
        Executor(app_name="a", colour="red", environ={})


def test_refuses_to_start_without_token_unless_open_and_loopback() -> None:
    with pytest.raises(ConfigError, match="access token is missing"):
        check_security(load_executor_settings({}, app_name="a"))
    with pytest.raises(ConfigError, match="loopback"):
        check_security(load_executor_settings({}, app_name="a", allow_open=True))  # host 0.0.0.0
    with pytest.raises(ConfigError, match="loopback"):
        check_security(load_executor_settings({}, app_name="a", allow_open=True, host="127.0.0.1",
                                              address="http://10.0.0.5:9999/"))
    for host in ("127.0.0.1", "::1", "localhost"):
        check_security(load_executor_settings({}, app_name="a", allow_open=True, host=host))
    check_security(load_executor_settings({}, app_name="a", access_token="t", host="0.0.0.0"))


async def test_startup_without_token_raises_before_anything_starts(tmp_path: object) -> None:
    ex = Executor(app_name="a", environ={}, log_path=str(tmp_path))
    with pytest.raises(ConfigError, match="access token is missing"):
        await ex.startup()
    assert not ex.running
    with pytest.raises(ConfigError, match="access token is missing"):
        await ex.serve()


def test_job_decorator_only_registers() -> None:
    ex = Executor(app_name="a", environ={})

    def init() -> None: ...

    def plain(ctx: object) -> str:
        return "x"

    registered = ex.job("plain", init=init)(plain)
    assert registered is plain
    assert isinstance(ex.handlers["plain"], JobHandler)
    assert ex.handlers["plain"].init is init and ex.handlers["plain"].isolation == "thread"

    @ex.job("coro")
    async def coro() -> None: ...

    assert ex.handlers["coro"].is_async
    with pytest.raises(ValueError, match="already registered"):
        ex.job("plain")(plain)
    with pytest.raises(ValueError, match="isolation"):
        ex.job("bad", isolation="fork")(plain)  # type: ignore[arg-type]


def test_configure_overrides_before_start() -> None:
    ex = Executor(app_name="a", port=1, environ={"JOBRING_EXECUTOR_ACCESS_TOKEN": "t"})
    ex.configure(port=2, host=None, glue_enabled=True)
    assert (ex.settings.port, ex.settings.host, ex.settings.glue_enabled) == (2, "0.0.0.0", True)
    assert ex.asgi_app() is ex.asgi_app()


def test_public_api_is_exported_lazily() -> None:
    import jobring

    assert {"Executor", "JobContext", "JobCancelled", "current_context"} <= set(jobring.__all__)
    assert jobring.JobCancelled.__name__ == "JobCancelled"
    with pytest.raises(AttributeError):
        jobring.NoSuchThing  # noqa: B018
