"""The workflow pages in a real browser (issue 21): the list, the graph editor, a run started
from the console, its failed node repaired from the run view, names shown as text."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import Locator, Page, expect

from tests.console.conftest import PageErrors, login
from tests.console.executor_app import XSS
from tests.console.stack import Stack

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(150)]


def _job(stack: Stack, desc: str, handler: str) -> int:
    with stack.api() as http:
        body = {"job_group": stack.group_id(), "job_desc": desc, "executor_handler": handler,
                "schedule_type": "NONE"}
        r = http.post("/jobs", json=body)
        r.raise_for_status()
        return int(r.json()["id"])


def _workflow(stack: Stack, name: str) -> int:
    """extract (hello) -> check (fail) -> report (report)."""
    nodes = [{"key": "extract", "job_id": _job(stack, "wf extract", "hello")},
             {"key": "check", "job_id": _job(stack, "wf check", "fail")},
             {"key": "report", "job_id": _job(stack, "wf report", "report")}]
    edges = [{"from": "extract", "to": "check"}, {"from": "check", "to": "report"}]
    with stack.api() as http:
        r = http.post("/workflows", json={"name": name, "job_group": stack.group_id(),
                                          "nodes": nodes, "edges": edges})
        r.raise_for_status()
        return int(r.json()["id"])


def test_run_a_workflow_from_the_console_and_repair_its_failed_node(
    page: Page, stack: Stack, errors: PageErrors
) -> None:
    name = f"nightly {XSS}"
    workflow = _workflow(stack, name)
    stack.wait_executor_online(stack.group_id())
    login(page, stack, path="/workflows")
    row = page.locator(f"tr[data-workflow='{workflow}']")
    expect(row).to_contain_text(name)  # the markup in the name is shown as text
    expect(page.locator("main img")).to_have_count(0)

    # The editor draws the three nodes and the two edges; a node opens its form.
    page.goto(f"{stack.url}/workflows/{workflow}")
    graph = page.get_by_test_id("wf-graph")
    expect(graph.locator("g.wf-node")).to_have_count(3)
    expect(graph.locator("g.wf-edge")).to_have_count(2)
    graph.locator("g.wf-node[data-node='check']").click()
    expect(page.get_by_test_id("node-fields").locator("input").first).to_have_value("check")

    # Run once from the list: the console opens the new run, which fails at 'check'.
    page.goto(f"{stack.url}/workflows")
    page.locator(f"tr[data-workflow='{workflow}']").get_by_test_id("wf-run").click()
    page.fill("textarea[name=params]", '{"day": "20261201"}')
    page.get_by_test_id("wf-trigger-submit").click()
    expect(page).to_have_url(re.compile(r"/workflow-runs/\d+$"))
    state = page.get_by_test_id("wf-run-state")
    expect(state).to_have_attribute("data-state", "failed", timeout=60_000)
    nodes = page.get_by_test_id("wf-node-runs")

    def badge(key: str) -> Locator:
        return nodes.locator(f"li[data-node-run='{key}'] .badge").first

    expect(badge("extract")).to_have_attribute("data-state", "success")
    expect(badge("report")).not_to_have_attribute("data-state", "success")
    expect(page.get_by_test_id("wf-context")).to_contain_text("20261201")

    # Mark the failed node succeeded: the run goes on to 'report' and succeeds.
    nodes.locator("li[data-node-run='check']").get_by_test_id("node-mark").click()
    page.get_by_test_id("confirm-yes").click()
    expect(state).to_have_attribute("data-state", "success", timeout=60_000)
    expect(badge("report")).to_have_attribute("data-state", "success")
    expect(page.get_by_test_id("wf-graph").locator("g.wf-node.st-success")).to_have_count(3)

    # Each node links its job run.
    nodes.locator("li[data-node-run='report']").get_by_test_id("node-run-link").click()
    expect(page).to_have_url(re.compile(r"/runs/\d+$"))
    expect(page.get_by_test_id("run-log")).to_contain_text("report uploaded", timeout=20_000)


@pytest.mark.parametrize("width", [1440, 390])
def test_workflow_pages_fit_desktop_and_phone_width(page: Page, stack: Stack, width: int) -> None:
    workflow = _workflow(stack, f"fits at {width}")
    with stack.api() as http:
        http.post(f"/workflows/{workflow}/trigger", json={"params": {}}).raise_for_status()
    login(page, stack, path="/workflows")
    page.set_viewport_size({"width": width, "height": 900})
    for path in ("/workflows", "/workflows/new", f"/workflows/{workflow}", "/workflow-runs"):
        page.goto(stack.url + path)
        expect(page.locator("main h1")).to_be_visible()
        expect(page.locator("[aria-busy=true]")).to_have_count(0)
        overflow = page.evaluate("document.documentElement.scrollWidth")
        assert overflow <= width, f"{path} at {width} px scrolls sideways ({overflow} px)"
