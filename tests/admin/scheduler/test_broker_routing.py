"""Broker executors without a broker: their addresses, their settings, and how the admin's
ExecutorClient sends them what is not a run (over their polls; kills, log reads and /received
to every broker executor of the group, since any of them may have taken a run from the group's
queue). The broker itself: tests/executor/test_broker_dispatch.py."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

import orjson
import pytest

from jobring.admin.dispatch.client import ExecutorClient
from jobring.admin.dispatch.pull import PullHub
from jobring.admin.services.settings import AdminSettings
from jobring.configbase import ConfigError
from jobring.core.addresses import (
    AddressRefused,
    address_key,
    broker_name,
    check_executor_address,
    is_broker_address,
    is_polled_address,
    is_pull_address,
)
from jobring.executor.config import load_executor_settings
from jobring.protocol.broker import (
    BATCH_MAX,
    RUN_CONTENT_TYPE,
    RUNS_CONTENT_TYPE,
    KeptConnection,
    batch_body,
    group_queue,
    queue_arguments,
    run_bodies,
    run_routing,
)
from jobring.protocol.models import LogParam, TriggerParam, dumps


def test_broker_addresses_are_canonical_keyed_and_polled() -> None:
    assert check_executor_address(" BROKER://Worker-1 ") == "broker://worker-1/"
    assert address_key("broker://WORKER-1/") == "broker://worker-1"
    assert is_broker_address("Broker://x/") and is_polled_address("broker://x/")
    assert not is_pull_address("broker://x/") and not is_broker_address("pull://x/")
    assert broker_name("broker://worker-1/") == "worker-1"
    for bad in ("broker://", "broker://a b/", "broker://x/y"):
        with pytest.raises(AddressRefused):
            check_executor_address(bad)


def test_queue_names_and_routing_of_a_run() -> None:
    assert group_queue("app") == "jobring.runs.app"
    assert queue_arguments(True) == {"x-expires": 600_000} and queue_arguments(False) == {}
    with pytest.raises(ValueError, match="longer than 255"):
        group_queue("a" * 250)
    shard = TriggerParam(job_id=1, log_id=5, log_date_time=1_000, broadcast_index=1, broadcast_total=3)
    assert run_routing(dumps(shard.to_dict())) == ("5-1000", True)
    single = TriggerParam(job_id=1, log_id=6, log_date_time=2_000)
    assert run_routing(dumps(single.to_dict())) == ("6-2000", False)


def test_a_batch_of_runs_is_the_runs_joined_and_read_back() -> None:
    one, two = (dumps(TriggerParam(job_id=1, log_id=i, log_date_time=1_000).to_dict()) for i in (1, 2))
    assert batch_body([one]) == (one, RUN_CONTENT_TYPE)  # a run alone is a plain /run body
    body, kind = batch_body([one, two])
    assert kind == RUNS_CONTENT_TYPE
    assert [run["logId"] for run in run_bodies(body, kind)] == [1, 2]
    assert [run["logId"] for run in run_bodies(one, RUN_CONTENT_TYPE)] == [1]
    for bad in (b"[]", b'{"logId": 1}'):
        with pytest.raises(ValueError, match="non-empty JSON array"):
            run_bodies(bad, RUNS_CONTENT_TYPE)
    with pytest.raises(ValueError):
        run_bodies(b"not json", RUNS_CONTENT_TYPE)


def test_a_batch_larger_than_any_publisher_makes_is_refused() -> None:
    # A consumer holds slots per message and takes a message larger than its free slots once
    # none is held: a batch of thousands of runs (published by anyone who may write to the
    # group's queue) would run them all at once past the executor's slots.
    run = dumps(TriggerParam(job_id=1, log_id=1, log_date_time=1_000).to_dict())
    body, kind = batch_body([run] * BATCH_MAX)
    assert len(run_bodies(body, kind)) == BATCH_MAX
    body, kind = batch_body([run] * (BATCH_MAX + 1))
    with pytest.raises(ValueError, match=f"at most {BATCH_MAX}"):
        run_bodies(body, kind)


def test_settings_of_a_broker_executor_and_of_the_admin() -> None:
    base = {"app_name": "app", "admin_addresses": ["http://a/"], "access_token": "t" * 16}
    with pytest.raises(ConfigError, match="needs dispatch_broker"):
        load_executor_settings({}, dispatch="broker", **base)
    with pytest.raises(ConfigError, match="does not fit dispatch='broker'"):
        load_executor_settings({}, dispatch="broker", dispatch_broker="amqp://h/", address="pull://x/",
                               **base)
    settings = load_executor_settings({"JOBRING_EXECUTOR_DISPATCH": "broker",
                                       "JOBRING_EXECUTOR_DISPATCH_BROKER": "amqp://h/",
                                       "JOBRING_EXECUTOR_BROKER_SLOTS": "3"}, address="broker://b1/", **base)
    assert (settings.dispatch, settings.broker_slots) == ("broker", 3)
    assert AdminSettings(dispatch_broker="amqp://guest:guest@h:5672/").dispatch_broker is not None
    with pytest.raises(ValueError, match="amqp://"):
        AdminSettings(dispatch_broker="http://h/")


class Clock:
    def __call__(self) -> int:
        return 1_000_000


async def answer_polls(hub: PullHub, key: str, app: str, answer: dict[str, object]) -> list[str]:
    """Answer every call the executor at ``key`` gets, for one poll; the paths called."""
    calls = await hub.poll(key, app, 5_000)
    hub.answer(key, app, [(c.id, orjson.dumps(answer)) for c in calls])
    return [c.path for c in calls]


async def test_a_kill_goes_to_every_broker_executor_of_the_group_and_received_is_their_union() -> None:
    hub = PullHub(Clock())
    client = ExecutorClient(access_token=None, pull=hub)
    for key in ("broker://a", "broker://b", "pull://c"):
        await hub.poll(key, "app", 0)  # polling now: live
    await hub.poll("broker://z", "other-app", 0)  # another group's: never asked
    try:
        kill = asyncio.ensure_future(client.kill("broker://a/", 7, None, "app"))
        paths = await asyncio.gather(answer_polls(hub, "broker://a", "app", {"code": 500, "msg": "no"}),
                                     answer_polls(hub, "broker://b", "app", {"code": 200}))
        assert paths == [["kill"], ["kill"]]
        assert (await kill).ok  # one of them had the job
        assert [e.queued for e in hub.executors() if e.address in ("pull://c", "broker://z")] == [0, 0]

        asked = asyncio.ensure_future(client.call("broker://a/", "received", {"runs": [[1, 0], [2, 0]]},
                                                  None, "app"))
        ones, twos = ({"code": 200, "content": {"received": [n]}} for n in (1, 2))
        await asyncio.gather(answer_polls(hub, "broker://a", "app", ones),
                             answer_polls(hub, "broker://b", "app", twos))
        assert (await asked).content == {"received": [1, 2]}
    finally:
        await client.aclose()


async def test_a_kill_of_a_known_run_reaches_only_the_executors_that_may_hold_it() -> None:
    hub = PullHub(Clock())
    client = ExecutorClient(access_token=None, pull=hub)
    keys = ("broker://a", "broker://b", "broker://c")
    for key in keys:
        await hub.poll(key, "app", 0)
    none: dict[str, object] = {"code": 200, "content": {"received": []}}
    has: dict[str, object] = {"code": 200, "content": {"received": [41]}}
    cannot_say: dict[str, object] = {"code": 500, "msg": "busy"}
    try:
        # b accepted run 41, c cannot say: the kill goes to b and c, not to a (the recorded one).
        kill = asyncio.ensure_future(client.kill("broker://a/", 7, None, "app", runs=[(41, 1_000)]))
        answers = (none, has, cannot_say)
        pairs = zip(keys, answers, strict=True)
        asked = await asyncio.gather(*(answer_polls(hub, k, "app", a) for k, a in pairs))
        assert asked == [["received"]] * 3
        killed = await asyncio.gather(*(answer_polls(hub, k, "app", {"code": 200}) for k in keys[1:]))
        assert killed == [["kill"], ["kill"]]
        assert (await kill).ok
        assert [e.queued for e in hub.executors() if e.address == "broker://a"] == [0]

        # Nobody says it accepted the run: every broker executor of the group gets the kill.
        kill = asyncio.ensure_future(client.kill("broker://a/", 7, None, "app", runs=[(42, 1_000)]))
        await asyncio.gather(*(answer_polls(hub, k, "app", none) for k in keys))
        killed = await asyncio.gather(*(answer_polls(hub, k, "app", {"code": 200}) for k in keys))
        assert killed == [["kill"]] * 3
        assert (await kill).ok
    finally:
        await client.aclose()


async def test_a_log_is_read_from_the_broker_executor_that_has_it() -> None:
    hub = PullHub(Clock())
    client = ExecutorClient(access_token=None, pull=hub)
    for key in ("broker://a", "broker://b"):
        await hub.poll(key, "app", 0)
    try:
        read = asyncio.ensure_future(client.log("broker://a/", LogParam(0, 9, 1), None, "app"))
        missing = {"code": 200, "content": {"fromLineNum": 1, "toLineNum": 0, "isEnd": True,
                                            "logContent": "readLog fail, logFile not exists"}}
        found = {"code": 200, "content": {"fromLineNum": 1, "toLineNum": 1, "isEnd": True,
                                          "logContent": "hi"}}
        assert await answer_polls(hub, "broker://a", "app", missing) == ["log"]  # the recorded one first
        assert await answer_polls(hub, "broker://b", "app", found) == ["log"]
        answer = await read
        assert answer.ok and isinstance(answer.content, dict) and answer.content["logContent"] == "hi"
    finally:
        await client.aclose()


def test_queue_names_of_two_groups_never_meet() -> None:
    """App names may hold '.', so a group's queues must not be spelled as another group's:
    executor "bar" of app "foo" must not consume (and the admin must not publish app "foo"'s
    shards into) the group queue of app "foo.at.bar", and the per-group RabbitMQ permission
    documented for app "foo" must not reach app "foo.bar"'s queues."""
    import re

    from jobring.protocol.broker import executor_queue, permission_pattern

    assert executor_queue("foo", "bar") != group_queue("foo.at.bar")
    own = {executor_queue(a, n) for a in ("foo", "foo.at", "foo.at.bar") for n in ("bar", "x")}
    assert not own & {group_queue(a) for a in ("foo", "foo.at", "foo.at.bar", "foo.at.bar.at.x")}
    allowed = re.compile(permission_pattern("foo"))
    assert allowed.fullmatch(group_queue("foo")) and allowed.fullmatch(executor_queue("foo", "bar"))
    for other in ("foo.bar", "foo.at.bar", "fooxbar", "foo:bar", "foo-bar"):
        assert not allowed.fullmatch(group_queue(other))
        assert not allowed.fullmatch(executor_queue(other, "bar"))
    with pytest.raises(ValueError, match="appname"):
        group_queue("foo@bar")


