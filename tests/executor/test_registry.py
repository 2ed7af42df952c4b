"""Registry heartbeat: order of admin addresses, re-registration, registryRemove, address."""

from __future__ import annotations

import asyncio
import ipaddress
from collections.abc import AsyncIterator

import httpx
import pytest

from jobring.executor.config import ExecutorSettings
from jobring.executor.registry import Registrar, detect_ipv4
from jobring.protocol.models import MAX_DECLARED_HANDLERS

from .fake_admin import FakeAdmin


@pytest.fixture
async def admin() -> AsyncIterator[FakeAdmin]:
    fake = FakeAdmin()
    await fake.start()
    try:
        yield fake
    finally:
        await fake.stop()


def registry_bodies(admin: FakeAdmin, api: str = "api/registry") -> list[dict[str, str]]:
    return [r.json() for r in admin.requests if r.path.endswith("/" + api)]


async def test_beats_periodically_with_token_and_leaves_on_stop(admin: FakeAdmin) -> None:
    async with httpx.AsyncClient() as client:
        registrar = Registrar(client, [admin.base_url], "tok", "demo-app", "http://10.1.2.3:9999/",
                              interval_s=0.05)
        registrar.start()
        await admin.wait_for(lambda a: len(registry_bodies(a)) >= 3)
        await registrar.stop()
    assert registry_bodies(admin)[0] == {"registryGroup": "EXECUTOR", "registryKey": "demo-app",
                                         "registryValue": "http://10.1.2.3:9999/"}
    assert registry_bodies(admin, "api/registryRemove") == [registry_bodies(admin)[0]]
    assert admin.requests[-1].path == "/xxl-job-admin/api/registryRemove"
    assert all(r.headers["xxl-job-access-token"] == "tok" for r in admin.requests)
    assert "x-jobring-started-at" not in admin.requests[0].headers


async def test_beats_carry_the_start_instant_in_a_header_only(admin: FakeAdmin) -> None:
    async with httpx.AsyncClient() as client:
        registrar = Registrar(client, [admin.base_url], "tok", "demo-app", "http://10.1.2.3:9999/",
                              interval_s=0.05, started_at_ms=1_795_000_000_123)
        registrar.start()
        await admin.wait_for(lambda a: len(registry_bodies(a)) >= 1)
        await registrar.stop()
    beat = next(r for r in admin.requests if r.path.endswith("api/registry"))
    assert beat.headers["x-jobring-started-at"] == "1795000000123"
    assert registry_bodies(admin)[0] == {"registryGroup": "EXECUTOR", "registryKey": "demo-app",
                                         "registryValue": "http://10.1.2.3:9999/"}


async def test_first_admin_that_answers_takes_the_beat(admin: FakeAdmin) -> None:
    refusing = FakeAdmin(answer=b'{"code":500,"msg":"The access token is wrong."}')
    await refusing.start()
    try:
        async with httpx.AsyncClient() as client:
            registrar = Registrar(client, [refusing.base_url, admin.base_url], None, "a", "http://h:1/",
                                  interval_s=30)
            registrar.start()
            await asyncio.wait_for(registrar.registered.wait(), 5)
            await registrar.stop()
        # The refusing admin was asked first each time; the good one took it.
        assert len(registry_bodies(refusing)) == 1
        assert "xxl-job-access-token" not in admin.requests[0].headers
    finally:
        await refusing.stop()


async def test_registers_again_as_soon_as_the_admin_is_back(admin: FakeAdmin) -> None:
    admin.http_status = 503
    async with httpx.AsyncClient() as client:
        # A long interval: only the failure retries (1 s) can bring the next beat.
        registrar = Registrar(client, [admin.base_url], None, "a", "http://h:1/", interval_s=3600)
        registrar.start()
        await admin.wait_for(lambda a: len(a.requests) == 1)
        assert not registrar.registered.is_set()
        admin.http_status = 200
        await asyncio.wait_for(registrar.registered.wait(), 5)
        await registrar.stop()
    assert [r.accepted for r in admin.requests[:2]] == [False, True]


