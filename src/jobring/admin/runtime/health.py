"""``/health`` (the process answers) and ``/ready`` (this node can do its work) of the admin.

``/ready`` checks, each with a clear verdict in the JSON answer (200 when all pass, 503
otherwise), for Kubernetes readiness probes and load balancers:

- ``database``: ``SELECT 1`` answers within ``ready_timeout`` seconds;
- ``schema``: the database's schema revision is the one this version ships (``jobring db
  upgrade`` when not);
- ``scheduler``: the scheduling loop's tasks are running;
- ``lease``: this node renewed its leases less than ``LEASE_STALE_MS`` ago (a node that
  cannot renew loses its jobs to the others after 10 s).
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any

from sqlalchemy import text
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from jobring.admin.store.errors import public_reason
from jobring.admin.store.migrate import current_revision, head_revision
from jobring.version import jobring_version

if TYPE_CHECKING:
    from jobring.admin.runtime.admin_runtime import AdminRuntime

log = logging.getLogger(__name__)

# Renewals come every cycle (1 s); past half the lease, the node is about to lose its jobs.
LEASE_STALE_MS = 5_000


async def health(request: Request) -> Response:
    """Alive: cheap, no database."""
    runtime: AdminRuntime | None = getattr(request.app.state, "runtime", None)
    body: dict[str, Any] = {
        "status": "ok" if runtime is not None else "starting", "version": jobring_version()}
    if runtime is not None:
        body["node"] = runtime.node_id
        body["backend"] = runtime.store.backend
    return JSONResponse(body, status_code=200 if runtime is not None else 503)


async def _database(runtime: AdminRuntime, timeout_s: float) -> tuple[dict[str, Any], dict[str, Any]]:
    try:
        async with asyncio.timeout(timeout_s):
            async with runtime.store.engine.connect() as conn:
                await conn.execute(text("SELECT 1"))
            revision = await current_revision(runtime.store.engine)
    except TimeoutError:
        failed = {"ok": False, "error": f"no answer within {timeout_s:g} s"}
        return failed, {"ok": False, "error": "database unavailable"}
    except Exception as exc:  # every driver's errors: reported, not raised
        log.warning("ready: database check failed: %s", exc)
        failed = {"ok": False, "error": public_reason(exc)}  # never the SQL; the log has the rest
        return failed, {"ok": False, "error": "database unavailable"}
    head = head_revision()
    schema: dict[str, Any] = {"ok": revision == head, "revision": revision, "expected": head}
    if revision != head:
        schema["error"] = "schema not current: run `jobring db upgrade`"
    return {"ok": True}, schema


async def readiness(runtime: AdminRuntime, timeout_s: float) -> dict[str, Any]:
    """The checks and the verdict: ``{"ready": bool, "checks": {name: {"ok": bool, ...}}}``."""
    database, schema = await _database(runtime, timeout_s)
    scheduler: dict[str, Any] = {"ok": runtime.loop.running, "held_jobs": runtime.loop.stats.held}
    if not runtime.loop.running:
        scheduler["error"] = "the scheduling loop is not running"
    renewed = runtime.loop.renewed_at_ms
    now = runtime.clock.now_ms()
    lease: dict[str, Any] = {"ok": renewed is not None and now - renewed <= LEASE_STALE_MS}
    if renewed is None:
        lease["error"] = "leases not renewed yet"
    else:
        lease["age_ms"] = now - renewed
        if not lease["ok"]:
            lease["error"] = f"last lease renewal {now - renewed} ms ago (over {LEASE_STALE_MS} ms)"
    checks = {"database": database, "schema": schema, "scheduler": scheduler, "lease": lease}
    return {"ready": all(c["ok"] for c in checks.values()), "node": runtime.node_id, "checks": checks}


async def ready(request: Request) -> Response:
    runtime: AdminRuntime | None = getattr(request.app.state, "runtime", None)
    if runtime is None:
        return JSONResponse({"ready": False, "checks": {"startup": {"ok": False, "error": "starting"}}},
                            status_code=503)
    body = await readiness(runtime, runtime.settings.ready_timeout)
    return JSONResponse(body, status_code=200 if body["ready"] else 503)
