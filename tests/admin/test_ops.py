"""/ready and /metrics of the admin app in-process (the process-level tests are in tests/e2e)."""

from __future__ import annotations

import contextlib
import re
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
from starlette.applications import Starlette

from jobring.admin.runtime.admin_runtime import AdminRuntime
from jobring.admin.runtime.app import create_app
from jobring.admin.runtime.metrics import ADMIN_METRICS
from jobring.admin.services.settings import AdminSettings, load_settings
from jobring.configbase import ConfigError

TOKEN = "ops-test-token-0123456"
OPERATIONS = Path(__file__).resolve().parents[2] / "docs" / "operations.md"


def _settings(tmp_path: Path, **more: object) -> AdminSettings:
    return AdminSettings(database_url=f"sqlite+aiosqlite:///{tmp_path / 'admin.db'}", access_token=TOKEN,
                         admin_password="ops-test-password", node_id="node-ops", **more)  # type: ignore[arg-type]


def _client(app: Starlette) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://admin")


@pytest.fixture
async def running(tmp_path: Path) -> AsyncIterator[tuple[Starlette, httpx.AsyncClient]]:
    app = create_app(_settings(tmp_path))
    async with app.router.lifespan_context(app):
        runtime: AdminRuntime = app.state.runtime
        async with runtime.loop.cycle_done:
            await runtime.loop.cycle_done.wait()  # leases renewed once
        async with _client(app) as client:
            yield app, client


async def test_ready_reports_every_check(running: tuple[Starlette, httpx.AsyncClient]) -> None:
    app, client = running
    response = await client.get("/ready")
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["ready"] is True and body["node"] == "node-ops"
    assert set(body["checks"]) == {"database", "schema", "scheduler", "lease"}
    assert all(check["ok"] for check in body["checks"].values())
    assert body["checks"]["schema"]["revision"] == body["checks"]["schema"]["expected"]
    # The scheduling loop stopped: not ready, and the answer says why.
    runtime: AdminRuntime = app.state.runtime
    await runtime.loop.stop()
    stopped = await client.get("/ready")
    assert stopped.status_code == 503
    assert stopped.json()["checks"]["scheduler"] == {
        "ok": False, "held_jobs": 0, "error": "the scheduling loop is not running"}


def _samples(text: str) -> dict[str, float]:
    out: dict[str, float] = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            key, value = line.rsplit(" ", 1)
            out[key] = float(value)
    return out


