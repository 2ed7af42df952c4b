"""The workflow pages in a real browser (issue 21): the list, the graph editor, a run started
from the console, its failed node repaired from the run view, names shown as text."""

from __future__ import annotations

import re

import httpx
import pytest
from playwright.sync_api import FloatRect, Locator, Page, expect

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


def _centre(box: FloatRect | None) -> tuple[float, float]:
    assert box is not None
    return box["x"] + box["width"] / 2, box["y"] + box["height"] / 2


def _draw_edge(page: Page, source: str, target: str) -> None:
    """Drag from the output handle of node `source` onto node `target` (the rubber band seen
    on the way)."""
    graph = page.get_by_test_id("wf-graph")
    x0, y0 = _centre(graph.locator(f"[data-handle='{source}']").bounding_box())
    x1, y1 = _centre(graph.locator(f"g.wf-node[data-node='{target}'] rect").bounding_box())
    page.mouse.move(x0, y0)
    page.mouse.down()
    page.mouse.move((x0 + x1) / 2, (y0 + y1) / 2, steps=4)
    expect(page.get_by_test_id("wf-rubber")).to_be_attached()  # a level line has no height to be "visible"
    page.mouse.move(x1, y1, steps=4)
    expect(graph.locator(f"g.wf-node.target[data-node='{target}']")).to_have_count(1)
    page.mouse.up()
    expect(page.get_by_test_id("wf-rubber")).to_have_count(0)


def test_draw_a_workflow_in_the_editor_and_see_a_cycle_refused(
    page: Page, stack: Stack, errors: PageErrors
) -> None:
    errors.allowed.append("422 (Unprocessable Entity)")  # the cycle, refused by the API
    group = stack.group_id()
    extract, load, notify = (_job(stack, f"drawn {what}", "hello") for what in ("extract", "load", "notify"))
    login(page, stack, path="/workflows/new")
    page.fill("input[name=name]", "drawn in the editor")
    page.select_option("select[name=job_group]", str(group))
    fields = page.get_by_test_id("node-fields")
    graph = page.get_by_test_id("wf-graph")
    # start -> node, then start -> node_2 (a new node hangs under the selected one)
    fields.locator("select[name=node_job]").select_option(str(extract))
    page.get_by_test_id("add-job").click()
    fields.locator("select[name=node_job]").select_option(str(load))
    graph.locator("g.wf-node[data-node='start']").click()
    page.get_by_test_id("add-job").click()
    expect(fields.locator("input[name=node_key]")).to_have_value("node_2")
    fields.locator("select[name=node_job]").select_option(str(notify))
    expect(graph.locator("g.wf-edge")).to_have_count(2)

    # The edge node -> node_2 drawn on the picture; node_2 waits for either parent and goes on
    # when it fails.
    _draw_edge(page, "node", "node_2")
    expect(graph.locator("g.wf-edge")).to_have_count(3)
    rows = page.get_by_test_id("edge-fields").locator("li")
    expect(rows).to_have_count(3)
    expect(rows.nth(2).locator("select[name=edge_from_2]")).to_have_value("node")
    expect(rows.nth(2).locator("select[name=edge_to_2]")).to_have_value("node_2")
    _draw_edge(page, "node", "node_2")  # the same edge again: ignored
    expect(rows).to_have_count(3)
    fields.locator("select[name=node_join]").select_option("any_success")
    fields.locator("select[name=node_on_failure]").select_option("continue")
    page.get_by_test_id("wf-save").click()
    expect(page).to_have_url(re.compile(r"/workflows/\d+$"))
    workflow = int(page.url.rsplit("/", 1)[1])
    with stack.api() as http:
        saved = http.get(f"/workflows/{workflow}").json()
    assert {(e["from"], e["to"]) for e in saved["edges"]} == {
        ("start", "node"), ("start", "node_2"), ("node", "node_2")}
    last = next(n for n in saved["nodes"] if n["key"] == "node_2")
    assert (last["job_id"], last["join"], last["on_failure"]) == (notify, "any_success", "continue")

    # A cycle drawn back to the start: the server refuses it and names the node; the refused
    # edge is picked on the picture and deleted with the Delete key, and the graph saves.
    expect(graph.locator("g.wf-edge")).to_have_count(3)
    _draw_edge(page, "node_2", "start")
    page.get_by_test_id("wf-save").click()
    refusal = page.get_by_test_id("wf-refusal")
    expect(refusal).to_contain_text("cycle")
    expect(refusal).to_contain_text("(node 'node_2')")
    # the edge the refusal points at (the one closing the cycle the server walked) is marked
    expect(page.get_by_test_id("edge-fields").locator("li.selected")).to_have_count(1)
    back = graph.locator("g.wf-edge[data-edge='3'] path.wf-edge-hit")
    # a point of the drawn edge's line that no node box covers
    x, y = back.evaluate("""p => {
        const m = p.getScreenCTM(), edge = p.closest("g.wf-edge");
        for (let i = 1; i < 20; i += 1) {
            const at = p.getPointAtLength((p.getTotalLength() * i) / 20);
            const x = at.x * m.a + at.y * m.c + m.e, y = at.x * m.b + at.y * m.d + m.f;
            if (document.elementFromPoint(x, y)?.closest("g.wf-edge") === edge) return [x, y];
        }
        return null;
    }""")
    page.mouse.click(x, y)
    expect(page.get_by_test_id("edge-picked")).to_contain_text("Edge node_2 → start")
    page.keyboard.press("Delete")
    expect(graph.locator("g.wf-edge")).to_have_count(3)
    expect(rows).to_have_count(3)
    page.get_by_test_id("wf-save").click()
    expect(page.locator(".toast", has_text="Saved as version 2")).to_be_visible()
    expect(refusal).to_have_count(0)

    # The same editor in Chinese.
    page.evaluate("localStorage.setItem('jobring.locale', 'zh-CN')")
    page.reload()
    expect(page.locator("html")).to_have_attribute("lang", "zh-CN")
    expect(page.locator("main")).to_contain_text("从一个节点拖到另一个节点即可画出连线")
    expect(page.locator("main h3")).to_contain_text("连线")
    expect(graph.locator("g.wf-edge[data-edge='2']")).to_have_attribute("aria-label", "连线 node → node_2")
    graph.locator("g.wf-node[data-node='node_2']").click()
    expect(fields).to_contain_text("节点键")
    expect(fields).to_contain_text("启动条件")
    expect(fields).to_contain_text("失败时")
    graph.locator("g.wf-edge[data-edge='2']").focus()
    page.keyboard.press("Enter")
    expect(page.get_by_test_id("remove-picked-edge")).to_have_text("删除连线")


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


