"""Callback delivery: batching, spooling while the admin is down, delivery after restart."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import orjson
import pytest

from jobring.executor.callback import SPOOL_FILE_NAME, CallbackSender, CallbackSpool
from jobring.protocol.models import HandleCallbackParam

from .fake_admin import FakeAdmin

TOKEN = "tok"


def result(log_id: int, code: int = 200, msg: str | None = None) -> HandleCallbackParam:
    return HandleCallbackParam(log_id, 1795350973184, code, msg)


@pytest.fixture
async def admin() -> AsyncIterator[FakeAdmin]:
    fake = FakeAdmin()
    await fake.start()
    try:
        yield fake
    finally:
        await fake.stop()


@pytest.fixture
async def client() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(timeout=2.0) as c:
        yield c


async def make_sender(client: httpx.AsyncClient, urls: list[str], spool: Path, **kw: float) -> CallbackSender:
    sender = CallbackSender(client, urls, TOKEN, spool, batch_size=int(kw.get("batch_size", 100)),
                            max_backoff_s=kw.get("max_backoff_s", 0.2))
    await sender.start()
    return sender


async def test_results_go_out_batched_with_the_token(admin: FakeAdmin, client: httpx.AsyncClient,
                                                     tmp_path: Path) -> None:
    sender = await make_sender(client, [admin.base_url], tmp_path, batch_size=50)
    try:
        # Queued in one go: sent as batches of at most 50, nothing lost, nothing doubled.
        for n in range(1, 121):
            sender.report(result(n))
        await admin.wait_for(lambda a: len(a.callbacks()) >= 120)
    finally:
        await sender.close()
    requests = [r for r in admin.requests if r.path == "/xxl-job-admin/api/callback"]
    assert all(len(r.json()) <= 50 for r in requests)
    assert len(requests) < 120
    assert sorted(i["logId"] for i in admin.callbacks()) == list(range(1, 121))
    assert all(r.headers["xxl-job-access-token"] == TOKEN for r in requests)
    assert admin.callbacks()[0] == {"logId": 1, "logDateTim": 1795350973184, "handleCode": 200}
    assert not (tmp_path / SPOOL_FILE_NAME).exists()


async def test_failure_message_is_sent_and_null_message_omitted(admin: FakeAdmin, client: httpx.AsyncClient,
                                                                tmp_path: Path) -> None:
    sender = await make_sender(client, [admin.base_url], tmp_path)
    try:
        sender.report(result(1, 500, "failed on purpose"))
        await admin.wait_for(lambda a: len(a.callbacks()) == 1)
    finally:
        await sender.close()
    assert admin.requests[0].body == b'[{"logId":1,"logDateTim":1795350973184,"handleCode":500,' \
                                     b'"handleMsg":"failed on purpose"}]'


async def test_tries_admin_addresses_in_order(admin: FakeAdmin, client: httpx.AsyncClient,
                                              tmp_path: Path) -> None:
    down = FakeAdmin()
    await down.start()
    dead_url = down.base_url
    await down.stop()
    sender = await make_sender(client, [dead_url, admin.base_url], tmp_path)
    try:
        sender.report(result(5))
        await admin.wait_for(lambda a: len(a.callbacks()) == 1)
    finally:
        await sender.close()
    assert sender.spooled_count == 0


async def test_admin_refusing_spools_then_delivers_once(admin: FakeAdmin, client: httpx.AsyncClient,
                                                        tmp_path: Path) -> None:
    admin.answer = b'{"code":500,"msg":"The access token is wrong."}'
    sender = await make_sender(client, [admin.base_url], tmp_path)
    try:
        for n in (1, 2, 3):
            sender.report(result(n))
        await admin.wait_for(lambda a: len(a.requests) >= 1)
        spool = tmp_path / SPOOL_FILE_NAME
        # The spool is written before the admin is asked again.
        await admin.wait_for(lambda a: len(a.requests) >= 2)
        lines = [orjson.loads(line) for line in spool.read_bytes().splitlines()]
        assert sorted(item["logId"] for item in lines) == [1, 2, 3]
        sender.report(result(4))
        admin.answer = b'{"code":200}'
        await admin.wait_for(lambda a: len(a.callbacks()) >= 4)
    finally:
        await sender.close()
    assert sorted(i["logId"] for i in admin.callbacks()) == [1, 2, 3, 4]
    assert not spool.exists()


async def test_spool_survives_a_restart_and_is_delivered_exactly_once(
    admin: FakeAdmin, client: httpx.AsyncClient, tmp_path: Path
) -> None:
    await admin.stop()  # the admin is down: connections are refused
    first = await make_sender(client, [admin.base_url], tmp_path)
    for n in range(1, 6):
        first.report(result(n, 500 if n == 3 else 200, "boom" if n == 3 else None))
    await first.close(flush_timeout_s=2.0)
    assert first.spooled_count == 5
    # A new sender (new process) on the same folder, the admin back up.
    await admin.start()
    second = await make_sender(client, [admin.base_url], tmp_path)
    try:
        assert second.spooled_count == 5
        await admin.wait_for(lambda a: len(a.callbacks()) >= 5)
    finally:
        await second.close()
    items = admin.callbacks()
    assert sorted(i["logId"] for i in items) == [1, 2, 3, 4, 5]
    assert next(i for i in items if i["logId"] == 3) == {
        "logId": 3, "logDateTim": 1795350973184, "handleCode": 500, "handleMsg": "boom"}
    assert not (tmp_path / SPOOL_FILE_NAME).exists()


def test_spool_keeps_the_first_outcome_per_log_id_and_skips_torn_lines(tmp_path: Path) -> None:
    spool = CallbackSpool(tmp_path / SPOOL_FILE_NAME)
    spool.append([result(1, 200), result(2, 500, "x")])
    spool.append([result(1, 500, "later, different")])
    with open(spool.path, "ab") as fh:
        fh.write(b'{"logId":9,"logDa')  # a crash mid-write
    reloaded = CallbackSpool(spool.path)
    reloaded.load()
    assert [(i.log_id, i.handle_code) for i in reloaded.items()] == [(1, 200), (2, 500)]
    reloaded.remove([result(1)])
    again = CallbackSpool(spool.path)
    again.load()
    assert [i.log_id for i in again.items()] == [2]
    again.remove(again.items())
    assert not spool.path.exists()


async def test_one_result_the_admin_refuses_does_not_hold_back_the_others(
    admin: FakeAdmin, client: httpx.AsyncClient, tmp_path: Path
) -> None:
    admin.refuses = lambda body: any(item["logId"] == 13 for item in orjson.loads(body))
    sender = await make_sender(client, [admin.base_url], tmp_path)
    try:
        for n in range(10, 17):
            sender.report(result(n))
        await admin.wait_for(lambda a: len(a.callbacks()) >= 6)
        sender.report(result(17))  # later results still go out
        await admin.wait_for(lambda a: len(a.callbacks()) >= 7)
    finally:
        await sender.close()
    assert sorted(i["logId"] for i in admin.callbacks()) == [10, 11, 12, 14, 15, 16, 17]
    assert (sender.dropped_count, sender.delivered_count) == (1, 7)
    assert not (tmp_path / SPOOL_FILE_NAME).exists()  # the refused item is not retried forever


async def test_a_result_that_cannot_be_encoded_is_dropped_and_the_sender_goes_on(
    admin: FakeAdmin, client: httpx.AsyncClient, tmp_path: Path
) -> None:
    sender = await make_sender(client, [admin.base_url], tmp_path)
    try:
        sender.report(result(1))
        sender.report(result(2**64))  # past 64 bits: JSON cannot carry it
        sender.report(result(3))
        await admin.wait_for(lambda a: len(a.callbacks()) >= 2)
        await sender.close()  # nothing left behind, nothing spooled
    finally:
        await sender.close()
    assert sorted(i["logId"] for i in admin.callbacks()) == [1, 3]
    assert sender.dropped_count == 1
    assert not (tmp_path / SPOOL_FILE_NAME).exists()


async def test_the_sender_survives_an_unexpected_failure(
    admin: FakeAdmin, client: httpx.AsyncClient, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sender = await make_sender(client, [admin.base_url], tmp_path)
    real_post = sender._post
    failures = [RuntimeError("a bug")]

    async def flaky_post(batch: list[HandleCallbackParam]) -> None:
        if failures:
            raise failures.pop()
        await real_post(batch)

    monkeypatch.setattr(sender, "_post", flaky_post)
    try:
        sender.report(result(1))
        await admin.wait_for(lambda a: len(a.callbacks()) >= 1)  # retried after the failure
        sender.report(result(2))
        await admin.wait_for(lambda a: len(a.callbacks()) >= 2)
    finally:
        await sender.close()
    assert sorted(i["logId"] for i in admin.callbacks()) == [1, 2]
