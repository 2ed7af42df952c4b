"""Security issue #9, items 1 and 2, attacked end to end: a real admin process, real jobring
executor processes (one per group, each with its group's token) and a loopback listener
standing in for the attacker's host, which records every byte it receives.

The attacker ("mallory") is an operator of group A with GLUE permission who also runs
group A's executor (so she holds group A's executor token). Group B belongs to another
team: its job carries a secret in its parameters. Each test passes only because every
step of the attack is refused: the listener receives nothing, B's executor runs only what
the admin sends it legitimately, no GLUE script runs, and no child job crosses groups.
"""

from __future__ import annotations

import asyncio
import os
import re
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from jobring.client import AdminApiError, AsyncAdminClient
from tests.e2e.admin_nodes import ADMIN_PASSWORD, AdminNode, kill, start_admin, stop

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(240)]

SECRET = "db-password=s3cret"
EXECUTOR_MODULE = '''
import os
from pathlib import Path

from jobring import Executor, JobContext

executor = Executor(app_name="placeholder")


@executor.job("record")
def record(ctx: JobContext) -> None:
    with Path(os.environ["TEAM_RECORD_FILE"]).open("a", encoding="utf-8") as out:
        out.write(f"{ctx.job_id} {ctx.params}\\n")
'''


@dataclass
class Listener:
    """The attacker's host: answers anything with ReturnT success and keeps what it got."""

    received: list[bytes] = field(default_factory=list)
    port: int = 0
    server: asyncio.Server | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/"

    async def start(self) -> None:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = int(self.server.sockets[0].getsockname()[1])

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            data = await asyncio.wait_for(reader.read(65536), 5)
            self.received.append(data)
            body = b'{"code":200,"msg":null}'
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: "
                         + str(len(body)).encode() + b"\r\nConnection: close\r\n\r\n" + body)
            await writer.drain()
        finally:
            writer.close()

    async def stop(self) -> None:
        if self.server is not None:
            self.server.close()
            await self.server.wait_closed()


@dataclass
class World:
    admin_node: AdminNode
    admin: AsyncAdminClient  # the admin user
    mallory: AsyncAdminClient  # operator of group A, with GLUE permission
    mallory_token: str
    group_a: int
    group_b: int
    token_a: str  # group A's executor token: mallory runs A's executor
    records: dict[str, Path]
    listener: Listener
    tmp: Path

    @property
    def base(self) -> str:
        return self.admin_node.base_url

    async def raw(self, path: str, body: Any, headers: dict[str, str]) -> httpx.Response:
        async with httpx.AsyncClient(base_url=self.base, timeout=10) as http:
            return await http.post(path, json=body, headers=headers)


async def _until(check: Callable[[], Awaitable[Any]], limit_s: float, what: str) -> Any:
    async with asyncio.timeout(limit_s):
        while True:
            result = await check()
            if result:
                return result
            await asyncio.sleep(0.2)
    raise AssertionError(what)  # pragma: no cover


async def _start_executor(world_tmp: Path, base: str, app: str, token: str, record: Path,
                          *extra: str) -> asyncio.subprocess.Process:
    env = {k: v for k, v in os.environ.items() if not k.startswith("JOBRING_")}
    # The token goes in the environment, not on the command line.
    env.update(TEAM_RECORD_FILE=str(record), JOBRING_EXECUTOR_ACCESS_TOKEN=token,
               PYTHONPATH=f"{world_tmp}{os.pathsep}{env.get('PYTHONPATH', '')}")
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", "import sys; from jobring.cli import main; sys.exit(main())",
        "executor", "team_jobs:executor", "--app-name", app, "--host", "127.0.0.1", "--port", "0",
        "--ip", "127.0.0.1", "--admin", base + "/xxl-job-admin/", "--log-path", str(world_tmp / app),
        "--beat-interval", "30", *extra,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL, env=env, cwd=str(world_tmp),
    )
    assert proc.stdout is not None
    line = (await asyncio.wait_for(proc.stdout.readline(), 60)).decode()
    assert re.search(r"listening on 127\.0\.0\.1:\d+", line), line
    return proc


