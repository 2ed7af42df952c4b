"""Screenshots of the console's main pages in English and Chinese (docs/screenshots/):

    make screenshots        # or: python -m tests.console.screenshots

Starts a real admin and executor (as the browser tests do), adds a little data, and saves
{en,zh}-{dashboard,jobs,job-editor,runs,run-log,groups,calendars,workflow-editor,workflow-run,users}.png
at 1440x900.
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

from playwright.sync_api import Page, sync_playwright

from tests.console.stack import REPO, Stack, ensure_chromium, ensure_console_built

OUT = REPO / "docs" / "screenshots"
JOBS = [
    ("Nightly order report", "report", "0 0 2 * * ?", "America/New_York", "ops-team"),
    ("Sync billing accounts", "fail", "0 */15 * * * ?", None, "billing"),
    ("Weekly cleanup", "hello", "0 30 3 ? * 1", "Europe/Berlin", "platform"),
    ("Refresh search index", "hello", "0 0/5 * * * ?", None, "search"),
]

HOLIDAYS_SKIPPED = {"calendars": ["cn-holidays-2026"], "calendar_action": "skip"}


def _seed(stack: Stack) -> tuple[int, int]:
    group = stack.group_id()
    stack.wait_executor_online(group)
    ids: list[int] = []
    with stack.api() as http:
        http.post("/calendars", json={
            "name": "cn-holidays-2026", "zone": "Asia/Shanghai", "job_group": None,
            "dates": ["2026-10-01", "2026-10-02", "2026-10-05", "2026-10-06", "2026-10-07"],
            "date_ranges": [{"start": "2026-02-15", "end": "2026-02-23"}],
        }).raise_for_status()
        http.post("/groups", json={"app_name": "billing-service", "title": "Billing", "address_type": 1,
                                   "addresses": ["http://10.0.4.21:9999/", "http://10.0.4.22:9999/"]})
        for desc, handler, cron, zone, author in JOBS:
            r = http.post("/jobs", json={
                "job_group": group, "job_desc": desc, "executor_handler": handler, "schedule_type": "CRON",
                "schedule_conf": cron, "schedule_timezone": zone, "author": author, "executor_timeout": 60,
                **({"timing": HOLIDAYS_SKIPPED} if not ids else {}),
            })
            r.raise_for_status()
            ids.append(int(r.json()["id"]))
        http.post(f"/jobs/{ids[2]}/start").raise_for_status()
        http.post(f"/jobs/{ids[3]}/start").raise_for_status()
        for job in (ids[0], ids[1], ids[0], ids[2], ids[1], ids[0]):
            http.post(f"/jobs/{job}/trigger", json={"executor_param": "region=all"}).raise_for_status()
        http.post("/users", json={"username": "lin.wei", "password": "Lin-wei-passw0rd!", "role": "operator",
                                  "group_ids": [group], "glue_permission": True})
        http.post("/users", json={"username": "auditor", "password": "Auditor-passw0rd!", "role": "viewer",
                                  "group_ids": [group]})
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            runs = http.get("/runs", params={"job_id": ids[0]}).json()["items"]
            if runs and all(r["handle_code"] != 0 for r in runs):
                return ids[0], int(runs[0]["id"])
            time.sleep(0.3)
        raise AssertionError(f"the seeded runs did not finish: {runs}")


def _seed_workflow(stack: Stack) -> tuple[int, int]:
    """A small nightly workflow, run once to its end: (workflow id, workflow run id)."""
    group = stack.group_id()
    with stack.api() as http:
        def job(desc: str, handler: str) -> int:
            r = http.post("/jobs", json={"job_group": group, "job_desc": desc, "executor_handler": handler,
                                         "schedule_type": "NONE", "author": "data"})
            r.raise_for_status()
            return int(r.json()["id"])

        nodes = [{"key": "extract", "job_id": job("Extract orders", "hello")},
                 {"key": "route", "kind": "decision"},
                 {"key": "full_report", "job_id": job("Full report", "report")},
                 {"key": "quick_report", "job_id": job("Quick report", "hello")},
                 {"key": "publish", "job_id": job("Publish", "hello"), "join": "any_success"}]
        edges = [{"from": "extract", "to": "route"},
                 {"from": "route", "to": "full_report", "when": "day == '20261201'"},
                 {"from": "route", "to": "quick_report", "else": True},
                 {"from": "full_report", "to": "publish"}, {"from": "quick_report", "to": "publish"}]
        r = http.post("/workflows", json={"name": "nightly-orders", "job_group": group, "nodes": nodes,
                                          "edges": edges, "description": "orders of the day, reported"})
        r.raise_for_status()
        workflow = int(r.json()["id"])
        started = http.post(f"/workflows/{workflow}/trigger", json={"params": {"day": "20261201"}})
        started.raise_for_status()
        run = int(started.json()["workflow_run_id"])
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if http.get(f"/workflow-runs/{run}").json()["state"] != "running":
                return workflow, run
            time.sleep(0.3)
        raise AssertionError("the seeded workflow run did not end")


def _shoot(page: Page, stack: Stack, lang: str, job: int, run: int, workflow: tuple[int, int]) -> None:
    page.goto(stack.url + "/")
    page.evaluate(f"localStorage.setItem('jobring.locale', '{'zh-CN' if lang == 'zh' else 'en'}')")
    shots = {
        "dashboard": "/",
        "jobs": "/jobs",
        "job-editor": f"/jobs/{job}",
        "runs": "/runs",
        "run-log": f"/runs/{run}",
        "groups": "/groups",
        "calendars": "/calendars",
        "workflow-editor": f"/workflows/{workflow[0]}",
        "workflow-run": f"/workflow-runs/{workflow[1]}",
        "users": "/users",
    }
    for name, path in shots.items():
        page.goto(stack.url + path)
        page.wait_for_load_state("networkidle")
        page.wait_for_timeout(600)
        page.screenshot(path=str(OUT / f"{lang}-{name}.png"))


def main() -> int:
    ensure_console_built()
    OUT.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        stack = Stack(Path(tmp))
        try:
            stack.start()
            job, run = _seed(stack)
            workflow = _seed_workflow(stack)
            with sync_playwright() as p:
                browser = p.chromium.launch(executable_path=ensure_chromium())
                viewport = {"width": 1440, "height": 900}
                context = browser.new_context(viewport=viewport, timezone_id="Asia/Shanghai")
                page = context.new_page()
                page.goto(stack.url + "/login")
                page.fill("input[name=username]", "admin")
                page.fill("input[name=password]", stack.ready_password())
                page.click("button[type=submit]")
                page.wait_for_selector("main#main")
                for lang in ("en", "zh"):
                    _shoot(page, stack, lang, job, run, workflow)
                browser.close()
        finally:
            stack.stop()
    print(f"screenshots saved in {OUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