async def test_metrics_are_exposed_and_documented(running: tuple[Starlette, httpx.AsyncClient]) -> None:
    _, client = running
    response = await client.get("/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    exposed = set(re.findall(r"^# TYPE (\S+) (\S+)$", response.text, re.M))
    assert exposed == {(name, kind) for name, (kind, _) in ADMIN_METRICS.items()}
    samples = _samples(response.text)
    assert samples['jobring_admin_held_jobs{node="node-ops"}'] == 0
    assert samples["jobring_admin_scheduler_running"] == 1
    assert samples["jobring_admin_schedule_cycles_total"] >= 1
    assert samples['jobring_admin_db_statement_ms_count{operation="update"}'] >= 1


def test_the_docs_list_exactly_the_admin_metrics() -> None:
    text = OPERATIONS.read_text(encoding="utf-8")
    section = text[text.index("### Admin metrics"):text.index("### Executor metrics")]
    documented = set(re.findall(r"^\| `(jobring_admin_\w+)` \|", section, re.M))
    assert documented == set(ADMIN_METRICS)


async def test_metrics_token(tmp_path: Path) -> None:
    app = create_app(_settings(tmp_path, metrics_token="scrape-secret-0123456789"))
    async with app.router.lifespan_context(app), _client(app) as client:
        assert (await client.get("/metrics")).status_code == 401
        wrong = {"Authorization": "Bearer nope"}
        assert (await client.get("/metrics", headers=wrong)).status_code == 401
        right = {"Authorization": "Bearer scrape-secret-0123456789"}
        assert (await client.get("/metrics", headers=right)).status_code == 200
        assert (await client.get("/health")).status_code == 200  # probes need no token


def test_log_and_ready_settings_are_checked() -> None:
    with pytest.raises(ConfigError, match="log_format"):
        load_settings(environ={"JOBRING_LOG_FORMAT": "xml"})
    with pytest.raises(ConfigError, match="log_level"):
        load_settings(environ={"JOBRING_LOG_LEVEL": "chatty"})
    with pytest.raises(ConfigError, match="ready_timeout"):
        load_settings(environ={"JOBRING_READY_TIMEOUT": "0"})
    from jobring.admin.security.secrets_policy import weak_secrets

    weak = load_settings(environ={"JOBRING_METRICS_TOKEN": "secret"})
    assert [p.split(" ")[0] for p in weak_secrets(weak)] == ["metrics_token"]
    assert load_settings(environ={"JOBRING_LOG_FORMAT": "json"}).log_format == "json"


def test_log_lines_plain_and_json() -> None:
    import io
    import json
    import logging

    from jobring.logsetup import set_log_node, setup_logging

    root = logging.getLogger()
    saved = (list(root.handlers), root.level)
    try:
        for fmt in ("json", "plain"):
            out = io.StringIO()
            setup_logging(fmt, "INFO", stream=out)
            logging.getLogger("jobring.test").warning(
                "trigger of job %s failed", 12, extra={"job_id": 12, "run_id": 3051, "address": "http://e/"})
            line = out.getvalue().strip()
            if fmt == "json":
                record = json.loads(line)
                assert record["msg"] == "trigger of job 12 failed" and record["level"] == "WARNING"
                assert (record["job_id"], record["run_id"], record["address"]) == (12, 3051, "http://e/")
                assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", record["ts"])
                assert "node" not in record
                set_log_node("node-9")
                logging.getLogger("jobring.test").info("cycle")
                assert json.loads(out.getvalue().splitlines()[-1])["node"] == "node-9"
                set_log_node(None)
            else:
                assert re.match(r"\d{4}-\d\d-\d\dT[\d:.]+Z WARNING jobring.test: trigger of job 12 failed "
                                r"job_id=12 run_id=3051 address=http://e/$", line)
    finally:
        root.handlers[:] = saved[0]
        root.setLevel(saved[1])


async def test_alarm_channels_and_monitor_rounds_are_counted(
    running: tuple[Starlette, httpx.AsyncClient],
) -> None:
    from jobring.admin.alarms.base import AlarmOutcome

    app, client = running
    runtime: AdminRuntime = app.state.runtime
    metrics = runtime.metrics
    assert metrics is not None

    class Channel:
        name = "webhook"

        def __init__(self) -> None:
            self.answers = [AlarmOutcome.SENT, AlarmOutcome.FAILED]

        async def send(self, ctx: object) -> AlarmOutcome:
            if not self.answers:
                raise OSError("smtp down")
            return self.answers.pop(0)

    runtime.alarmer.channels = [Channel()]
    metrics.instrument_alarms(runtime.alarmer)
    channel = runtime.alarmer.channels[0]
    for _ in range(3):
        with contextlib.suppress(OSError):
            await channel.send(None)  # type: ignore[arg-type]
    monitor = runtime.monitors.monitors[0]

    async def broken() -> None:
        raise RuntimeError("db gone")

    failing = metrics._counting_tick(monitor.name, broken)
    with pytest.raises(RuntimeError):
        await failing()
    text = (await client.get("/metrics")).text
    values = _samples(text)
    assert values['jobring_admin_alarms_total{channel="webhook",outcome="sent"}'] == 1
    assert values['jobring_admin_alarms_total{channel="webhook",outcome="failed"}'] == 2
    assert values[f'jobring_admin_monitor_passes_total{{monitor="{monitor.name}",outcome="error"}}'] == 1


def test_dispatch_error_reasons() -> None:
    from jobring.admin.trigger.trigger import dispatch_error_reason

    url = "http://10.0.0.7:9999/run"
    assert dispatch_error_reason(None, None) == "no_address"
    assert dispatch_error_reason("a", f"executor {url} unreachable (ConnectError): refused") == "unreachable"
    assert dispatch_error_reason("a", f"executor {url} timed out (ReadTimeout): 3 s") == "timeout"
    assert dispatch_error_reason("a", f"executor {url} answered HTTP 502: bad gateway") == "http_error"
    odd = f"executor {url} answered something that is not a ReturnT: x"
    assert dispatch_error_reason("a", odd) == "bad_answer"
    assert dispatch_error_reason("a", "block strategy effect：Discard Later") == "refused"
