"""The console in a real browser, second round (issue 25): refusals reach their fields,
missing things are not found, bulk results, filters, delayed runs, dialogs, logs."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import Page, expect

from tests.console.conftest import PageErrors, login, sign_in
from tests.console.stack import Stack

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]


def _job(stack: Stack, desc: str, **fields: object) -> int:
    with stack.api() as http:
        body = {"job_group": stack.group_id(), "job_desc": desc, "executor_handler": "hello",
                "schedule_type": "NONE", **fields}
        r = http.post("/jobs", json=body)
        r.raise_for_status()
        return int(r.json()["id"])


def test_every_refused_job_field_is_marked_at_its_control(
    page: Page, stack: Stack, errors: PageErrors
) -> None:
    # The refusals below, as the browser logs them.
    errors.allowed += ["422 (Unprocessable Entity)", "404 (Not Found)", "409 (Conflict)"]
    job = _job(stack, "refusals", schedule_type="CRON", schedule_conf="0 0 2 * * ?")
    login(page, stack, path=f"/jobs/{job}")
    refusals = [
        ("input[name=job_desc]", ""), ("input[name=alarm_email]", "not-an-address"),
        ("input[name=schedule_conf]", "0 15 10 ? * 6 1999 x"),
        ("input[name=schedule_timezone]", "Mars/Olympus"),
        ("input[name=executor_handler]", " padded"), ("input[name=executor_timeout]", "-1"),
        ("input[name=executor_fail_retry_count]", "101"), ("input[name=child_job_ids]", "999999"),
        ("input[name=child_job_ids]", str(job)), ("input[name=child_job_ids]", "abc"),
    ]
    for selector, bad in refusals:
        control = page.locator(selector)
        good = control.input_value()
        control.fill(bad)
        page.get_by_test_id("save-job").click()
        expect(page.locator(f"label.invalid {selector}"), f"{selector} = {bad!r}").to_be_visible()
        expect(control).to_be_focused()
        expect(page.locator(".form-error")).to_have_count(0)
        control.fill(good)
        expect(page.locator(f"label.invalid {selector}")).to_have_count(0)  # editing clears the mark
    page.get_by_test_id("save-job").click()
    expect(page.get_by_text("Saved", exact=True)).to_be_visible()


def test_missing_jobs_runs_and_paths_are_not_found(page: Page, stack: Stack, errors: PageErrors) -> None:
    errors.allowed.append("404 (Not Found)")  # the refused loads below
    bean = _job(stack, "a bean job")
    login(page, stack, path="/jobs/99999")
    expect(page.get_by_test_id("not-found")).to_contain_text("Job #99999 does not exist")
    expect(page.locator("input[name=job_desc]")).to_have_count(0)
    page.goto(stack.url + "/runs/99999999")
    expect(page.get_by_test_id("not-found")).to_contain_text("Run #99999999 does not exist")
    expect(page.get_by_test_id("log-live")).to_have_count(0)
    page.goto(f"{stack.url}/jobs/{bean}/glue")
    expect(page.get_by_test_id("bean-job")).to_be_visible()
    expect(page.locator(".cm-content")).to_have_count(0)
    answer = page.goto(stack.url + "/foo")
    assert answer is not None and answer.status == 404
    expect(page.get_by_test_id("not-found")).to_contain_text("Page not found.")


def test_bulk_start_says_what_it_did_and_a_refused_filter_shows_no_stale_runs(
    page: Page, stack: Stack, errors: PageErrors
) -> None:
    errors.allowed.append("422 (Unprocessable Entity)")  # the refused filter below
    manual = _job(stack, "bulk manual")
    cron = _job(stack, "bulk cron", schedule_type="CRON", schedule_conf="0 0 3 * * ?")
    login(page, stack, path="/jobs?desc=bulk%20")
    expect(page.locator(f"tr[data-job-id='{manual}'] [data-testid=toggle]")).to_be_disabled()
    page.get_by_label("Select all on this page").check()
    page.get_by_role("button", name="Start selected").click()
    result = page.get_by_test_id("bulk-result")
    expect(result).to_contain_text("Started 1 of 2 jobs.")
    expect(result).to_contain_text(f"#{manual} bulk manual: Manual only")
    expect(page.locator(f"tr[data-job-id='{cron}'] [role=switch]")).to_have_attribute("aria-checked", "true")
    expect(page.locator(".bulk-bar")).to_contain_text("1 selected")  # the refused one stays selected

    page.goto(stack.url + "/runs?job=abc")  # e.g. an edited link
    expect(page.get_by_test_id("list-error")).to_contain_text("job_id")
    expect(page.locator("label.invalid select[name=job]")).to_be_visible()
    expect(page.locator("tr[data-run-id]")).to_have_count(0)


def test_delayed_runs_are_listed_on_the_job_and_in_runs_and_can_be_cancelled(
    page: Page, stack: Stack
) -> None:
    job = _job(stack, "run later")
    with stack.api() as http:
        ask = {"delay_ms": 3_600_000, "executor_param": "p-later"}
        later = http.post(f"/jobs/{job}/trigger-at", json=ask)
        later.raise_for_status()
        fire = later.json()["id"]
    login(page, stack, path=f"/runs?state=scheduled&job={job}")
    expect(page.locator(f"[data-testid=delayed-runs] tr[data-fire-id='{fire}']")).to_contain_text("run later")
    page.goto(f"{stack.url}/jobs/{job}")
    row = page.locator(f"[data-testid=delayed-runs] tr[data-fire-id='{fire}']")
    expect(row).to_contain_text("p-later")
    row.get_by_role("button", name="Cancel run").click()
    page.get_by_test_id("confirm-yes").click()
    expect(page.get_by_test_id("delayed-runs")).to_contain_text("No delayed run is pending.")
    with stack.api() as http:
        assert http.get(f"/jobs/{job}/delayed").json() == []


def test_dialogs_focus_their_first_field_and_return_it_and_escape_closes_the_user_menu(
    page: Page, stack: Stack
) -> None:
    job = _job(stack, "focus check")
    login(page, stack, path="/jobs?desc=focus%20check")
    opener = page.locator(f"tr[data-job-id='{job}'] [data-testid=run-once]")
    opener.click()
    expect(page.locator("dialog textarea[name=executor_param]")).to_be_focused()
    page.keyboard.press("Escape")
    expect(page.locator("dialog")).to_have_count(0)
    expect(opener).to_be_focused()
    page.goto(stack.url + "/groups")
    page.get_by_test_id("new-group").click()
    expect(page.locator("dialog input[name=app_name]")).to_be_focused()
    page.keyboard.press("Escape")
    expect(page.get_by_test_id("new-group")).to_be_focused()
    menu = page.locator("details.user-menu")
    page.get_by_test_id("user-menu").click()
    expect(menu).to_have_attribute("open", "")
    page.evaluate("document.activeElement.blur()")  # wherever the focus went
    page.keyboard.press("Escape")
    expect(menu).not_to_have_attribute("open", "")
    expect(page.get_by_test_id("user-menu")).to_be_focused()


def test_glue_editor_with_long_lines_keeps_the_csp(page: Page, stack: Stack) -> None:
    long_line = "echo " + "x" * 30_000  # beyond what CodeMirror draws at once
    job = _job(stack, "long glue", executor_handler=None, glue_type="GLUE_SHELL",
               glue_source=f"#!/bin/bash\n{long_line}\necho short\n")
    login(page, stack, path=f"/jobs/{job}/glue")
    editor = page.locator(".cm-content")
    expect(editor).to_contain_text("echo xxx")
    for width in (390, 1440):
        page.set_viewport_size({"width": width, "height": 844})
        editor.click()
        page.keyboard.press("Control+End")
        page.keyboard.insert_text("echo " + "y" * 5000 + "\n")
        page.keyboard.press("Shift+Home")
        page.locator(".cm-scroller").evaluate("e => { e.scrollLeft = 100000; }")
        page.mouse.wheel(0, 400)
    page.fill("input[name=glue_remark]", "long lines")
    page.get_by_role("button", name="Save").click()
    expect(page.locator(".versions li").first).to_contain_text("long lines")
    page.get_by_role("button", name="Compare").first.click()  # long lines side by side
    expect(page.locator(".diff-row").first).to_be_visible()
    # The page fixture fails the test on any CSP violation the editor or the diff caused.


def test_with_the_admin_unreachable_a_page_not_loaded_yet_says_so_once(
    page: Page, stack: Stack, errors: PageErrors
) -> None:
    errors.allowed.append("net::ERR_FAILED")  # the refused fetches below
    login(page, stack, path="/")
    expect(page.get_by_role("heading", name="Dashboard")).to_be_visible()
    page.route("**/assets/**", lambda route: route.abort())  # as if the admin went down
    page.route("**/api/v1/**", lambda route: route.abort())
    for _ in range(2):
        page.get_by_role("link", name="Audit log").click()
    toast = page.locator(".toast.error")
    expect(toast).to_have_count(1)
    expect(toast).to_contain_text("This page could not be loaded")
    expect(page).to_have_url(stack.url + "/")  # stayed where it was


def test_alarm_and_retry_settings_address_disabling_and_searches(
    page: Page, stack: Stack, errors: PageErrors
) -> None:
    errors.allowed.append("422 (Unprocessable Entity)")  # the internal alarm URL refused below
    job = _job(stack, "alarmed job")
    login(page, stack, path=f"/jobs/{job}")
    page.fill("input[name=alarm_email]", "ops@example.com")  # this admin has no SMTP server
    expect(page.get_by_test_id("no-smtp")).to_contain_text("JOBRING_SMTP_HOST")
    page.fill("input[name=alarm_email]", "")
    page.get_by_test_id("add-alarm-target").click()
    target = page.get_by_test_id("alarm-target").first
    target.get_by_label("URL").fill("http://127.0.0.1:9/hook")  # an internal address: refused
    page.get_by_test_id("save-job").click()
    expect(page.locator(".alarm-targets.invalid .field-error")).to_contain_text("not an allowed alarm target")
    target.get_by_label("URL").fill("https://hooks.example.invalid/jobring")
    page.select_option("select[name=alarm_on]", "every_failure")
    page.fill("input[name=deadline_minutes]", "45")
    page.fill("input[name=executor_fail_retry_interval_s]", "30")
    page.select_option("select[name=retry_backoff]", "exponential")
    page.fill("input[name=retry_backoff_max_s]", "900")
    page.get_by_test_id("save-job").click()
    expect(page.get_by_text("Saved", exact=True)).to_be_visible()
    with stack.api() as http:
        saved = http.get(f"/jobs/{job}").json()
    assert saved["alarm_targets"] == [{"kind": "webhook", "url": "https://hooks.example.invalid/jobring"}]
    names = ("alarm_on", "deadline_minutes", "executor_fail_retry_interval_s", "retry_backoff",
             "retry_backoff_max_s")
    assert [saved[n] for n in names] == ["every_failure", 45, 30, "exponential", 900]

    page.goto(stack.url + "/runs")
    expect(page.locator(f"select[name=job] option[value='{job}']")).to_have_text(f"#{job} alarmed job")
    page.goto(stack.url + "/settings")
    expect(page.get_by_test_id("email-alarms")).to_contain_text("no SMTP server is configured")
    page.goto(stack.url + "/users")
    page.fill("input[name=search_username]", "no-such-user")
    page.get_by_role("button", name="Search").click()
    expect(page.locator("tr[data-user]")).to_have_count(0)

    group = stack.group_id()
    stack.wait_executor_online(group)
    page.goto(stack.url + "/groups")
    page.fill("input[name=group_search]", "console-e2e")
    row = page.locator("tr[data-group='console-e2e']")
    row.get_by_test_id("disable-address").first.click()
    page.get_by_test_id("confirm-yes").click()
    expect(row.get_by_test_id("disabled-address")).to_contain_text("127.0.0.1")
    # Back into routing for the other tests.
    row.get_by_test_id("disabled-address").get_by_role("button", name="Enable").click()
    expect(row.get_by_test_id("disabled-address")).to_have_count(0)


def test_a_job_page_runs_the_job_links_the_run_and_lists_it(page: Page, stack: Stack) -> None:
    job = _job(stack, "job page run")
    stack.wait_executor_online(stack.group_id())
    login(page, stack, path=f"/jobs/{job}")
    expect(page.get_by_test_id("recent-runs")).to_contain_text("This job has not run yet.")
    page.get_by_test_id("job-run-once").click()
    page.fill("textarea[name=executor_param]", "from-the-job-page")
    page.get_by_test_id("trigger-submit").click()
    page.locator(".toast").get_by_role("link", name="Open the run").click()
    expect(page).to_have_url(re.compile(r"/runs/\d+$"))
    log = page.get_by_test_id("run-log")
    expect(log).to_contain_text("params=from-the-job-page", timeout=20_000)
    expect(page.get_by_test_id("log-end")).to_be_visible(timeout=20_000)
    # The executor's XXL-JOB markers: <br> as line breaks, >>> markers as section titles.
    expect(log).to_contain_text("jobring job execute start")
    expect(log).not_to_contain_text("<br>")
    expect(page.get_by_test_id("trigger-msg").locator(".msg-section")).to_have_text(["Trigger Job"])
    expect(page.get_by_test_id("trigger-msg")).not_to_contain_text(">>>")
    # In Chinese the admin's message lines are said in Chinese; the values stay as written.
    run_page = page.url
    page.evaluate("localStorage.setItem('jobring.locale', 'zh-CN')")
    page.reload()
    expect(page.get_by_test_id("trigger-msg").locator(".msg-section")).to_have_text(["触发调度"])
    expect(page.get_by_test_id("trigger-msg")).to_contain_text("任务触发类型：手动触发")
    expect(page.get_by_test_id("trigger-msg")).to_contain_text("状态码：200")
    page.evaluate("localStorage.setItem('jobring.locale', 'en')")
    assert page.url == run_page
    page.goto(f"{stack.url}/jobs/{job}")
    expect(page.get_by_test_id("last-result").locator(".badge")).to_have_attribute("data-state", "success")
    page.goto(f"{stack.url}/runs?job={job}")
    expect(page.locator("tr[data-run-id]")).to_have_count(1)
    page.wait_for_timeout(500)  # the first listing's calls are done
    with page.expect_request(re.compile(r"/api/v1/runs\?"), timeout=12_000):
        pass  # the list refreshes itself while idle


SQUEEZED_CELLS = """() => [...document.querySelectorAll('main td')]
    .filter(td => td.offsetParent && td.textContent.trim())
    .map(td => [td.textContent.trim().slice(0, 40), td.getBoundingClientRect()])
    .filter(([, box]) => box.width < 40 && box.height > 80)
    .map(([text, box]) => `${text}: ${Math.round(box.width)}x${Math.round(box.height)}`)"""


@pytest.mark.parametrize("lang", ["en", "zh-CN"])
def test_every_page_at_desktop_and_phone_width(
    page: Page, stack: Stack, errors: PageErrors, lang: str
) -> None:
    errors.allowed.append("404 (Not Found)")  # the unknown path's page itself
    job = _job(stack, f"every page {lang}", schedule_type="CRON", schedule_conf="0 0 4 * * ?")
    with stack.api() as http:
        runs = http.get("/runs", params={"limit": 1}).json()["items"]
    paths = ["/", "/jobs", "/jobs/new", f"/jobs/{job}", "/runs", "/runs?state=scheduled", "/groups", "/users",
             "/audit", "/settings", "/profile", "/nothing-here"] + [f"/runs/{r['id']}" for r in runs]
    login(page, stack, path="/")
    page.evaluate(f"localStorage.setItem('jobring.locale', '{lang}')")
    for width, height in ((1440, 900), (390, 844)):
        page.set_viewport_size({"width": width, "height": height})
        for path in paths:
            page.goto(stack.url + path)
            expect(page.locator("main h1")).to_be_visible()
            expect(page.locator("html")).to_have_attribute("lang", lang)
            expect(page.locator("[aria-busy=true]")).to_have_count(0)  # the listing is in
            overflow = page.evaluate("document.documentElement.scrollWidth")
            assert overflow <= width, f"{path} at {width} px scrolls sideways ({overflow} px)"
            if width < 760:
                assert page.evaluate(SQUEEZED_CELLS) == [], f"{path}: squeezed table cells at {width} px"


def test_unsaved_edits_survive_an_ended_session(page: Page, stack: Stack, errors: PageErrors) -> None:
    errors.allowed.append("401 (Unauthorized)")  # the refused save
    job = _job(stack, "draft kept")
    login(page, stack, path=f"/jobs/{job}")
    page.fill("input[name=job_desc]", "draft kept, edited")
    page.context.clear_cookies(name="jobring_session")
    page.get_by_test_id("save-job").click()
    expect(page).to_have_url(re.compile(r"/login\?next=.*expired=1"))
    sign_in(page, stack)
    expect(page).to_have_url(f"{stack.url}/jobs/{job}")
    expect(page.locator("input[name=job_desc]")).to_have_value("draft kept, edited")
    expect(page.locator(".toast")).to_contain_text("Your unsaved edits were kept")
    page.get_by_test_id("save-job").click()
    expect(page.get_by_text("Saved", exact=True)).to_be_visible()
