"""The web console in a real browser against a real admin and executor process."""

from __future__ import annotations

import re

import httpx
import pytest
from playwright.sync_api import Page, expect

from tests.console.conftest import PageErrors, login, sign_in
from tests.console.executor_app import XSS
from tests.console.stack import APP_NAME, NEW_PASSWORD, Stack

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]


def _job(stack: Stack, handler: str, desc: str, **fields: object) -> int:
    group = stack.group_id()
    with stack.api() as http:
        r = http.post("/jobs", json={"job_group": group, "job_desc": desc, "executor_handler": handler,
                                     "schedule_type": "NONE", **fields})
        r.raise_for_status()
        return int(r.json()["id"])


def _trigger(stack: Stack, job_id: int) -> int:
    stack.wait_executor_online(stack.group_id())
    with stack.api() as http:
        r = http.post(f"/jobs/{job_id}/trigger", json={})
        r.raise_for_status()
        assert r.json()["trigger_code"] == 200, r.json()
        return int(r.json()["log_ids"][0])


def test_first_login_forces_a_password_change(page: Page, stack: Stack) -> None:
    page.goto(stack.url + "/jobs")
    expect(page).to_have_url(re.compile(r"/login\?next=/jobs"))
    page.fill("input[name=username]", "admin")
    page.fill("input[name=password]", stack.generated_password)
    page.click("button[type=submit]")
    expect(page).to_have_url(re.compile(r"/password"))
    expect(page.get_by_text("This is your first sign-in")).to_be_visible()
    page.fill("input[name=current_password]", stack.generated_password)
    page.fill("input[name=new_password]", NEW_PASSWORD)
    page.fill("input[name=repeat_password]", NEW_PASSWORD)
    page.click("button[type=submit]")
    stack.password = NEW_PASSWORD
    expect(page).to_have_url(stack.url + "/jobs")  # back where the user wanted to go
    expect(page.get_by_role("heading", name="Jobs")).to_be_visible()
    page.get_by_test_id("user-menu").click()
    page.get_by_role("button", name="Log out").click()
    expect(page).to_have_url(re.compile(r"/login"))


def test_create_a_group_and_a_cron_job_with_the_builder(page: Page, stack: Stack, errors: PageErrors) -> None:
    errors.allowed.append("422 (Unprocessable Entity)")  # the bad expression below, refused by the API
    login(page, stack, path="/groups")
    if not page.locator(f"tr[data-group='{APP_NAME}']").count():
        page.get_by_test_id("new-group").click()
        page.fill("input[name=app_name]", APP_NAME)
        page.fill("input[name=title]", "Console e2e")
        page.get_by_test_id("save-group").click()
    expect(page.locator(f"tr[data-group='{APP_NAME}']")).to_be_visible()
    stack.ensure_executor()  # with the new group's own token
    # The real executor registers within its 2 s heartbeat and is listed online.
    online = page.locator(f"tr[data-group='{APP_NAME}'] .addr-list")
    expect(online).to_contain_text("127.0.0.1", timeout=20_000)
    # With the handlers it declared: only their jobs are routed to it.
    expect(online.get_by_test_id("declared-handlers").first).to_contain_text("hello")

    page.get_by_role("link", name="Jobs").click()
    page.get_by_test_id("new-job").click()
    page.select_option("select[name=job_group]", label=f"Console e2e ({APP_NAME})")
    page.fill("input[name=job_desc]", "weekly report")
    page.fill("input[name=executor_handler]", "hello")
    page.fill("input[name=schedule_timezone]", "Asia/Shanghai")
    page.get_by_test_id("builder-toggle").click()
    page.select_option("select[name=builder_unit]", "week")
    page.select_option("select[name=builder_weekday]", "6")
    page.select_option("select[name=builder_hour]", "10")
    page.select_option("select[name=builder_minute]", "15")
    page.get_by_test_id("builder-apply").click()
    expect(page.locator("input[name=schedule_conf]")).to_have_value("0 15 10 ? * 6")
    expect(page.get_by_test_id("cron-description")).to_have_text("At 10:15, only on Friday")
    rows = page.get_by_test_id("next-time")
    expect(rows).to_have_count(5)
    # The job's zone (Shanghai) shows 10:15; the viewer's (Berlin) shows the same instant.
    expect(rows.first).to_contain_text("10:15:00")
    expect(rows.first.locator("td").nth(2)).to_contain_text(re.compile(r"0[23]:15:00"))
    # A bad expression is refused by the API and shown at its field.
    page.fill("input[name=schedule_conf]", "0 15 10 ? * 6 1999 x")
    page.get_by_test_id("save-job").click()
    expect(page.locator("label.invalid input[name=schedule_conf]")).to_be_visible()
    page.fill("input[name=schedule_conf]", "0 15 10 ? * 6")
    page.get_by_test_id("save-job").click()
    expect(page).to_have_url(re.compile(r"/jobs/\d+$"))
    expect(page.get_by_test_id("next-time")).to_have_count(5)


