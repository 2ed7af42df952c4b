"""Contract tests of the audit log repository on every backend."""

from __future__ import annotations

from jobring.admin.store import AuditFilter, NewAuditEvent, Store

T0 = 1_767_225_600_000  # 2026-01-01T00:00:00Z
DAY = 86_400_000


def _event(at: int, action: str, **fields: object) -> NewAuditEvent:
    values: dict[str, object] = {"actor": "alice", "actor_kind": "session", "actor_id": 7}
    values.update(fields)
    return NewAuditEvent(at=at, action=action, **values)  # type: ignore[arg-type]


async def test_insert_and_list_newest_first_with_every_field(store: Store) -> None:
    first = await store.audit.insert(_event(T0, "auth.login", source="10.0.0.1"))
    second = await store.audit.insert(
        _event(
            T0 + 1,
            "job.update",
            token_id=3,
            actor_kind="api_token",
            target_type="job",
            target_id="12",
            group_id=4,
            outcome="success",
            details='{"changes": {"job_desc": {"before": "a", "after": "b"}}}',
        )
    )
    assert second > first
    page = await store.audit.list()
    assert page.total == 2 and [e.id for e in page.items] == [second, first]
    newest = page.items[0]
    assert (newest.at, newest.actor, newest.actor_id, newest.actor_kind, newest.token_id) == (
        T0 + 1,
        "alice",
        7,
        "api_token",
        3,
    )
    assert (newest.target_type, newest.target_id, newest.group_id, newest.outcome) == (
        "job",
        "12",
        4,
        "success",
    )
    assert newest.details is not None and '"before": "a"' in newest.details
    assert page.items[1].source == "10.0.0.1" and page.items[1].details is None


async def test_long_texts_are_cut_to_their_columns(store: Store) -> None:
    await store.audit.insert(
        _event(T0, "auth.login_failed", actor="x" * 500, source="y" * 200, target_id="z" * 99)
    )
    [event] = (await store.audit.list()).items
    assert event.actor == "x" * 64 and event.source == "y" * 64 and event.target_id == "z" * 64


async def test_large_details_fit(store: Store) -> None:
    details = '{"changes": "' + "é" * 300_000 + '"}'  # beyond a 64 KiB MySQL TEXT
    await store.audit.insert(_event(T0, "group.update", details=details))
    [event] = (await store.audit.list()).items
    assert event.details == details


async def test_filters(store: Store) -> None:
    await store.audit.insert(_event(T0, "job.create", target_type="job", target_id="1", group_id=1))
    await store.audit.insert(_event(T0 + DAY, "job.delete", target_type="job", target_id="1", group_id=1))
    await store.audit.insert(_event(T0 + 2 * DAY, "jobs_x.weird", actor="bob", actor_id=8))
    await store.audit.insert(
        _event(T0 + 3 * DAY, "auth.login_failed", actor="eve", actor_id=None, outcome="failure")
    )

    async def actions(**where: object) -> list[str]:
        page = await store.audit.list(AuditFilter(**where))  # type: ignore[arg-type]
        return [e.action for e in page.items]

    assert await actions(action="job") == ["job.delete", "job.create"]  # not jobs_x.*
    assert await actions(action="job.") == ["job.delete", "job.create"]
    assert await actions(action="job.create") == ["job.create"]
    assert await actions(action="job_") == []  # LIKE wildcards are literal
    assert await actions(actor="bob") == ["jobs_x.weird"]
    assert await actions(actor_id=7) == ["job.delete", "job.create"]
    assert await actions(target_type="job", target_id="1") == ["job.delete", "job.create"]
    assert await actions(group_id=1, action="job.delete") == ["job.delete"]
    assert await actions(outcome="failure") == ["auth.login_failed"]
    assert await actions(since_ms=T0 + DAY, until_ms=T0 + 3 * DAY) == ["jobs_x.weird", "job.delete"]


async def test_offset_and_keyset_paging(store: Store) -> None:
    ids = [await store.audit.insert(_event(T0 + n, "job.trigger")) for n in range(7)]
    page = await store.audit.list(offset=2, limit=3)
    assert page.total == 7 and [e.id for e in page.items] == ids[4:1:-1]
    keyset = await store.audit.list(AuditFilter(before_id=ids[3]), limit=2)
    assert keyset.total == 3 and [e.id for e in keyset.items] == [ids[2], ids[1]]


async def test_retention_deletes_in_batches_and_ids_are_never_reused(store: Store) -> None:
    old = [await store.audit.insert(_event(T0 + n, "job.trigger")) for n in range(5)]
    kept = await store.audit.insert(_event(T0 + 10 * DAY, "job.trigger"))
    assert await store.audit.delete_older_than(T0 + DAY, batch=2) == 5
    page = await store.audit.list()
    assert [e.id for e in page.items] == [kept]
    assert await store.audit.delete_older_than(T0 + DAY, batch=2) == 0
    assert await store.audit.delete_older_than(T0 + 11 * DAY) == 1
    # The newest record is gone too; a new one still gets a fresh id.
    assert await store.audit.insert(_event(T0 + 12 * DAY, "job.trigger")) > max([*old, kept])
