"""Pull dispatch on the admin: the mailboxes (PullHub), api/pull (PullApi) and the
ExecutorClient's pull:// calls."""

from __future__ import annotations

import asyncio
from typing import Any

import orjson
import pytest

from jobring.admin.api.pull_api import PullApi
from jobring.admin.dispatch.client import ExecutorClient
from jobring.admin.dispatch.pull import PullCallError, PullHub
from jobring.admin.services.executor_tokens import TokenScope
from jobring.core.addresses import AddressRefused, address_key, check_executor_address, is_pull_address
from jobring.protocol.models import ReturnT

KEY = "pull://worker-1"
ADDRESS = "pull://worker-1/"


class Clock:
    def __init__(self) -> None:
        self.ms = 1_000_000

    def __call__(self) -> int:
        return self.ms


def group_scope(*apps: str) -> TokenScope:
    return TokenScope(False, frozenset({1}), frozenset(apps))


async def never() -> None:
    await asyncio.Event().wait()


def test_pull_addresses_are_canonical_and_keyed() -> None:
    assert check_executor_address(" PULL://Worker-1 ") == ADDRESS
    assert address_key("pull://worker-1/") == KEY == address_key("pull://WORKER-1")
    assert is_pull_address("Pull://x/") and not is_pull_address("http://x/")
    for bad in ("pull://", "pull://a b/", "pull://-x/", "pull://x/y", "pull://" + "a" * 201):
        with pytest.raises(AddressRefused):
            check_executor_address(bad)


async def test_a_call_without_a_live_poll_fails_at_once_as_not_delivered() -> None:
    hub = PullHub(Clock())
    with pytest.raises(PullCallError) as caught:
        await hub.send(KEY, "run", b"{}", "app", 5)
    assert caught.value.kind == "PullNoPoll" and not caught.value.timeout


async def test_a_waiting_poll_takes_a_call_and_the_answer_reaches_the_caller() -> None:
    clock = Clock()
    hub = PullHub(clock)
    assert await hub.poll(KEY, "app", 0) == []  # opens the mailbox
    poll = asyncio.create_task(hub.poll(KEY, "app", 20_000, never()))
    await asyncio.sleep(0)  # the poll waits
    answer = asyncio.ensure_future(hub.send(KEY, "kill", b'{"jobId":7}', "app", 5))
    (call,) = await poll
    assert (call.path, call.body) == ("kill", b'{"jobId":7}')
    assert hub.answer("pull://other", "app", [(call.id, b'{"code":200}')]) == 0  # another executor's answer
    assert hub.answer(KEY, "other-app", [(call.id, b'{"code":200}')]) == 0  # another appname's
    assert not answer.done()
    assert hub.answer(KEY, "app", [(call.id, b'{"code":200}'), (999, b"{}")]) == 1
    assert await answer == b'{"code":200}'


async def test_calls_of_another_appname_or_none_are_refused_and_the_backlog_is_bounded() -> None:
    hub = PullHub(Clock(), max_queued=2, max_take=1)
    await hub.poll(KEY, "app", 0)
    with pytest.raises(PullCallError) as caught:
        await hub.send(KEY, "run", b"{}", "other-app", 5)
    assert caught.value.kind == "PullNoPoll"  # that appname has no executor at this name
    with pytest.raises(PullCallError) as appless:
        await hub.send(KEY, "received", b"{}", None, 5)
    assert appless.value.kind == "PullNoAppname" and not appless.value.timeout
    first = asyncio.ensure_future(hub.send(KEY, "run", b"1", "app", 5))
    second = asyncio.ensure_future(hub.send(KEY, "run", b"2", "app", 5))
    with pytest.raises(PullCallError) as full:
        await hub.send(KEY, "run", b"3", "app", 5)
    assert full.value.kind == "PullBacklogFull"
    # A poll takes at most max_take calls, in order.
    assert [c.body for c in await hub.poll(KEY, "app", 0)] == [b"1"]
    assert [c.body for c in await hub.poll(KEY, "app", 0)] == [b"2"]
    first.cancel()
    second.cancel()


async def test_a_closed_poll_fails_what_waits_and_the_executor_is_no_longer_alive() -> None:
    hub = PullHub(Clock())
    await hub.poll(KEY, "app", 0)
    gone = asyncio.Event()
    poll = asyncio.create_task(hub.poll(KEY, "app", 20_000, gone.wait()))
    await asyncio.sleep(0)
    gone.set()
    assert await poll == []
    assert not hub.alive(KEY, "app")
    with pytest.raises(PullCallError) as caught:
        await hub.send(KEY, "run", b"{}", "app", 5)
    assert caught.value.kind == "PullNoPoll"