def test_run_once_on_the_real_executor_and_read_its_log(page: Page, stack: Stack) -> None:
    job = _job(stack, "hello", "run once from the console")
    stack.wait_executor_online(stack.group_id())
    login(page, stack, path="/jobs?desc=run%20once%20from")
    row = page.locator(f"tr[data-job-id='{job}']")
    row.get_by_test_id("run-once").click()
    page.fill("textarea[name=executor_param]", "from-the-browser")
    expect(page.locator("dialog .check")).to_contain_text("127.0.0.1")
    page.get_by_test_id("trigger-submit").click()
    expect(page.get_by_text("Run started")).to_be_visible()
    page.goto(f"{stack.url}/runs?job={job}")
    badge = page.locator("tr[data-run-id] .badge").first
    expect(badge).to_have_attribute("data-state", "success", timeout=20_000)
    page.locator("tr[data-run-id] a", has_text="#").first.click()
    log = page.get_by_test_id("run-log")
    expect(log).to_contain_text("hello from the console test, params=from-the-browser", timeout=20_000)
    expect(log).to_contain_text("second line")
    expect(page.get_by_test_id("log-end")).to_be_visible()


def test_follow_a_long_runs_log_live_and_kill_it(page: Page, stack: Stack) -> None:
    run = _trigger(stack, _job(stack, "long", "long run to kill"))
    login(page, stack, path=f"/runs/{run}")
    log = page.get_by_test_id("run-log")
    expect(page.get_by_test_id("log-live")).to_be_visible()
    expect(log).to_contain_text("tick 3", timeout=20_000)
    expect(log).to_contain_text("tick 8", timeout=20_000)  # new lines keep arriving
    page.get_by_test_id("kill").click()
    page.get_by_test_id("confirm-yes").click()
    expect(page.locator("h1 .badge")).to_have_attribute("data-state", "killed", timeout=20_000)
    expect(page.get_by_test_id("log-end")).to_be_visible(timeout=20_000)
    lines = log.locator(".log-line").count()
    page.wait_for_timeout(1500)
    assert log.locator(".log-line").count() == lines  # following stopped at the end


def test_a_viewer_sees_jobs_but_no_write_controls(page: Page, stack: Stack) -> None:
    job = _job(stack, "hello", "seen by the viewer")
    with stack.api() as http:
        if not http.get("/users", params={"username": "watcher"}).json()["items"]:
            viewer = {"username": "watcher", "password": "Watcher-passw0rd!", "role": "viewer",
                      "group_ids": [stack.group_id()], "must_change_password": False}
            http.post("/users", json=viewer).raise_for_status()
    login(page, stack, username="watcher", password="Watcher-passw0rd!", path="/jobs")
    expect(page.locator(f"tr[data-job-id='{job}']")).to_be_visible()
    for test_id in ("new-job", "run-once", "toggle"):
        expect(page.get_by_test_id(test_id)).to_have_count(0)
    expect(page.get_by_role("button", name="Delete")).to_have_count(0)
    expect(page.get_by_role("link", name="Users")).to_have_count(0)
    page.locator(f"tr[data-job-id='{job}'] a.job-desc").click()
    expect(page.get_by_text("Read only")).to_be_visible()
    expect(page.locator("input[name=job_desc]")).to_be_disabled()
    expect(page.get_by_test_id("save-job")).to_have_count(0)