@pytest.fixture
async def world(tmp_path: Path) -> AsyncIterator[World]:
    (tmp_path / "team_jobs.py").write_text(EXECUTOR_MODULE, encoding="utf-8")
    # The default set-up: no global executor token; GLUE on (so a GLUE attack would run).
    node = await start_admin(f"sqlite+aiosqlite:///{tmp_path / 'admin.db'}", "attack", tmp_path,
                             env={"JOBRING_ACCESS_TOKEN": "", "JOBRING_GLUE_ENABLED": "true"})
    listener = Listener()
    await listener.start()
    procs: list[asyncio.subprocess.Process] = []
    admin = AsyncAdminClient(node.base_url, timeout=15)
    mallory: AsyncAdminClient | None = None
    try:
        await admin.login("admin", ADMIN_PASSWORD)
        group_a = (await admin.groups.create("team-a", "Team A"))["id"]
        group_b = (await admin.groups.create("team-b", "Team B"))["id"]
        user = await admin.users.create("mallory", "mallory-password-1", role="operator", group_ids=[group_a],
                                        glue_permission=True, must_change_password=False)
        assert user["glue_permission"] is True
        token_a = await admin.groups.access_token(group_a)
        token_b = await admin.groups.access_token(group_b)
        records = {"a": tmp_path / "runs-a.txt", "b": tmp_path / "runs-b.txt"}
        procs.append(await _start_executor(tmp_path, node.base_url, "team-a", token_a, records["a"]))
        procs.append(await _start_executor(tmp_path, node.base_url, "team-b", token_b, records["b"],
                                           "--glue"))

        async def online() -> bool:
            groups = [await admin.groups.get(g) for g in (group_a, group_b)]
            return all(g["addresses"] for g in groups)

        await _until(online, 60, "the executors never registered")
        mallory = AsyncAdminClient(node.base_url, timeout=15)
        await mallory.login("mallory", "mallory-password-1")
        mallory_token = str((await mallory.tokens.create("laptop"))["token"])
        yield World(node, admin, mallory, mallory_token, group_a, group_b, token_a, records, listener,
                    tmp_path)
    finally:
        for proc in procs:
            if proc.returncode is None:
                proc.terminate()
                try:
                    await asyncio.wait_for(proc.wait(), 15)
                except TimeoutError:
                    proc.kill()
                    await proc.wait()
        if mallory is not None:
            await mallory.aclose()
        await admin.aclose()
        await listener.stop()
        if await stop(node) != 0:
            await kill(node)


async def _succeeded_run(client: AsyncAdminClient, job_id: int) -> dict[str, Any]:
    async def done() -> dict[str, Any] | None:
        items = (await client.runs.list(job=job_id, status="success")).items
        return items[0] if items else None

    run: dict[str, Any] = await _until(done, 60, f"job {job_id} never succeeded")
    return run