# The run view's words in each language: the page title, the graph's and list's headings, a
# node's try, and the repair.
WORDS = {"en": {"title": "Workflow run", "graph": "Graph", "nodes": "Nodes", "try": "try 1",
                "success": "Success", "mark": "Mark succeeded", "run": "run #", "key": "Key"},
         "zh-CN": {"title": "工作流运行", "graph": "流程图", "nodes": "节点", "try": "第 1 次",
                   "success": "成功", "mark": "标记为成功", "run": "运行 #", "key": "节点键"}}


def _started(stack: Stack, workflow: int) -> int:
    stack.wait_executor_online(stack.group_id())
    with stack.api() as http:
        r = http.post(f"/workflows/{workflow}/trigger", json={"params": {}})
        r.raise_for_status()
        return int(r.json()["workflow_run_id"])


def _in(page: Page, stack: Stack, lang: str, path: str) -> None:
    login(page, stack, path="/")
    page.evaluate(f"localStorage.setItem('jobring.locale', '{lang}')")
    page.goto(stack.url + path)
    expect(page.locator("html")).to_have_attribute("lang", lang)


def test_the_run_view_and_the_editor_in_chinese(page: Page, stack: Stack, errors: PageErrors) -> None:
    words = WORDS["zh-CN"]
    workflow = _workflow(stack, "每日报表")
    run = _started(stack, workflow)
    _in(page, stack, "zh-CN", f"/workflow-runs/{run}")
    expect(page.locator("main h1")).to_contain_text(f"{words['title']} {run}")
    state = page.get_by_test_id("wf-run-state")
    expect(state).to_have_attribute("data-state", "failed", timeout=60_000)
    expect(page.locator("main h2")).to_contain_text([words["graph"], words["nodes"]])
    # A short graph sits beside the list of nodes.
    expect(page.get_by_test_id("wf-run-layout")).not_to_have_class(re.compile(r"\bstacked\b"))
    graph = page.get_by_test_id("wf-graph")
    expect(graph.locator("g.wf-node[data-node='extract']")).to_have_attribute(
        "aria-label", f"extract: {words['success']}")
    expect(graph.locator("g.wf-node.st-failed")).to_have_count(1)
    nodes = page.get_by_test_id("wf-node-runs")
    extract = nodes.locator("li[data-node-run='extract']")
    expect(extract.locator(".badge").first).to_have_text(words["success"])
    expect(extract).to_contain_text(words["try"])
    expect(extract.get_by_test_id("node-run-link")).to_contain_text(words["run"])
    check = nodes.locator("li[data-node-run='check']")
    expect(check).to_contain_text("billing database unreachable")  # the handler's message, as written
    expect(check.get_by_test_id("node-mark")).to_have_text(words["mark"])
    check.get_by_test_id("node-mark").click()
    page.get_by_test_id("confirm-yes").click()
    expect(state).to_have_attribute("data-state", "success", timeout=60_000)
    expect(nodes.locator("li[data-node-run='report'] .badge").first).to_have_text(words["success"])

    # The editor in Chinese: the graph, and a node's form with its fields named in Chinese.
    page.goto(f"{stack.url}/workflows/{workflow}")
    graph = page.get_by_test_id("wf-graph")
    expect(graph.locator("g.wf-node")).to_have_count(3)
    graph.locator("g.wf-node[data-node='check']").click()
    fields = page.get_by_test_id("node-fields")
    expect(fields).to_contain_text(words["key"])
    expect(fields.locator("input").first).to_have_value("check")