def test_switch_to_chinese_and_back(page: Page, stack: Stack) -> None:
    login(page, stack, path="/")
    page.select_option("[data-testid=lang]", "zh-CN")
    expect(page.get_by_role("heading", name="运行报表")).to_be_visible()
    expect(page.locator("html")).to_have_attribute("lang", "zh-CN")
    for path, heading, link in (("/jobs", "任务管理", "任务管理"), ("/runs", "调度日志", "调度日志"),
                                ("/groups", "执行器管理", "执行器管理"), ("/users", "用户管理", "用户管理"),
                                ("/settings", "系统设置", "系统设置"), ("/audit", "审计日志", "审计日志")):
        page.goto(stack.url + path)  # a reload: the choice is remembered
        expect(page.get_by_role("heading", name=heading)).to_be_visible()
        expect(page.get_by_role("link", name=link)).to_be_visible()
    page.goto(stack.url + "/jobs/new")
    expect(page.get_by_text("基础配置")).to_be_visible()
    page.fill("input[name=schedule_conf]", "0 15 10 ? * 6#3")
    expect(page.get_by_test_id("cron-description")).to_contain_text("第三")
    page.select_option("[data-testid=lang]", "en")
    expect(page.get_by_role("heading", name="New job")).to_be_visible()


def test_user_data_is_shown_as_text(page: Page, stack: Stack, errors: PageErrors) -> None:
    job = _job(stack, "xss", f"desc {XSS}", executor_param=f"param {XSS}", author="<b>bold</b>")
    run = _trigger(stack, job)
    requests: list[str] = []
    page.on("request", lambda request: requests.append(request.url))
    login(page, stack, path=f"/jobs?desc={httpx.URL('', params={'x': 'desc <img'}).params['x']}")
    expect(page.locator(f"tr[data-job-id='{job}'] a.job-desc")).to_have_text(f"desc {XSS}")
    page.goto(f"{stack.url}/runs/{run}")
    expect(page.locator("h1 .badge")).to_have_attribute("data-state", "failed", timeout=20_000)
    expect(page.get_by_test_id("handle-msg")).to_contain_text(f"handle message {XSS}")
    expect(page.get_by_test_id("run-param")).to_have_text(f"param {XSS}")
    expect(page.get_by_test_id("run-log")).to_contain_text(f"log line {XSS}", timeout=20_000)
    page.goto(f"{stack.url}/jobs/{job}")
    expect(page.locator("input[name=job_desc]")).to_have_value(f"desc {XSS}")
    assert page.locator("main img, main script, main b").count() == 0
    stray = [u for u in requests if not u.startswith(stack.url) or re.search(r"/x$|alert", u)]
    assert stray == []  # the payload's <img src=x> was never loaded
    assert not [m for m in errors.messages if m.startswith("dialog")]


def test_an_expired_session_returns_to_login_then_to_the_page(
    page: Page, stack: Stack, errors: PageErrors
) -> None:
    errors.allowed.append("401 (Unauthorized)")  # the refused calls the browser logs
    login(page, stack, path="/groups")
    page.context.clear_cookies(name="jobring_session")
    page.get_by_role("link", name="Runs").click()  # inside the app: its API call is refused
    expect(page).to_have_url(re.compile(r"/login\?next=.*expired=1"))
    expect(page.get_by_text("Your session ended")).to_be_visible()
    sign_in(page, stack)
    expect(page).to_have_url(re.compile(r"/runs$"))
    page.context.clear_cookies(name="jobring_session")
    page.goto(stack.url + "/runs?state=failed")  # a reload: the session probe is refused
    expect(page.get_by_text("Your session ended")).to_be_visible()
    sign_in(page, stack)
    expect(page).to_have_url(stack.url + "/runs?state=failed")