def test_the_broker_url_is_shown_without_its_password() -> None:
    """The publisher's URL appears in log lines and in the trigger message of a run (which
    every reader of the group sees): never a part of the password, nor query values."""
    from jobring.admin.dispatch.broker import _safe

    assert _safe("amqp://user:secret@rabbit:5672/vh") == "amqp://user@rabbit:5672/vh"
    assert _safe("amqp://rabbit/") == "amqp://rabbit/"
    shown = _safe("amqp://user:p@ss:w0rd@rabbit:5672/vh")  # an unescaped '@' in the password
    assert "ss" not in shown.replace("rabbit", "") and "w0rd" not in shown
    assert shown == "amqp://user@rabbit:5672/vh"
    shown = _safe("amqps://u:pw@h/v?password=topsecret&heartbeat=5")
    assert "topsecret" not in shown and "pw" not in shown


async def test_the_kept_connection_retries_with_one_log_line_and_reconnects_after_a_loss(
        caplog: pytest.LogCaptureFixture) -> None:
    opened: list[asyncio.Event] = []
    closes: list[int] = []
    failures = [OSError("refused"), OSError("refused")]

    async def open_link(lost: asyncio.Event) -> None:
        if failures:
            raise failures.pop()
        opened.append(lost)

    async def close_link() -> None:
        closes.append(len(opened))

    link = KeptConnection("test link", open_link, close_link, (OSError,), max_backoff_s=0.2)
    with caplog.at_level(logging.INFO, logger="jobring.protocol.broker"):
        link.start()
        try:
            await asyncio.wait_for(link.up.wait(), 10)
            assert len(opened) == 1 and link.last_error == "OSError: refused"
            opened[0].set()  # the connection is lost: dropped, then opened again
            await eventually_true(lambda: len(opened) == 2 and link.up.is_set())
        finally:
            await link.stop()
    assert not link.up.is_set()
    messages = [r.getMessage() for r in caplog.records]
    assert sum("unreachable" in m for m in messages) == 1  # one line for a run of failures
    assert sum("connection lost; reconnecting" in m for m in messages) == 1
    assert sum(m.endswith("broker connected") for m in messages) == 2


async def eventually_true(check: Callable[[], bool]) -> None:
    for _ in range(1_000):
        if check():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("not reached within 10 s")