async def test_a_leaving_executor_takes_nothing_and_is_no_longer_alive_at_once() -> None:
    clock = Clock()
    hub = PullHub(clock)
    await hub.poll(KEY, "app", 0)
    queued = asyncio.ensure_future(hub.send(KEY, "run", b"{}", "app", 5))
    # Its last request as it stops (its long poll already closed): within the grace of the
    # poll before, yet the call waiting is failed as never delivered, and no more are taken.
    assert await hub.poll(KEY, "app", 0, leaving=True) == []
    assert not hub.alive(KEY, "app")
    with pytest.raises(PullCallError) as caught:
        await queued
    assert caught.value.kind == "PullNoPoll" and not caught.value.timeout
    with pytest.raises(PullCallError, match="PullNoPoll"):
        await hub.send(KEY, "run", b"{}", "app", 5)
    # A new poll (a restarted executor of the same name) makes it alive again.
    await hub.poll(KEY, "app", 0)
    assert hub.alive(KEY, "app")


async def test_a_poll_finding_calls_queued_takes_them_at_once() -> None:
    hub = PullHub(Clock())
    await hub.poll(KEY, "app", 0)
    pending = asyncio.ensure_future(hub.send(KEY, "run", b"{}", "app", 5))
    # The queue is not empty, so this poll takes the call at once; the watch of its
    # connection is closed unused (no "never awaited" warning: warnings are errors here).
    assert len(await hub.poll(KEY, "app", 20_000, never())) == 1
    pending.cancel()


async def test_a_call_given_up_is_not_delivered_late_and_a_taken_one_times_out() -> None:
    clock = Clock()
    hub = PullHub(clock)
    await hub.poll(KEY, "app", 0)
    with pytest.raises(PullCallError) as untaken:
        await hub.send(KEY, "run", b"1", "app", 0.001)
    assert untaken.value.kind == "PullNotTaken" and not untaken.value.timeout
    assert await hub.poll(KEY, "app", 0) == []  # never delivered late
    taken = asyncio.ensure_future(hub.send(KEY, "run", b"2", "app", 0.05))
    assert len(await hub.poll(KEY, "app", 0)) == 1
    with pytest.raises(PullCallError) as late:
        await taken
    assert late.value.kind == "PullTimeout" and late.value.timeout


async def test_a_call_whose_caller_is_cancelled_is_never_delivered() -> None:
    hub = PullHub(Clock())
    await hub.poll(KEY, "app", 0)
    pending = asyncio.ensure_future(hub.send(KEY, "run", b"{}", "app", 5))
    await asyncio.sleep(0)
    pending.cancel()
    with pytest.raises(asyncio.CancelledError):
        await pending
    assert await hub.poll(KEY, "app", 0) == []


async def test_the_executor_counts_as_alive_only_for_its_grace_after_a_poll() -> None:
    clock = Clock()
    hub = PullHub(clock, grace_ms=5_000)
    await hub.poll(KEY, "app", 0)
    clock.ms += 5_000
    assert hub.alive(KEY, "app")
    clock.ms += 1
    assert not hub.alive(KEY, "app")


async def test_a_stopping_node_releases_waiting_polls_and_waits_no_more() -> None:
    hub = PullHub(Clock())
    poll = asyncio.create_task(hub.poll(KEY, "app", 20_000, never()))
    await asyncio.sleep(0)
    hub.release()
    assert await poll == []
    assert await asyncio.wait_for(hub.poll(KEY, "app", 20_000, never()), 5) == []


# -- api/pull ----------------------------------------------------------------------------------

async def poll_api(api: PullApi, scope: TokenScope, body: dict[str, Any], header: str | None = None
                   ) -> tuple[ReturnT, int]:
    return await api.poll(orjson.dumps(body), scope, header, never)


async def test_the_poll_api_checks_the_token_against_the_appname_and_keys_mailboxes_by_it() -> None:
    hub = PullHub(Clock())
    api = PullApi(hub)
    body = {"address": ADDRESS, "appname": "app-a", "wait_ms": 0}
    answer, status = await poll_api(api, group_scope("app-b"), body)
    assert status == 403 and "app-a" in (answer.msg or "")
    answer, status = await poll_api(api, group_scope("app-a"), body)
    assert status == 200 and answer.content == {"calls": []}
    # Group B's token polling the same name opens B's own mailbox: it takes nothing of A's...
    answer, status = await poll_api(api, group_scope("app-b"), {**body, "appname": "app-b"})
    assert status == 200 and answer.content == {"calls": []}
    # ...nor answers A's calls: an answer counts only in the mailbox of the poll.
    pending = asyncio.ensure_future(hub.send(KEY, "run", b"{}", "app-a", 5))
    (call_id, path, text), = (await poll_api(api, group_scope("app-a"), body))[0].content["calls"]
    assert (path, text) == ("run", "{}")
    await poll_api(api, group_scope("app-b"), {"address": "pull://thief/", "appname": "app-b", "wait_ms": 0,
                                                "answers": [[call_id, '{"code":200}']]})
    assert not pending.done()
    await poll_api(api, group_scope("app-a"), {**body, "answers": [[call_id, '{"code":200}']]})
    assert await pending == b'{"code":200}'