def test_phone_width_layout_and_keyboard_navigation(page: Page, stack: Stack) -> None:
    page.set_viewport_size({"width": 390, "height": 844})
    login(page, stack, path="/jobs")
    expect(page.get_by_role("heading", name="Jobs")).to_be_visible()
    width = page.evaluate("document.documentElement.scrollWidth")
    assert width <= 390, "no horizontal scrolling of the page at phone width"
    page.get_by_role("button", name="Menu").click()
    expect(page.locator(".sidebar").get_by_role("link", name="Runs")).to_be_visible()
    # Keyboard: the skip link comes first and focus is visible on what it reaches.
    page.keyboard.press("Escape")
    page.goto(stack.url + "/groups")
    page.keyboard.press("Tab")
    expect(page.get_by_text("Skip to content")).to_be_focused()
    unlabelled = page.evaluate("""() => [...document.querySelectorAll('input, select, textarea')]
        .filter(e => !e.labels?.length && !e.getAttribute('aria-label'))
        .map(e => e.outerHTML)""")
    assert unlabelled == []


def test_glue_editor_saves_compares_and_restores(page: Page, stack: Stack) -> None:
    job = _job(stack, "", "glue job", glue_type="GLUE_SHELL", glue_source="#!/bin/bash\necho one\n")
    login(page, stack, path=f"/jobs/{job}/glue")
    editor = page.locator(".cm-content")  # inside the editor's shadow root (Playwright pierces it)
    expect(editor).to_contain_text("echo one")
    expect(page.locator(".cm-line span").first).to_be_visible()  # highlighted tokens

    def save(line: str, remark: str) -> None:
        editor.click()
        page.keyboard.press("Control+End")
        page.keyboard.type(line + "\n")
        page.fill("input[name=glue_remark]", remark)
        page.get_by_role("button", name="Save").click()
        expect(page.locator(".versions li").first).to_contain_text(remark)

    save("echo two", "second version")
    save("echo three", "third version")
    page.get_by_role("button", name="Compare").last.click()
    expect(page.locator(".diff-row.added")).to_contain_text("echo three")
    page.keyboard.press("Escape")
    page.locator(".versions li").last.get_by_role("button", name="Restore").click()
    page.get_by_test_id("confirm-yes").click()
    expect(page.locator(".versions li").first).to_contain_text("restored version")
    expect(editor).to_contain_text("echo two")
    expect(editor).not_to_contain_text("echo three")


def test_a_refused_action_names_the_missing_permission(page: Page, stack: Stack, errors: PageErrors) -> None:
    errors.allowed.append("403 (Forbidden)")  # the refused call the browser logs
    job = _job(stack, "", "glue for admins only", glue_type="GLUE_SHELL", glue_source="echo hi\n")
    with stack.api() as http:
        if not http.get("/users", params={"username": "operator1"}).json()["items"]:
            operator = {"username": "operator1", "password": "Operator-passw0rd!", "role": "operator",
                        "group_ids": [stack.group_id()], "must_change_password": False}
            http.post("/users", json=operator).raise_for_status()
    # A link to a job's GLUE source, opened by an operator without the GLUE permission.
    login(page, stack, username="operator1", password="Operator-passw0rd!", path=f"/jobs/{job}/glue")
    expect(page.get_by_test_id("load-failure")).to_contain_text("Not permitted: ")
    expect(page.get_by_test_id("load-failure")).to_contain_text("GLUE")
    expect(page.locator(".cm-content")).to_have_count(0)