def test_detected_address_is_a_non_loopback_ipv4_or_loopback_fallback() -> None:
    ip = ipaddress.IPv4Address(detect_ipv4())
    assert not ip.is_loopback or str(ip) == "127.0.0.1"


def test_registered_address_has_a_trailing_slash() -> None:
    s = ExecutorSettings(app_name="a", port=9999)
    assert s.base_address("10.0.0.5") == "http://10.0.0.5:9999/"
    assert ExecutorSettings(app_name="a", ip="192.168.1.9", port=1).base_address("10.0.0.5") == \
        "http://192.168.1.9:1/"
    assert ExecutorSettings(app_name="a", address="http://nat.example:80/ex").base_address("x") == \
        "http://nat.example:80/ex/"


async def test_beats_declare_the_handlers_of_the_moment_and_leaving_declares_none(admin: FakeAdmin) -> None:
    handlers = {"b": None, "a": None, "x" * 256: None}  # a name no job can carry is not declared
    async with httpx.AsyncClient() as client:
        registrar = Registrar(client, [admin.base_url], "tok", "demo-app", "http://10.1.2.3:9999/",
                              interval_s=0.05, handlers=lambda: list(handlers))
        registrar.start()
        await admin.wait_for(lambda a: len(registry_bodies(a)) >= 1)
        handlers["c"] = None  # added while running: declared from the next beat on
        count = len(registry_bodies(admin))
        await admin.wait_for(lambda a: len(registry_bodies(a)) > count + 1)
        await registrar.stop()
    reference = {"registryGroup": "EXECUTOR", "registryKey": "demo-app", "registryValue": "http://10.1.2.3:9999/"}
    first, last = registry_bodies(admin)[0], registry_bodies(admin)[-1]
    assert list(first) == [*reference, "jobringHandlers"]
    assert first == {**reference, "jobringHandlers": ["a", "b"]}
    assert last == {**reference, "jobringHandlers": ["a", "b", "c"]}
    assert registry_bodies(admin, "api/registryRemove") == [reference]


async def test_more_handlers_than_an_admin_takes_are_not_declared(
    admin: FakeAdmin, caplog: pytest.LogCaptureFixture
) -> None:
    names = [f"h{i}" for i in range(MAX_DECLARED_HANDLERS + 1)]
    async with httpx.AsyncClient() as client:
        registrar = Registrar(client, [admin.base_url], None, "big", "http://h:1/", interval_s=0.05,
                              handlers=lambda: names)
        registrar.start()
        await admin.wait_for(lambda a: len(registry_bodies(a)) >= 2)
        await registrar.stop()
    assert all("jobringHandlers" not in body for body in registry_bodies(admin))
    warnings = [r for r in caplog.records if "declaring none" in r.getMessage()]
    assert len(warnings) == 1 and "group big" in warnings[0].getMessage()


async def test_a_pull_executor_beats_only_while_its_poll_works(admin: FakeAdmin) -> None:
    alive = asyncio.Event()
    async with httpx.AsyncClient() as client:
        registrar = Registrar(client, [admin.base_url], "tok", "demo-app", "pull://worker-1/",
                              interval_s=0.05, alive=alive)
        registrar.start()
        # The first beat goes out at once (a refused token is reported by it)...
        await admin.wait_for(lambda a: len(registry_bodies(a)) >= 1)
        await asyncio.sleep(0.3)  # several intervals pass without a working poll
        assert len(registry_bodies(admin)) == 1
        # ...the others only once the poll works.
        alive.set()
        await admin.wait_for(lambda a: len(registry_bodies(a)) >= 3)
        await registrar.stop()
    assert registry_bodies(admin)[0]["registryValue"] == "pull://worker-1/"