async def test_operator_cannot_turn_an_executor_token_into_other_groups_runs(world: World) -> None:
    """Item 1: operator -> executor token -> every group -> code execution."""
    attacker = world.listener.url
    job_b = (await world.admin.jobs.create({
        "job_group": world.group_b, "job_desc": "payroll", "executor_handler": "record",
        "executor_param": SECRET, "executor_route_strategy": "SHARDING_BROADCAST", "schedule_type": "NONE",
    }))["id"]
    job_a = (await world.mallory.jobs.create({
        "job_group": world.group_a, "job_desc": "mine", "executor_handler": "record", "schedule_type": "NONE",
    }))["id"]
    marker = world.tmp / "pwned"
    glue = {"glueType": "GLUE_SHELL", "glueSource": f"#!/bin/sh\ntouch {marker}\n", "glueRemark": "x"}

    # 1. Her group's executor addresses are for admins to set, and never a metadata address.
    for addresses in ([attacker], ["http://169.254.169.254/latest/meta-data/"], ["http://2130706433:5432/"]):
        with pytest.raises(AdminApiError) as refused:
            await world.mallory.groups.update(world.group_a, "team-a", "Team A", addresses=addresses)
        assert refused.value.status in (403, 422)  # not hers to change, or not an address at all
    with pytest.raises(AdminApiError) as refused:
        await world.admin.groups.update(world.group_a, "team-a", "Team A",
                                        addresses=["http://[::ffff:169.254.169.254]/"])
    assert refused.value.status == 422
    # ... nor may a manual trigger name an address outside the group.
    with pytest.raises(AdminApiError) as refused:
        await world.mallory.jobs.trigger(job_a, addresses=[attacker])
    assert refused.value.status == 409 and refused.value.field == "addresses.0"  # not one of the group's

    # 2. Group A's executor token registers nothing into group B (nor does any guessed global one).
    beat = {"registryGroup": "EXECUTOR", "registryKey": "team-b", "registryValue": attacker}
    for token in (world.token_a, "default_token", ""):
        response = await world.raw("/xxl-job-admin/api/registry", beat, {"XXL-JOB-ACCESS-TOKEN": token})
        answer = response.json()
        assert answer["code"] == 500, answer

    # 3. The executor token does not manage jobs, and her own API token obeys her role/groups/GLUE.
    exec_auth = {"XXL-JOB-ACCESS-TOKEN": world.token_a}
    user_auth = {"XXL-JOB-ACCESS-TOKEN": world.mallory_token}
    attempts = [
        ("addJob", {"jobGroup": world.group_b, "jobDesc": "x", "scheduleType": "NONE", **glue}),
        ("updateJob", {"id": job_b, **glue}),
        ("triggerJob", {"id": job_b, "addressList": attacker}),
        ("triggerJob", {"id": job_b}),
    ]
    for name, body in attempts:
        for headers, status in ((exec_auth, 401), ({"Authorization": f"Bearer {world.token_a}"}, 401)):
            response = await world.raw(f"/xxl-job-admin/api/{name}", body, headers)
            assert response.status_code == status and response.json()["code"] == status, (name, response.text)
        # Group B and its job are not hers to see: they answer as missing ones.
        response = await world.raw(f"/xxl-job-admin/api/{name}", body, user_auth)
        answer = response.json()
        assert response.status_code == 200 and answer["code"] == 500, (name, response.text)
        assert answer["msg"] in (f"job {job_b} not found",
                                 f"job_group: executor group {world.group_b} does not exist"), answer
    with pytest.raises(AdminApiError) as refused:
        await world.mallory.jobs.trigger(job_b)
    assert refused.value.status == 404

    # 4. What should happen still happens: B's job reaches B's executor (and only it), once.
    triggered = await world.admin.jobs.trigger(job_b)
    assert triggered["trigger_code"] == 200, triggered
    run = await _succeeded_run(world.admin, job_b)
    assert run["executor_address"] != attacker
    assert world.records["b"].read_text(encoding="utf-8") == f"{job_b} {SECRET}\n"
    group_b = await world.admin.groups.get(world.group_b)
    assert attacker not in group_b["addresses"] and len(group_b["addresses"]) == 1
    assert (await world.admin.jobs.get(job_b))["glue_type"] == "BEAN"
    # Group A's token cannot report results for B's runs either (refused, not a "repeat").
    forged = [{"logId": run["id"], "logDateTim": 0, "handleCode": 500, "handleMsg": "forged"}]
    answer = (await world.raw("/xxl-job-admin/api/callback", forged, exec_auth)).json()
    assert answer["code"] == 500 and f"refused for runs [{run['id']}]" in answer["msg"], answer
    assert (await world.admin.jobs.list(group=world.group_b)).total == 1

    # The attacker's host never got a byte (no params, no token), and no script ran.
    assert world.listener.received == []
    assert not marker.exists()


async def test_operator_cannot_fire_another_groups_job_as_a_child(world: World) -> None:
    """Item 2: cross-group trigger through child jobs."""
    job_b = (await world.admin.jobs.create({
        "job_group": world.group_b, "job_desc": "wipe", "executor_handler": "record",
        "executor_param": "wipe", "schedule_type": "NONE",
    }))["id"]
    base = {"job_group": world.group_a, "job_desc": "parent", "executor_handler": "record",
            "schedule_type": "NONE"}

    # An id in a group she cannot operate is answered exactly as an id that does not exist.
    answers = []
    for child in (job_b, 999_999):
        with pytest.raises(AdminApiError) as refused:
            await world.mallory.jobs.create({**base, "child_job_ids": [child]})
        error = refused.value
        answers.append((error.status, error.field, error.message.replace(str(child), "N")))
    assert answers[0] == answers[1] and answers[0][0] == 404
    parent = (await world.mallory.jobs.create(base))["id"]
    with pytest.raises(AdminApiError) as refused:
        await world.mallory.jobs.update(parent, {"child_job_ids": [job_b]})
    assert refused.value.status == 404
    # The XXL-JOB 3.x aliases apply the same rule.
    via_3x = await world.raw("/xxl-job-admin/api/updateJob", {"id": parent, "childJobId": str(job_b)},
                             {"XXL-JOB-ACCESS-TOKEN": world.mallory_token})
    assert via_3x.json()["code"] == 500 and "does not exist" in via_3x.json()["msg"]
    assert (await world.mallory.jobs.get(parent))["child_job_ids"] == []

    # Her job runs on her executor; nothing is chained to group B.
    assert (await world.mallory.jobs.trigger(parent))["trigger_code"] == 200
    run = await _succeeded_run(world.mallory, parent)
    full = await world.mallory.runs.get(run["id"])
    assert "Trigger child job" not in (full.get("handle_msg") or "")
    assert world.records["a"].read_text(encoding="utf-8") == f"{parent} \n"
    assert not world.records["b"].exists()
    assert (await world.admin.runs.list(job=job_b)).total == 0
    assert world.listener.received == []
