"""The executor's operations view: status(), /health, /ready, /status and /metrics, mounted
(ASGI) and on the standalone HTTP server."""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from jobring import Executor, JobContext
from jobring.executor.ops import EXECUTOR_METRICS

from .fake_admin import FakeAdmin
from .test_executor_lifecycle import HEADERS, TOKEN, poll, trigger

OPERATIONS = Path(__file__).resolve().parents[2] / "docs" / "operations.md"


def _executor(admin: FakeAdmin, log_path: Path, **kw: object) -> Executor:
    ex = Executor(app_name="ops", admin_addresses=[admin.base_url], access_token=TOKEN, host="127.0.0.1",
                  port=0, log_path=str(log_path), environ={}, beat_interval_s=30,
                  callback_max_backoff_s=0.2, **kw)

    @ex.job("ok")
    def ok(ctx: JobContext) -> None:
        ctx.log("fine")

    @ex.job("boom")
    def boom(ctx: JobContext) -> None:
        raise ValueError("bad input")

    return ex


@pytest.fixture
async def admin() -> AsyncIterator[FakeAdmin]:
    fake = FakeAdmin()
    await fake.start()
    try:
        yield fake
    finally:
        await fake.stop()


def _samples(text: str) -> dict[str, float]:
    return {k: float(v) for k, v in (line.rsplit(" ", 1) for line in text.splitlines()
                                     if line and not line.startswith("#"))}


async def test_status_ready_and_metrics_mounted(admin: FakeAdmin, tmp_path: Path) -> None:
    ex = _executor(admin, tmp_path)
    app = ex.asgi_app()
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://ex") as client:
        before = await client.get("/ready")
        assert before.status_code == 503 and before.json()["ready"] is False
        assert (await client.get("/health")).json() == {"status": "ok", "started": False}
        await ex.startup(binds=False)
        try:
            assert ex._registrar is not None
            await asyncio.wait_for(ex._registrar.registered.wait(), 10)
            status = ex.status()
            assert (status.started, status.registered, status.admin_reachable) == (True, True, True)
            assert status.last_registered_at is not None and status.last_error is None
            ready = await client.get("/ready")
            assert ready.status_code == 200 and ready.json()["ready"] is True
            # /status is the executor's own business: token needed.
            assert (await client.get("/status")).status_code == 401
            shown = (await client.get("/status", headers=HEADERS)).json()
            assert shown["registered"] is True and shown["runs_in_flight"] == 0 and shown["spool_size"] == 0

            for log_id, handler in ((1, "ok"), (2, "boom")):
                answer = await client.post("/run", json=trigger(log_id, log_id, handler), headers=HEADERS)
                assert answer.json() == {"code": 200}
            await admin.wait_for(lambda a: len(a.callbacks()) == 2)
            by_log = {c["logId"]: c for c in admin.callbacks()}
            assert by_log[2]["handleMsg"] == "ValueError: bad input"
            metrics = await client.get("/metrics")
            assert metrics.status_code == 200 and metrics.headers["content-type"].startswith("text/plain")
            samples = _samples(metrics.text)
            assert samples['jobring_executor_runs_total{outcome="success"}'] == 1
            assert samples['jobring_executor_runs_total{outcome="failed"}'] == 1
            assert samples["jobring_executor_handler_duration_ms_count"] == 2
            assert samples["jobring_executor_registered"] == 1
            exposed = set(re.findall(r"^# TYPE (\S+) (\S+)$", metrics.text, re.M))
            assert exposed == {(name, kind) for name, (kind, _) in EXECUTOR_METRICS.items()}
            # Prometheus' own parser reads it (the text is written without its client library).
            families = {f.name: f for f in text_string_to_metric_families(metrics.text)}
            assert families["jobring_executor_handler_duration_ms"].type == "histogram"
            assert families["jobring_executor_runs"].type == "counter"

            # The admin goes away: the next result cannot be delivered, the executor says so.
            await admin.stop()
            await client.post("/run", json=trigger(3, 3, "ok"), headers=HEADERS)
            await poll(lambda: client.get("/ready"), lambda r: r.status_code == 503)
            not_ready = await client.get("/ready")
            down = ex.status()
            assert down.admin_reachable is False and down.last_error and "callback" in down.last_error
            # Without the token, booleans only: the error names the admin's addresses.
            assert not_ready.json() == {"ready": False, "checks": {
                "started": {"ok": True}, "registered": {"ok": True}, "admin_reachable": {"ok": False}}}
            shown_ready = (await client.get("/ready", headers=HEADERS)).json()
            assert "callback" in shown_ready["checks"]["admin_reachable"]["error"]
            assert down.spool_size + down.callback_backlog >= 1
            spooled = _samples((await client.get("/metrics")).text)
            assert spooled["jobring_executor_callback_spool_size"] + spooled[
                "jobring_executor_callback_backlog"] >= 1
        finally:
            await ex.shutdown()


async def test_standalone_server_answers_ops_with_a_metrics_token(admin: FakeAdmin, tmp_path: Path) -> None:
    ex = _executor(admin, tmp_path, metrics_token="scrape-0123456789")
    addresses: list[str] = []
    task = asyncio.create_task(ex.serve(ready=addresses.append))
    try:
        async with asyncio.timeout(10):
            while not addresses:  # noqa: ASYNC110 - serve() reports readiness by callback only
                await asyncio.sleep(0.01)
        base = f"http://127.0.0.1:{ex.bound_port}"
        async with httpx.AsyncClient(base_url=base) as client:
            assert (await client.get("/health")).json() == {"status": "ok", "started": True}
            assert (await client.get("/metrics")).status_code == 401
            with_access_token = {"Authorization": f"Bearer {TOKEN}"}
            assert (await client.get("/metrics", headers=with_access_token)).status_code == 401
            scraped = await client.get("/metrics", headers={"Authorization": "Bearer scrape-0123456789"})
            assert scraped.status_code == 200 and "jobring_executor_running_runs 0.0" in scraped.text
            assert "jobring_executor_waiting_for_thread 0.0" in scraped.text
            assert (await client.get("/status", headers=HEADERS)).json()["started"] is True
            # The XXL-JOB endpoints answer as before on the same connection.
            assert (await client.post("/beat", headers=HEADERS)).json() == {"code": 200}
    finally:
        ex.stop()
        await task


def test_the_docs_list_exactly_the_executor_metrics() -> None:
    text = OPERATIONS.read_text(encoding="utf-8")
    section = text[text.index("### Executor metrics"):]
    section = section[:section.index("\n## ")] if "\n## " in section else section
    documented = set(re.findall(r"^\| `(jobring_executor_\w+)` \|", section, re.M))
    assert documented == set(EXECUTOR_METRICS)


def test_a_short_metrics_token_is_refused() -> None:
    from jobring.configbase import ConfigError

    with pytest.raises(ConfigError, match="metrics_token"):
        Executor(app_name="ops", access_token=TOKEN, environ={"JOBRING_EXECUTOR_METRICS_TOKEN": "abc"})