@pytest.mark.parametrize("body", [
    {"address": "http://10.0.0.1:9999/", "appname": "app", "wait_ms": 0},
    {"address": ADDRESS, "appname": "", "wait_ms": 0},
    {"address": ADDRESS, "appname": "app", "wait_ms": 30_001},
    {"address": ADDRESS, "appname": "app", "wait_ms": True},
    {"address": ADDRESS, "appname": "app", "wait_ms": 0, "answers": [["1", "x"]]},
    {"address": ADDRESS, "appname": "app", "wait_ms": 0, "answers": [[1, "x"]] * 1_001},
    {"address": ADDRESS, "appname": "app", "wait_ms": 0, "leaving": "yes"},
    {"address": ADDRESS, "appname": "app", "wait_ms": 1_000, "leaving": True},
])
async def test_the_poll_api_refuses_bad_bodies_naming_the_field(body: dict[str, Any]) -> None:
    answer, status = await poll_api(PullApi(PullHub(Clock())), group_scope("app"), body)
    assert status == 400
    assert any(name in (answer.msg or "") for name in ("address", "appname", "wait_ms", "answers", "leaving"))


# -- ExecutorClient ------------------------------------------------------------------------------

async def test_the_executor_client_sends_pull_calls_through_the_hub() -> None:
    hub = PullHub(Clock())
    client = ExecutorClient(access_token=None, pull=hub)
    try:
        refused = await client.kill(ADDRESS, 7, app_name="app")
        assert not refused.ok and "unreachable (PullNoPoll)" in (refused.msg or "")
        await hub.poll(KEY, "app", 0)
        pending = asyncio.ensure_future(client.kill(ADDRESS, 7, app_name="app"))
        await asyncio.sleep(0)
        (call,) = await hub.poll(KEY, "app", 0)
        assert call.path == "kill" and orjson.loads(call.body) == {"jobId": 7}
        hub.answer(KEY, "app", [(call.id, ReturnT.fail("no such run").encode())])
        assert (await pending).msg == "no such run"
    finally:
        await client.aclose()


async def test_an_admin_without_a_hub_refuses_pull_addresses() -> None:
    client = ExecutorClient(access_token=None)
    try:
        answer = await client.beat(ADDRESS)
    finally:
        await client.aclose()
    assert not answer.ok and "PullDisabled" in (answer.msg or "")


# -- isolation and bounds (security review 2026-11, findings 3-5) ---------------------------------

def scope_of(group: int, app: str) -> TokenScope:
    return TokenScope(False, frozenset({group}), frozenset({app}))


def pull_body(address: str, app: str, answers: list[list[Any]] | None = None, wait_ms: int = 0
              ) -> dict[str, Any]:
    return {"address": address, "appname": app, "wait_ms": wait_ms, "answers": answers or []}


async def test_another_groups_token_cannot_answer_a_call_taken_by_a_dead_executor() -> None:
    clock = Clock()
    hub = PullHub(clock)
    api = PullApi(hub)
    a, b = scope_of(1, "app-a"), scope_of(2, "app-b")
    assert (await poll_api(api, b, pull_body("pull://bx/", "app-b")))[1] == 200
    pending = asyncio.ensure_future(hub.send("pull://bx", "log", b'{"logId":1}', "app-b", 30))
    other = asyncio.ensure_future(hub.send("pull://bx", "beat", b"", "app-b", 30))
    await asyncio.sleep(0)
    (taken, second) = (await poll_api(api, b, pull_body("pull://bx/", "app-b")))[0].content["calls"]
    assert abs(taken[0] - second[0]) != 1  # ids are not a counter one could guess from
    clock.ms += 6_000  # B's executor stalled past its grace: A polls B's address with a forged answer
    forged = '{"code":200,"content":{"logContent":"FORGED"}}'
    answer, status = await poll_api(api, a, pull_body("pull://bx/", "app-a", [[taken[0], forged]]))
    assert status == 200 and answer.content == {"calls": []}
    await asyncio.sleep(0)
    assert not pending.done()
    # An answer for a call still queued (not taken by a poll) is ignored too.
    await poll_api(api, b, pull_body("pull://bx/", "app-b", [[taken[0], '{"code":200}']]))
    assert await asyncio.wait_for(pending, 1) == b'{"code":200}'
    other.cancel()


