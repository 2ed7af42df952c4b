from __future__ import annotations

import pytest

from jobring.client import AdminApiError
from tests.client.adminkit import AdminEnv


async def test_groups_crud_with_manual_addresses(env: AdminEnv) -> None:
    async with env.client() as admin:
        created = await admin.groups.create("billing", "Billing", addresses=["http://10.1.1.1:9999/"])
        assert created["address_type"] == 1 and created["addresses"] == ["http://10.1.1.1:9999/"]
        auto = await admin.groups.create("reports", "Reports")
        assert auto["address_type"] == 0 and auto["online"] == []
        page = await admin.groups.list(app_name="bill")
        assert [g["id"] for g in page.items] == [created["id"]]
        updated = await admin.groups.update(created["id"], "billing", "Billing 2", addresses=["http://10.1.1.2:9999/"])
        assert updated["title"] == "Billing 2" and updated["addresses"] == ["http://10.1.1.2:9999/"]
        assert (await admin.groups.get(created["id"]))["title"] == "Billing 2"
        await admin.groups.delete(auto["id"])
        assert (await admin.groups.list()).total == 1


async def test_group_access_token_read_and_rotate(env: AdminEnv) -> None:
    async with env.client() as admin:
        created = await admin.groups.create("tokened", "Tokened")
        token = await admin.groups.access_token(created["id"])
        rotated = await admin.groups.rotate_access_token(created["id"])
        assert len(token) >= 40 and rotated != token
        assert await admin.groups.access_token(created["id"]) == rotated
    group = await env.store.groups.get(created["id"])
    assert group is not None and group.access_token == rotated


async def test_group_in_use_cannot_be_deleted(env: AdminEnv) -> None:
    group = await env.group()
    await env.job(group)
    async with env.client() as admin:
        with pytest.raises(AdminApiError) as info:
            await admin.groups.delete(group)
        assert info.value.status == 409
        assert (await admin.groups.get(group))["id"] == group


async def test_users_crud_and_a_viewer_cannot_write(env: AdminEnv) -> None:
    group = await env.group()
    async with env.client() as admin:
        viewer = await admin.users.create("vera", "Viewer-Password-1", role="viewer", group_ids=[group],
                                          must_change_password=False)
        assert viewer["role"] == "viewer" and viewer["group_ids"] == [group]
        assert "vera" in [u["username"] for u in (await admin.users.list(role="viewer")).items]
        changed = await admin.users.update(viewer["id"], {"glue_permission": True})
        assert changed["glue_permission"] is True and (await admin.users.get(viewer["id"]))["glue_permission"]

    async with env.client(with_token=False) as vera:
        await vera.login("vera", "Viewer-Password-1")
        assert (await vera.jobs.list(group=group)).total == 0
        with pytest.raises(AdminApiError) as info:
            await vera.jobs.create({"job_group": group, "job_desc": "x", "executor_handler": "h"})
        assert info.value.status == 403 and "read-only" in info.value.message
        with pytest.raises(AdminApiError) as info:
            await vera.users.list()
        assert info.value.status == 403

    async with env.client() as admin:
        await admin.users.delete(viewer["id"])
        with pytest.raises(AdminApiError) as info:
            await admin.users.get(viewer["id"])
        assert info.value.status == 404


async def test_short_password_is_refused_with_its_field(env: AdminEnv) -> None:
    async with env.client() as admin:
        with pytest.raises(AdminApiError) as info:
            await admin.users.create("shorty", "short")
    assert info.value.status == 422 and info.value.field == "password"


async def test_dashboard_and_access_token(env: AdminEnv) -> None:
    job = await env.job(await env.group())
    async with env.client() as admin:
        await admin.jobs.trigger(job["id"])
        board = await admin.dashboard.get(days=3)
        access = await admin.settings.access_token()
    assert board["job_count"] == 1 and board["runs_today"] == 1 and len(board["chart"]) == 3
    # The adminkit admin runs without the (opt-in) global executor token.
    assert env.services.secrets.access_token is None and access is None


async def test_glue_save_history_and_restore(glue_env: AdminEnv) -> None:
    job = await glue_env.job(await glue_env.group(), glue_type="GLUE_SHELL", executor_handler=None)
    async with glue_env.client() as admin:
        await admin.glue.save(job["id"], "echo one", "first")
        saved = await admin.glue.save(job["id"], "echo two", "second")
        assert saved["glue_source"] == "echo two" and saved["glue_remark"] == "second"
        versions = await admin.glue.history(job["id"])
        assert [v["glue_remark"] for v in versions][:2] == ["second", "first"]
        first = next(v for v in versions if v["glue_remark"] == "first")
        restored = await admin.glue.restore(job["id"], first["id"])
        assert restored["glue_source"] == "echo one"
        assert (await admin.glue.get(job["id"]))["glue_source"] == "echo one"