@pytest.mark.parametrize("lang", ["en", "zh-CN"])
def test_the_run_view_is_a_list_of_nodes_at_phone_width(
    page: Page, stack: Stack, errors: PageErrors, lang: str
) -> None:
    words = WORDS[lang]
    run = _started(stack, _workflow(stack, f"phone {lang}"))
    page.set_viewport_size({"width": 390, "height": 844})
    _in(page, stack, lang, f"/workflow-runs/{run}")
    expect(page.get_by_test_id("wf-run-state")).to_have_attribute("data-state", "failed", timeout=60_000)
    nodes = page.get_by_test_id("wf-node-runs")
    expect(nodes).to_be_visible()
    expect(page.get_by_test_id("wf-graph")).to_be_hidden()  # no picture on a phone: the list is the view
    items = nodes.locator("li[data-node-run]")
    expect(items).to_have_count(3)
    expect(items.locator(".badge[data-state]")).to_have_count(3)
    for key in ("extract", "check"):  # ran: state, try, its job run, when and how long
        item = nodes.locator(f"li[data-node-run='{key}']")
        expect(item).to_contain_text(words["try"])
        expect(item.get_by_test_id("node-run-link")).to_be_visible()
        times = item.locator(".wf-row").nth(1)
        expect(times.locator(":scope > span")).to_have_count(3)  # try, start -> end, duration
        expect(times.get_by_test_id("node-ended")).to_be_visible()
    for item in items.all():
        box = item.bounding_box()
        assert box is not None and box["x"] >= 0 and box["x"] + box["width"] <= 390, box
    overflow = page.evaluate("document.documentElement.scrollWidth")
    assert overflow <= 390, f"the run page at 390 px scrolls sideways ({overflow} px)"
    nodes.locator("li[data-node-run='extract']").get_by_test_id("node-run-link").click()
    expect(page).to_have_url(re.compile(r"/runs/\d+$"))


def test_a_deep_graph_takes_the_run_pages_width_and_fits_it(
    page: Page, stack: Stack, errors: PageErrors
) -> None:
    hello = _job(stack, "wf chain", "hello")
    keys = [f"step_{i}" for i in range(7)]
    with stack.api() as http:
        r = http.post("/workflows", json={
            "name": "seven deep", "job_group": stack.group_id(),
            "nodes": [{"key": k, "job_id": hello} for k in keys],
            "edges": [{"from": a, "to": b} for a, b in zip(keys, keys[1:], strict=False)]})
        r.raise_for_status()
        workflow = int(r.json()["id"])
    run = _started(stack, workflow)
    page.set_viewport_size({"width": 1440, "height": 900})
    login(page, stack, path=f"/workflow-runs/{run}")
    expect(page.get_by_test_id("wf-run-state")).to_have_attribute("data-state", "success", timeout=60_000)
    expect(page.get_by_test_id("wf-run-layout")).to_have_class(re.compile(r"\bstacked\b"))
    graph = page.get_by_test_id("wf-graph")
    expect(graph.locator("g.wf-node.st-success")).to_have_count(7)
    # Seven layers (1,584 px at full size) drawn smaller to fit the card: no scrolling sideways.
    sizes = page.locator(".wf-graph-wrap").evaluate("w => [w.scrollWidth, w.clientWidth]")
    assert sizes[0] <= sizes[1], f"the graph scrolls sideways in its box: {sizes}"
    assert page.evaluate("document.documentElement.scrollWidth") <= 1440
    # A node is still picked on the smaller picture.
    graph.locator("g.wf-node[data-node='step_3']").click()
    expect(page.locator("li[data-node-run='step_3']")).to_have_class(re.compile(r"\bselected\b"))