async def test_a_pull_name_polled_by_another_group_first_does_not_block_or_reveal_the_owner() -> None:
    hub = PullHub(Clock())
    api = PullApi(hub)
    a, b = scope_of(1, "app-a"), scope_of(2, "app-b")
    assert (await poll_api(api, a, pull_body("pull://bx/", "app-a")))[1] == 200  # A squats B's name
    answer, status = await poll_api(api, b, pull_body("pull://bx/", "app-b"))
    assert status == 200 and answer.content == {"calls": []}  # no 409: nothing said about A
    pending = asyncio.ensure_future(hub.send("pull://bx", "run", b"{}", "app-b", 5))
    await asyncio.sleep(0)
    assert (await poll_api(api, a, pull_body("pull://bx/", "app-a")))[0].content == {"calls": []}
    ((call_id, path, _),) = (await poll_api(api, b, pull_body("pull://bx/", "app-b")))[0].content["calls"]
    assert path == "run"
    await poll_api(api, b, pull_body("pull://bx/", "app-b", [[call_id, '{"code":200}']]))
    assert await pending == b'{"code":200}'
    assert sorted((e.app_name, e.address) for e in hub.executors()) == [
        ("app-a", "pull://bx"), ("app-b", "pull://bx")]


async def test_a_call_without_an_appname_never_reaches_a_pull_mailbox() -> None:
    hub = PullHub(Clock())
    api = PullApi(hub)
    a = scope_of(1, "app-a")
    assert (await poll_api(api, a, pull_body("pull://bx/", "app-a")))[1] == 200
    with pytest.raises(PullCallError) as caught:
        await hub.send("pull://bx", "received", b'{"runs":[[77,1]]}', None, 30)
    assert caught.value.kind == "PullNoAppname"
    assert (await poll_api(api, a, pull_body("pull://bx/", "app-a")))[0].content == {"calls": []}


async def test_mailboxes_per_appname_are_capped_and_idle_ones_forgotten() -> None:
    clock = Clock()
    hub = PullHub(clock, max_boxes=3, forget_ms=60_000)
    api = PullApi(hub)
    a, b = scope_of(1, "app-a"), scope_of(2, "app-b")
    for i in range(3):
        assert (await poll_api(api, a, pull_body(f"pull://x{i}/", "app-a")))[1] == 200
    answer, status = await poll_api(api, a, pull_body("pull://x3/", "app-a"))
    assert status == 429 and "3 pull executor addresses" in (answer.msg or "")
    assert (await poll_api(api, a, pull_body("pull://x0/", "app-a")))[1] == 200  # its own: still polled
    assert (await poll_api(api, b, pull_body("pull://x3/", "app-b")))[1] == 200  # another app's cap
    clock.ms += 30_000
    assert (await poll_api(api, a, pull_body("pull://x0/", "app-a")))[1] == 200
    clock.ms += 40_000  # x1, x2 (and B's x3) idle past forget_ms + grace; x0 polled 40 s ago
    assert (await poll_api(api, a, pull_body("pull://x4/", "app-a")))[1] == 200
    assert sorted(e.address for e in hub.executors()) == ["pull://x0", "pull://x4"]


async def test_the_global_tokens_polls_share_one_set_of_limits_whatever_appnames_they_name() -> None:
    hub = PullHub(Clock(), max_boxes=2)
    api = PullApi(hub)
    everyone = TokenScope(True, frozenset({9}), frozenset({"own-token-app"}))
    for app in ("x-1", "x-2"):
        assert (await poll_api(api, everyone, pull_body("pull://w/", app)))[1] == 200
    answer, status = await poll_api(api, everyone, pull_body("pull://w/", "x-3"))
    assert status == 429
    own = scope_of(9, "own-token-app")
    assert (await poll_api(api, own, pull_body("pull://w/", "own-token-app")))[1] == 200


async def test_waiting_polls_are_capped_per_address_and_per_appname() -> None:
    hub = PullHub(Clock(), max_polls=3, max_polls_per_box=2)
    api = PullApi(hub)
    a = scope_of(1, "app-a")
    waiting = [asyncio.create_task(poll_api(api, a, pull_body("pull://x/", "app-a", wait_ms=20_000)))
               for _ in range(2)]
    await asyncio.sleep(0)
    answer, status = await poll_api(api, a, pull_body("pull://x/", "app-a", wait_ms=20_000))
    assert status == 429 and "2 polls of this address" in (answer.msg or "")
    waiting.append(asyncio.create_task(poll_api(api, a, pull_body("pull://y/", "app-a", wait_ms=20_000))))
    await asyncio.sleep(0)
    answer, status = await poll_api(api, a, pull_body("pull://z/", "app-a", wait_ms=20_000))
    assert status == 429 and "3 polls waiting" in (answer.msg or "")
    assert (await poll_api(api, a, pull_body("pull://z/", "app-a")))[1] == 200  # a poll that does not wait
    hub.release()
    assert [s for _, s in await asyncio.gather(*waiting)] == [200, 200, 200]
