"""An XXL-JOB executor double for end-to-end tests, speaking the executor side of the XXL-JOB
HTTP protocol as xxl-job-core does (not the jobring executor): it registers its app name with
the admin (``api/registry``, again every few seconds), answers ``/run`` at once with success,
runs the handler named by ``executorHandler`` (a Python function of the params giving the
result message) and reports the result to the admin (``api/callback`` with ``handleCode`` and
``handleMsg``), as a real XXL-JOB executor reports a handler's ``XxlJobHelper.handleSuccess``.

It records every ``/run`` it receives (with the ``workflowContext`` field the admin adds for a
workflow node's run, which a real XXL-JOB executor would skip) and counts the runs it holds at
once (received, result not yet reported: ``peak``). While ``holding``, runs are kept until
:meth:`release`; afterwards each is reported as soon as its handler returned."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import httpx
import orjson

from tests.e2e.admin_nodes import TOKEN, RecordingExecutor, now_ms
from tests.e2e.workflow_kit import WorkflowEnv, wait_online

REGISTRY_EVERY_S = 5.0

# A handler: the run's params -> its result message (reported with handleCode 200).
Handler = Callable[[str], str]


@dataclass
class XxlRun:
    """One ``/run`` as received."""

    log_id: int
    job_id: int
    handler: str
    params: str
    workflow_context: dict[str, Any] | None


@dataclass
class XxlDouble(RecordingExecutor):
    """Registers as ``app`` with the admin at ``admin_url`` and runs ``handlers``."""

    admin_url: str = ""
    app: str = "xxl-double"
    handlers: dict[str, Handler] = field(default_factory=dict)
    holding: bool = False
    runs: list[XxlRun] = field(default_factory=list)
    running: set[int] = field(default_factory=set)  # received, result not yet reported
    peak: int = 0
    reported: list[int] = field(default_factory=list)
    _released: asyncio.Event = field(default_factory=asyncio.Event)

    def __post_init__(self) -> None:
        self.dialect = "xxl"  # no /received; a repeated run id would run again, as in xxl-job-core
        if not self.holding:
            self._released.set()

    @property
    def held(self) -> int:
        """Runs received and kept while holding."""
        return len(self.running) if not self._released.is_set() else 0

    async def start(self) -> None:
        await super().start()
        self._http = httpx.AsyncClient(
            base_url=self.admin_url.rstrip("/") + "/xxl-job-admin/api",
            timeout=30,
            headers={"XXL-JOB-ACCESS-TOKEN": TOKEN},
        )
        await self._register()
        self._spawn(self._keep_registered())

    def release(self) -> None:
        """Report the held runs, and every later one as soon as it ran."""
        self._released.set()

    def record(self, path: bytes, body: bytes) -> bytes:
        name = path.rstrip(b"/").rsplit(b"/", 1)[-1]
        if name == b"run":
            param = orjson.loads(body)
            run = XxlRun(
                int(param["logId"]),
                int(param["jobId"]),
                str(param.get("executorHandler") or ""),
                str(param.get("executorParams") or ""),
                param.get("workflowContext"),
            )
            self.runs.append(run)
            self.running.add(run.log_id)
            self.peak = max(self.peak, len(self.running))
            self._spawn(self._run(run))
        return super().record(path, body)

    async def _run(self, run: XxlRun) -> None:
        handler = self.handlers.get(run.handler)
        if handler is None:
            code, message = 500, f"job handler [{run.handler}] not found."
        else:
            code, message = 200, handler(run.params)
        await self._released.wait()
        self.running.discard(run.log_id)  # ended here before the admin hears of it
        body = [{"logId": run.log_id, "logDateTim": now_ms(), "handleCode": code, "handleMsg": message}]
        await self._post("callback", body, f"the result of run {run.log_id}")
        self.reported.append(run.log_id)

    async def _register(self) -> None:
        body = {"registryGroup": "EXECUTOR", "registryKey": self.app, "registryValue": self.address}
        await self._post("registry", body, "the registry")

    async def _keep_registered(self) -> None:
        while True:
            await asyncio.sleep(REGISTRY_EVERY_S)
            await self._register()

    async def _post(self, name: str, body: object, what: str) -> None:
        assert self._http is not None
        for attempt in range(20):
            with contextlib.suppress(httpx.HTTPError):
                answer = await self._http.post(
                    name, content=orjson.dumps(body), headers={"Content-Type": "application/json"}
                )
                if answer.status_code == 200 and answer.json().get("code") == 200:
                    return
            await asyncio.sleep(0.1 * (attempt + 1))
        raise AssertionError(f"{what} could not be sent to the admin")


@asynccontextmanager
async def double_group(
    env: WorkflowEnv, app: str, handlers: dict[str, Handler], *, holding: bool = False
) -> AsyncIterator[tuple[WorkflowEnv, XxlDouble]]:
    """A new group ``app`` on ``env``'s admin with an :class:`XxlDouble` registered in it
    (online); the env for that group (its jobs and workflows) and the double."""
    group = int((await env.admin.groups.create(app, app))["id"])
    double = XxlDouble(admin_url=env.admin.url, app=app, handlers=handlers, holding=holding)
    await double.start()
    try:
        await wait_online(env.admin, group)
        yield WorkflowEnv(env.admin, env.home, group), double
    finally:
        await double.stop()