# The schedule column of the workflow list in each language.
SCHEDULE_WORDS = {
    "en": {"column": "Schedule", "manual": "manual", "every": "every 600 s", "stopped": "stopped",
           "next": "next"},
    "zh-CN": {"column": "调度", "manual": "手动", "every": "每 600 秒", "stopped": "已停止", "next": "下次"},
}


@pytest.mark.parametrize("lang", ["en", "zh-CN"])
def test_the_workflow_list_shows_each_workflows_schedule(
    page: Page, stack: Stack, errors: PageErrors, lang: str
) -> None:
    words = SCHEDULE_WORDS[lang]
    manual, cron, rate = (_workflow(stack, f"{kind} {lang}") for kind in ("manual", "cron", "rate"))
    with stack.api() as http:
        http.put(f"/workflows/{cron}/schedule", json={
            "schedule_type": "CRON", "schedule_conf": "0 0 2 * * ?", "schedule_timezone": "Asia/Shanghai",
            "enabled": True}).raise_for_status()
        http.put(f"/workflows/{rate}/schedule", json={
            "schedule_type": "FIX_RATE", "schedule_conf": "600", "enabled": False}).raise_for_status()
    _in(page, stack, lang, "/workflows")
    expect(page.locator("main thead")).to_contain_text(words["column"])

    def cell(workflow: int) -> Locator:
        return page.locator(f"tr[data-workflow='{workflow}']").get_by_test_id("wf-schedule-cell")

    expect(cell(manual)).to_have_text(words["manual"])
    expect(cell(cron)).to_contain_text("0 0 2 * * ?")
    expect(cell(cron)).to_contain_text("Asia/Shanghai")
    expect(cell(cron).get_by_test_id("wf-next-fire")).to_contain_text(words["next"])
    expect(cell(rate)).to_contain_text(words["every"])
    expect(cell(rate)).to_contain_text(words["stopped"])
    expect(cell(rate).get_by_test_id("wf-next-fire")).to_have_count(0)


def test_a_schedule_declared_in_code_is_read_only_in_the_console(
    page: Page, stack: Stack, errors: PageErrors
) -> None:
    """A workflow and its schedule declared by an executor (sent here as it would send them,
    for a group of its own so the console executor's declarations stay as they are)."""
    with stack.api() as http:
        made = http.post("/groups", json={"app_name": "console-declared", "title": "Declared"})
        made.raise_for_status()
        token = http.get(f"/groups/{made.json()['id']}/access-token").json()["access_token"]
    schedule = {"schedule_type": "FIX_RATE", "schedule_conf": "3600", "enabled": True}
    jobs = [{"handler": "hello", "fields": {}, "start": True}]
    body = {"appname": "console-declared", "declarations": jobs,
            "workflows": [{"name": "declared nightly", "nodes": [{"key": "a", "job": "hello"}],
                           "schedule": schedule}]}
    answer = httpx.post(f"{stack.url}/xxl-job-admin/api/jobring/declareJobs", json=body,
                        headers={"XXL-JOB-ACCESS-TOKEN": token}, timeout=10).json()
    assert answer["code"] == 200, answer
    (workflow,) = answer["content"]["workflows"]["created"]
    login(page, stack, path="/workflows")
    cell = page.locator(f"tr[data-workflow='{workflow}']").get_by_test_id("wf-schedule-cell")
    expect(cell).to_contain_text("every 3600 s")
    page.goto(f"{stack.url}/workflows/{workflow}")
    form = page.get_by_test_id("wf-schedule")
    expect(form.get_by_test_id("wf-schedule-declared")).to_be_visible()
    expect(form.locator("input[name=schedule_conf]")).to_be_disabled()
    expect(form.get_by_test_id("wf-schedule-save")).to_have_count(0)
    expect(form.locator("input[name=schedule_conf]")).to_have_value("3600")
