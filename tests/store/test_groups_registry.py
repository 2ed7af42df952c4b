"""Contract tests of ``store.groups`` and ``store.registry`` on every backend."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta

import pytest

from jobring.admin.store import EXECUTOR, JobGroup, JobInfo, NotFound, ReferencedError, Store

NOW = datetime(2026, 4, 1, 8, 30, 0)


async def test_group_crud(store: Store) -> None:
    gid = await store.groups.create(
        JobGroup(app_name="orders", title="Orders", address_type=1, address_list="http://a:1/,http://b:2/"),
        NOW,
    )
    group = await store.groups.get(gid)
    assert group is not None
    assert (group.app_name, group.title, group.address_type, group.update_time) == (
        "orders",
        "Orders",
        1,
        NOW,
    )
    assert group.addresses == ["http://a:1/", "http://b:2/"]
    assert await store.groups.by_app_name("orders") == group
    assert await store.groups.by_app_name("nope") is None
    later = NOW + timedelta(minutes=1)
    await store.groups.update(replace(group, title="Orders 2", address_list=None), later)
    updated = await store.groups.get(gid)
    assert updated is not None and updated.title == "Orders 2" and updated.addresses == []
    assert updated.update_time == later
    with pytest.raises(NotFound):
        await store.groups.update(replace(group, id=gid + 100), later)
    assert await store.groups.delete(gid) is True
    assert await store.groups.get(gid) is None
    assert await store.groups.delete(gid) is False


async def test_group_list_filters(store: Store) -> None:
    ids = [
        await store.groups.create(JobGroup(app_name=f"svc-{n}", title=f"T{n}"), NOW) for n in ("b", "a", "c")
    ]
    await store.groups.create(JobGroup(app_name="billing", title="Money"), NOW)
    page = await store.groups.list(limit=2)
    assert page.total == 4 and [g.app_name for g in page.items] == ["billing", "svc-a"]
    assert [g.app_name for g in (await store.groups.list(app_name="svc-")).items] == [
        "svc-a",
        "svc-b",
        "svc-c",
    ]
    assert [g.app_name for g in (await store.groups.list(title="Mon")).items] == ["billing"]
    assert (await store.groups.list(group_ids=ids[:2])).total == 2
    assert [g.app_name for g in await store.groups.all()] == ["billing", "svc-a", "svc-b", "svc-c"]


async def test_delete_refused_while_jobs_reference_group(store: Store) -> None:
    gid = await store.groups.create(JobGroup(app_name="busy", title="Busy"), NOW)
    job = await store.jobs.create(JobInfo(job_group=gid, job_desc="uses busy"))
    with pytest.raises(ReferencedError, match="still has 1 job"):
        await store.groups.delete(gid)
    assert await store.groups.get(gid) is not None
    await store.jobs.delete(job)
    assert await store.groups.delete(gid) is True


async def test_refresh_addresses_only_for_auto_groups(store: Store) -> None:
    auto = await store.groups.create(JobGroup(app_name="auto-app", title="Auto"), NOW)
    empty = await store.groups.create(
        JobGroup(app_name="gone-app", title="Gone", address_list="http://x:1/"), NOW
    )
    manual = await store.groups.create(
        JobGroup(app_name="auto-app", title="Manual", address_type=1, address_list="http://m:1/"), NOW
    )
    later = NOW + timedelta(seconds=30)
    changed = await store.groups.refresh_addresses(
        {"auto-app": ["http://z:2/", "http://a:1/", "http://z:2/"]}, later
    )
    assert changed == 2
    got = {g.id: g for g in await store.groups.all()}
    assert got[auto].address_list == "http://a:1/,http://z:2/" and got[auto].update_time == later
    assert got[empty].address_list is None
    assert got[manual].address_list == "http://m:1/"
    # nothing changed: nothing written
    assert await store.groups.refresh_addresses({"auto-app": ["http://a:1/", "http://z:2/"]}, later) == 0


async def test_registry_beat_live_and_cleanup(store: Store) -> None:
    await store.registry.beat(EXECUTOR, "app", "http://b:9999/", NOW)
    await store.registry.beat(EXECUTOR, "app", "http://a:9999/", NOW)
    await store.registry.beat(EXECUTOR, "other", "http://c:9999/", NOW - timedelta(minutes=5))
    await store.registry.beat("ADMIN", "admin", "http://admin/", NOW)
    # a second beat refreshes the row instead of adding one
    await store.registry.beat(EXECUTOR, "app", "http://a:9999/", NOW + timedelta(seconds=30))
    entries = await store.registry.entries("app")
    assert [(e.registry_value, e.update_time) for e in entries] == [
        ("http://a:9999/", NOW + timedelta(seconds=30)),
        ("http://b:9999/", NOW),
    ]
    live = await store.registry.live(NOW - timedelta(seconds=90))
    assert live == {"app": ["http://a:9999/", "http://b:9999/"]}
    assert await store.registry.live(NOW + timedelta(seconds=1)) == {"app": ["http://a:9999/"]}
    assert await store.registry.remove(EXECUTOR, "app", "http://b:9999/") == 1
    assert await store.registry.remove(EXECUTOR, "app", "http://b:9999/") == 0
    assert await store.registry.delete_dead(NOW - timedelta(seconds=90)) == 1  # "other"
    assert await store.registry.entries("other") == []
    assert [e.registry_value for e in await store.registry.entries("app")] == ["http://a:9999/"]


async def test_group_access_token_is_kept_apart_from_updates(store: Store) -> None:
    gid = await store.groups.create(JobGroup(app_name="tok", title="T", access_token="tok-1"), NOW)
    other = await store.groups.create(JobGroup(app_name="none", title="N"), NOW)
    group = await store.groups.get(gid)
    assert group is not None and group.access_token == "tok-1" and "tok-1" not in repr(group)
    # An ordinary update leaves the token alone; only set_access_token changes it.
    await store.groups.update(replace(group, title="T2", access_token=None), NOW)
    assert (await store.groups.get(gid)) == replace(group, title="T2")
    await store.groups.set_access_token(gid, "tok-2")
    assert set(await store.groups.tokens()) == {(gid, "tok", "tok-2"), (other, "none", None)}
    with pytest.raises(NotFound):
        await store.groups.set_access_token(gid + 100, "x")
