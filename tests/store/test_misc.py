"""Contract tests of reports, GLUE history, users, tokens, settings and the schedule lock."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from jobring.admin.store import (
    Conflict,
    DayCount,
    JobGroup,
    JobInfo,
    NotFound,
    ReportTotals,
    RevokedAccess,
    Store,
    User,
    create_engine,
)

NOW = datetime(2026, 5, 1, 10, 0, 0)


async def test_report_upsert_range_totals(store: Store) -> None:
    day1, day2 = datetime(2026, 4, 29), datetime(2026, 4, 30, 15, 30)
    await store.reports.upsert_day(day1, 1, 10, 2, NOW)
    await store.reports.upsert_day(day2, 0, 5, 0, NOW)
    await store.reports.upsert_day(day1, 0, 11, 3, NOW)  # refresh replaces
    assert await store.reports.range(datetime(2026, 4, 28), datetime(2026, 4, 30)) == [
        DayCount(datetime(2026, 4, 29), 0, 11, 3),
        DayCount(datetime(2026, 4, 30), 0, 5, 0),
    ]
    assert await store.reports.range(datetime(2026, 5, 1), datetime(2026, 5, 2)) == []
    assert await store.reports.totals() == ReportTotals(0, 16, 3)


async def test_report_upsert_concurrent_same_day(store: Store) -> None:
    await asyncio.gather(*(store.reports.upsert_day(NOW, 0, n, 0, NOW) for n in range(6)))
    [day] = await store.reports.range(NOW, NOW)
    assert day.day == datetime(2026, 5, 1) and 0 <= day.success < 6


async def test_glue_save_history_trim(store: Store) -> None:
    group = await store.groups.create(JobGroup(app_name="glue", title="G"), NOW)
    job = await store.jobs.create(JobInfo(job_group=group, job_desc="script", glue_type="GLUE_SHELL"))
    ids = [
        await store.glue.save(job, "GLUE_SHELL", f"echo {n}", f"v{n}", NOW + timedelta(seconds=n))
        for n in range(33)
    ]
    history = await store.glue.history(job)
    assert len(history) == 30
    assert [v.glue_remark for v in history] == [f"v{n}" for n in range(32, 2, -1)]
    assert await store.glue.get_version(ids[0]) is None  # trimmed
    newest = await store.glue.get_version(ids[-1])
    assert (
        newest is not None
        and newest.glue_source == "echo 32"
        and newest.add_time == NOW + timedelta(seconds=32)
    )
    info = await store.jobs.get(job)
    assert info is not None
    assert (info.glue_source, info.glue_remark, info.glue_updatetime) == (
        "echo 32",
        "v32",
        NOW + timedelta(seconds=32),
    )
    await store.glue.save(job, "GLUE_PYTHON", "print(1)", "py", NOW, keep=2)
    assert [v.glue_remark for v in await store.glue.history(job)] == ["py", "v32"]
    with pytest.raises(NotFound):
        await store.glue.save(job + 100, "GLUE_SHELL", "x", "x", NOW)
    assert await store.glue.delete_for_job(job) == 2


async def test_users(store: Store) -> None:
    uid = await store.users.create(
        username="alice", role=0, password_hash="$argon2id$x", permission="1,2", now=NOW
    )
    user = await store.users.get(uid)
    assert user == User(uid, "alice", 0, "1,2", "$argon2id$x", False, False, NOW)
    assert user.permitted_group_ids == [1, 2]
    assert await store.users.by_username("alice") == user
    assert await store.users.by_username("ALICE") in (None, user)  # collation decides; never another user
    with pytest.raises(Conflict):
        await store.users.create(username="alice", role=1, now=NOW)
    bob = await store.users.create(
        username="bob", role=1, must_change_password=True, glue_permission=True, now=NOW
    )
    assert await store.users.count() == 2
    page = await store.users.list(limit=1)
    assert page.total == 2 and [u.username for u in page.items] == ["alice"]
    assert [u.username for u in (await store.users.list(role=1)).items] == ["bob"]
    assert [u.username for u in (await store.users.list(username="li")).items] == ["alice"]
    await store.users.update(replace(user, role=2, permission=None, glue_permission=True))
    changed = await store.users.get(uid)
    assert changed is not None and (changed.role, changed.permission, changed.glue_permission) == (
        2,
        None,
        True,
    )
    assert changed.password_hash == "$argon2id$x"
    with pytest.raises(Conflict):
        await store.users.update(replace(user, username="bob"))
    await store.users.set_password_hash(bob, "$argon2id$new", must_change=False)
    bob_user = await store.users.get(bob)
    assert (
        bob_user is not None
        and bob_user.password_hash == "$argon2id$new"
        and not bob_user.must_change_password
    )
    with pytest.raises(NotFound):
        await store.users.set_password_hash(bob + 100, "x")
    token = await store.tokens.create(bob, "ci", "f" * 64, NOW)
    assert await store.users.delete(bob) is True
    assert await store.users.delete(bob) is False
    assert await store.tokens.by_hash("f" * 64) is None, "tokens of a deleted user go with it"
    del token


async def test_tokens(store: Store) -> None:
    uid = await store.users.create(username="carol", role=0, now=NOW)
    tid = await store.tokens.create(uid, "deploy", "a" * 64, NOW)
    other = await store.tokens.create(uid, "backup", "b" * 64, NOW)
    with pytest.raises(Conflict):
        await store.tokens.create(uid, "dup", "a" * 64, NOW)
    token = await store.tokens.by_hash("a" * 64)
    assert token is not None and (token.id, token.user_id, token.name, token.revoked) == (
        tid,
        uid,
        "deploy",
        False,
    )
    assert token.last_used_time is None
    await store.tokens.touch_last_used(tid, NOW + timedelta(hours=1))
    touched = await store.tokens.by_hash("a" * 64)
    assert touched is not None and touched.last_used_time == NOW + timedelta(hours=1)
    assert [t.id for t in await store.tokens.list_for_user(uid)] == [tid, other]
    assert await store.tokens.revoke(tid, user_id=uid + 1) is None  # not theirs
    assert await store.tokens.revoke(tid, user_id=uid) == []
    assert await store.tokens.revoke(tid) is None  # already revoked
    revoked = await store.tokens.by_hash("a" * 64)
    assert revoked is not None and revoked.revoked is True
    assert await store.tokens.by_hash("c" * 64) is None


async def test_revoking_a_token_revokes_the_tokens_made_with_it(store: Store) -> None:
    uid = await store.users.create(username="dora", role=0, now=NOW)
    root = await store.tokens.create(uid, "root", "1" * 64, NOW)
    child = await store.tokens.create(uid, "child", "2" * 64, NOW, parent_token_id=root)
    grandchild = await store.tokens.create(uid, "grandchild", "3" * 64, NOW, parent_token_id=child)
    sibling = await store.tokens.create(uid, "sibling", "4" * 64, NOW, parent_token_id=root)
    unrelated = await store.tokens.create(uid, "unrelated", "5" * 64, NOW)
    assert await store.tokens.revoke(child) == [grandchild]
    assert sorted(await store.tokens.revoke(root) or []) == [sibling]
    states = {t.id: t.revoked for t in await store.tokens.list_for_user(uid)}
    assert states == {root: True, child: True, grandchild: True, sibling: True, unrelated: False}


async def test_revoke_access_ends_sessions_and_tokens_of_one_user(store: Store) -> None:
    uid = await store.users.create(username="erin", role=0, now=NOW)
    other = await store.users.create(username="finn", role=0, now=NOW)
    now_ms = int(NOW.replace(tzinfo=UTC).timestamp() * 1000)
    for n, owner in enumerate((uid, uid, other)):
        await store.tokens.create(owner, f"t{n}", str(n) * 64, NOW)
        await store.sessions.create(f"s{n}", owner, 0, 10**13)
    await store.tokens.create(uid, "expired", "9" * 64, NOW, NOW - timedelta(seconds=1))
    await store.sessions.create("s-expired", uid, 0, now_ms)
    await store.tokens.revoke((await store.tokens.list_for_user(uid))[0].id)
    revoked = await store.users.revoke_access(uid, now_ms, keep_session="s1")
    assert revoked == RevokedAccess(sessions=1, tokens=1)  # expired ones are not counted
    assert await store.users.revoke_access(uid, now_ms) == RevokedAccess(sessions=1, tokens=0)
    assert [t.revoked for t in await store.tokens.list_for_user(other)] == [False]
    kept = await store.sessions.get("s2")
    assert kept is not None and not kept.revoked


async def test_settings(store: Store) -> None:
    assert await store.settings.get("access_token") is None
    await store.settings.set("access_token", "one", NOW)
    await store.settings.set("access_token", "two", NOW)
    assert await store.settings.get("access_token") == "two"
    assert await store.settings.get_or_create("access_token", lambda: "three") == "two"
    assert await store.settings.get_or_create("session_secret", "s3cret") == "s3cret"
    assert await store.settings.all() == {"access_token": "two", "session_secret": "s3cret"}


async def test_settings_get_or_create_race(store: Store) -> None:
    # Several "nodes" (separate engines) create the same setting at once: one value wins,
    # and every caller gets that value.
    url = store.engine.url.render_as_string(hide_password=False)
    stores = [Store(create_engine(url)) for _ in range(4)]
    try:
        values = await asyncio.gather(
            *(
                s.settings.get_or_create("cluster_secret", lambda n=n: f"value-{n}")
                for n, s in enumerate(stores * 2)
            )
        )
    finally:
        for s in stores:
            await s.close()
    stored = await store.settings.get("cluster_secret")
    assert stored is not None and set(values) == {stored}


async def test_schedule_lock_serializes(store: Store) -> None:
    second_in = asyncio.Event()

    async def second() -> None:
        async with store.lock.schedule_lock():
            second_in.set()

    async with store.lock.schedule_lock():
        task = asyncio.create_task(second())
        with pytest.raises(TimeoutError):  # blocked while we hold the lock
            await asyncio.wait_for(asyncio.shield(second_in.wait()), 0.5)
    await asyncio.wait_for(task, 30)
    assert second_in.is_set()


async def test_settings_set_concurrently_from_many_connections_keeps_one_value(store: Store) -> None:
    # Nodes announce themselves through settings.set at once; none may fail (InnoDB used to
    # deadlock on UPDATE-then-INSERT of the same missing name).
    await asyncio.gather(*(store.settings.set("scheduler_node:x", f"v{i}", NOW) for i in range(8)))
    assert await store.settings.get("scheduler_node:x") in {f"v{i}" for i in range(8)}
