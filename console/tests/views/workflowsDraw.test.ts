// @vitest-environment happy-dom
// The graph editor's drawing: an edge dragged from one node onto another joins the model (and the
// body saved), a duplicate, a node onto itself or a drop beside the nodes adds nothing, a plain
// click still picks the node, an edge picked on the picture is removed with Delete; the run view's
// graph draws nothing. The job picker of a group with more jobs than one page asks the server by
// name. The run view's node times (start and end) and a fan-out's items, each with its job run's log.
import { flushPromises, type VueWrapper } from "@vue/test-utils";
import { beforeEach, describe, expect, it, vi } from "vitest";
import { listGroups } from "../../src/api/groups";
import { getJob, listJobs } from "../../src/api/jobs";
import {
  getWorkflow, getWorkflowRun, getWorkflowSchedule, listWorkflows, updateWorkflow,
  type NodeRun, type Workflow, type WorkflowRun, type WorkflowSchedule,
} from "../../src/api/workflows";
import { BOX, layout } from "../../src/lib/workflowGraph";
import WorkflowEditView from "../../src/views/WorkflowEditView.vue";
import WorkflowRunView from "../../src/views/WorkflowRunView.vue";
import { group, job, page } from "./fixtures";
import { mountView } from "./harness";

vi.mock("../../src/api/groups");
vi.mock("../../src/api/jobs");
vi.mock("../../src/api/workflows");

const NODES = [{ key: "extract", job_id: 12 }, { key: "route", kind: "decision" }, { key: "load", job_id: 13 }];
const EDGES = [{ from: "extract", to: "route" }, { from: "route", to: "load", when: "rows > 10" }];

function workflow(over: Partial<Workflow> = {}): Workflow {
  return {
    id: 3, name: "nightly", job_group: 4, description: "", version: 2, created_by: "ana", created_at: 0, updated_at: 0,
    managed_by: null, nodes: NODES, edges: EDGES, ...over,
  };
}

function nodeRun(over: Partial<NodeRun> = {}): NodeRun {
  return {
    key: "extract", kind: "job", job_id: 12, workflow_id: null, state: "success", run_id: 501, attempt: 1,
    started_at: Date.UTC(2026, 0, 1, 8, 0, 0), ended_at: Date.UTC(2026, 0, 1, 8, 0, 42), duration_ms: 42_000, message: "",
    skip_reason: null, marked_succeeded: false, items: null, ...over,
  };
}

function wfRun(over: Partial<WorkflowRun> = {}): WorkflowRun {
  return {
    id: 41, workflow_id: 3, version: 2, job_group: 4, state: "failed", triggered_by: "ana", started_at: Date.UTC(2026, 0, 1, 8),
    ended_at: Date.UTC(2026, 0, 1, 8, 5), parent_run_id: null, round: 0, message: "", context: {},
    nodes: [
      nodeRun(),
      nodeRun({
        key: "files", kind: "fanout", run_id: null, state: "failed", ended_at: Date.UTC(2026, 0, 1, 8, 4, 59), items: [
          { index: 0, state: "success", run_id: 601, attempt: 1, message: "" },
          { index: 1, state: "failed", run_id: 602, attempt: 3, message: "<i>no such file</i>" },
          { index: 2, state: "waiting", run_id: null, attempt: 0, message: "" },
        ] }),
      nodeRun({ key: "late", state: "running", run_id: 503, ended_at: null, duration_ms: null }),
    ],
    edges: [{ from: "extract", to: "files" }, { from: "files", to: "late" }],
    ...over,
  };
}

function schedule(): WorkflowSchedule {
  return {
    workflow_id: 3, schedule_type: "NONE", schedule_conf: "", schedule_timezone: null, misfire_strategy: "DO_NOTHING",
    overlap: "skip", params: {}, enabled: false, next_fire_at: null, next_times: [], queued: false, last_fire_at: null,
    last_result: "", updated_by: null, updated_at: null, spent: false,
  };
}

beforeEach(() => {
  vi.mocked(getWorkflowSchedule).mockResolvedValue(schedule());
  vi.mocked(listGroups).mockResolvedValue(page([group({ id: 4, title: "Reports" })]));
  vi.mocked(listJobs).mockResolvedValue(page([job({ id: 12, job_group: 4, job_desc: "extract rows" }), job({ id: 13, job_group: 4, job_desc: "load" })]));
  vi.mocked(listWorkflows).mockResolvedValue(page([]));
  vi.mocked(getWorkflow).mockResolvedValue(workflow());
  vi.mocked(getWorkflowRun).mockResolvedValue(wfRun());
});

// happy-dom lays nothing out: the picture's units are the pointer's (its screen matrix is the
// identity), so a node's middle is where the layout puts it.
const placed = layout(NODES.map((n) => n.key), EDGES).nodes;
function middle(key: string): { clientX: number; clientY: number } {
  const p = placed.get(key)!;
  return { clientX: p.x + BOX.w / 2, clientY: p.y + BOX.h / 2 };
}

function pointer(target: Element, type: string, at: { clientX: number; clientY: number }): void {
  // the primary button is held from the press until it is let go, as a browser reports it
  const buttons = type === "pointerup" || type === "pointermove-released" ? 0 : 1;
  const name = type === "pointermove-released" ? "pointermove" : type;
  target.dispatchEvent(new PointerEvent(name, { ...at, pointerId: 1, button: 0, buttons, bubbles: true, cancelable: true }));
}

/** Presses on node `from`, moves over `to` (or a point) and lets go there. */
async function drag(wrapper: VueWrapper, from: string, to: string | { clientX: number; clientY: number }): Promise<void> {
  const svg = wrapper.find("svg[data-testid=wf-graph]").element;
  const end = typeof to === "string" ? middle(to) : to;
  pointer(wrapper.find(`svg [data-node=${from}]`).element, "pointerdown", middle(from));
  pointer(svg, "pointermove", { clientX: middle(from).clientX + 20, clientY: middle(from).clientY });
  pointer(svg, "pointermove", end);
  await flushPromises();
  expect(wrapper.find("[data-testid=wf-rubber]").exists()).toBe(true);
  pointer(svg, "pointerup", end);
  await flushPromises();
  expect(wrapper.find("[data-testid=wf-rubber]").exists()).toBe(false);
}

const edgeRows = (wrapper: VueWrapper) => wrapper.findAll("[data-testid=edge-fields] li").map((li) =>
  [(li.find("select[name^=edge_from]").element as HTMLSelectElement).value, (li.find("select[name^=edge_to]").element as HTMLSelectElement).value]);

describe("drawing the graph in the editor", () => {
  it("adds the edge dragged from a node onto another, shown on the picture and in the rows, and saves it", async () => {
    vi.mocked(updateWorkflow).mockResolvedValue(workflow({ version: 3 }));
    const { wrapper } = await mountView(WorkflowEditView, { path: "/workflows/3", props: { id: "3" } });
    expect(wrapper.findAll("svg .wf-handle")).toHaveLength(3);
    await drag(wrapper, "extract", "load");
    expect(edgeRows(wrapper)).toEqual([["extract", "route"], ["route", "load"], ["extract", "load"]]);
    expect(wrapper.findAll("svg g.wf-edge")).toHaveLength(3);
    // a cycle is drawn as well: the server refuses it on save, naming the node
    await drag(wrapper, "load", "extract");
    expect(edgeRows(wrapper)).toHaveLength(4);
    await wrapper.find("#wf-form").trigger("submit");
    await flushPromises();
    const [, body] = vi.mocked(updateWorkflow).mock.calls[0]!;
    expect(body.edges).toEqual([
      { from: "extract", to: "route" }, { from: "route", to: "load", when: "rows > 10" },
      { from: "extract", to: "load" }, { from: "load", to: "extract" },
    ]);
  });

  it("ignores a duplicate, a node onto itself and a drop beside the nodes; a click still picks the node", async () => {
    const { wrapper } = await mountView(WorkflowEditView, { path: "/workflows/3", props: { id: "3" } });
    await drag(wrapper, "extract", "route");
    await drag(wrapper, "route", "route");
    await drag(wrapper, "extract", { clientX: 2, clientY: 2 });
    // Escape drops a drag under way
    pointer(wrapper.find("svg [data-node=extract]").element, "pointerdown", middle("extract"));
    pointer(wrapper.find("svg").element, "pointermove", middle("load"));
    await flushPromises();
    expect(wrapper.find("[data-testid=wf-rubber]").exists()).toBe(true);
    await wrapper.find("svg [data-node=extract]").trigger("keydown", { key: "Escape" });
    pointer(wrapper.find("svg").element, "pointerup", middle("load"));
    await flushPromises();
    expect(wrapper.find("[data-testid=wf-rubber]").exists()).toBe(false);
    // let go outside the picture (its pointerup unseen): the next move, button up, drops the drag
    pointer(wrapper.find("svg [data-node=extract]").element, "pointerdown", middle("extract"));
    pointer(wrapper.find("svg").element, "pointermove", middle("load"));
    await flushPromises();
    expect(wrapper.find("[data-testid=wf-rubber]").exists()).toBe(true);
    pointer(wrapper.find("svg").element, "pointermove-released", middle("route"));
    await flushPromises();
    expect(wrapper.find("[data-testid=wf-rubber]").exists()).toBe(false);
    pointer(wrapper.find("svg").element, "pointermove", middle("load"));
    await flushPromises();
    expect(wrapper.find("[data-testid=wf-rubber]").exists()).toBe(false);
    expect(edgeRows(wrapper)).toEqual([["extract", "route"], ["route", "load"]]);
    const load = wrapper.find("svg [data-node=load]");
    pointer(load.element, "pointerdown", middle("load"));
    pointer(load.element, "pointerup", middle("load"));
    await load.trigger("click");
    expect(wrapper.find("[data-testid=wf-rubber]").exists()).toBe(false);
    expect(load.classes()).toContain("selected");
    expect((wrapper.find("input[name=node_key]").element as HTMLInputElement).value).toBe("load");
    expect(edgeRows(wrapper)).toHaveLength(2);
  });

  it("removes an edge picked on the picture with Delete, or with its button", async () => {
    const { wrapper } = await mountView(WorkflowEditView, { path: "/workflows/3", props: { id: "3" } });
    const edge = wrapper.find("svg g.wf-edge[data-edge='1']");
    expect(edge.attributes("aria-label")).toBe("Edge route → load");
    await edge.trigger("click");
    expect(edge.classes()).toContain("selected");
    expect(wrapper.find("[data-testid=edge-fields] li[data-edge='1']").classes()).toContain("selected");
    expect(wrapper.find("[data-testid=edge-picked]").text()).toContain("Edge route → load");
    await edge.trigger("keydown", { key: "Delete" });
    expect(edgeRows(wrapper)).toEqual([["extract", "route"]]);
    expect(wrapper.find("[data-testid=edge-picked]").exists()).toBe(false);
    await wrapper.find("svg g.wf-edge[data-edge='0']").trigger("click");
    await wrapper.find("[data-testid=remove-picked-edge]").trigger("click");
    expect(edgeRows(wrapper)).toEqual([]);
    expect(wrapper.findAll("svg g.wf-edge")).toHaveLength(0);
  });

  it("draws nothing for a workflow declared in code, nor on a run's graph", async () => {
    vi.mocked(getWorkflow).mockResolvedValue(workflow({ managed_by: "code" }));
    const { wrapper } = await mountView(WorkflowEditView, { path: "/workflows/3", props: { id: "3" } });
    expect(wrapper.find("svg .wf-handle").exists()).toBe(false);
    expect(wrapper.find("svg g.wf-edge[tabindex]").exists()).toBe(false);
    pointer(wrapper.find("svg [data-node=extract]").element, "pointerdown", middle("extract"));
    pointer(wrapper.find("svg").element, "pointermove", middle("load"));
    await flushPromises();
    expect(wrapper.find("[data-testid=wf-rubber]").exists()).toBe(false);
    wrapper.unmount();
    const run = await mountView(WorkflowRunView, { path: "/workflow-runs/41", props: { id: "41" } });
    expect(run.wrapper.find("svg .wf-handle").exists()).toBe(false);
    expect(run.wrapper.find("svg g.wf-edge[role=button]").exists()).toBe(false);
  });
});

describe("the job picker of a group with many jobs", () => {
  const options = (wrapper: VueWrapper) => wrapper.findAll("select[name=node_job] option").map((o) => o.text());

  it("finds jobs by name on the server and keeps the node's own job listed", async () => {
    vi.mocked(getWorkflow).mockResolvedValue(workflow({ nodes: [{ key: "extract", job_id: 900 }], edges: [] }));
    vi.mocked(listJobs).mockResolvedValueOnce(page([job({ id: 12, job_group: 4, job_desc: "extract rows" })], { total: 1200 }));
    vi.mocked(getJob).mockResolvedValue(job({ id: 900, job_group: 4, job_desc: "the old extract" }));
    const { wrapper } = await mountView(WorkflowEditView, { path: "/workflows/3", props: { id: "3" } });
    expect(getJob).toHaveBeenCalledWith(900); // beyond the first page: read for its label
    expect(wrapper.find("svg [data-node=extract]").text()).toContain("#900 the old extract");
    expect((wrapper.find("select[name=node_job]").element as HTMLSelectElement).value).toBe("900");
    vi.mocked(listJobs).mockResolvedValueOnce(page([job({ id: 1100, job_group: 4, job_desc: "billing export" })], { total: 1 }));
    await wrapper.find("input[name=node_job_search]").setValue(" billing ");
    await new Promise((done) => setTimeout(done, 300));
    await flushPromises();
    expect(listJobs).toHaveBeenLastCalledWith({ job_group: 4, desc: "billing", limit: 50 });
    expect(options(wrapper)).toEqual(["Pick a job of the group", "#900 the old extract", "#1100 billing export"]);
    await wrapper.find("select[name=node_job]").setValue("1100");
    expect(wrapper.find("svg [data-node=extract]").text()).toContain("#1100 billing export");
    await wrapper.find("input[name=node_job_search]").setValue("");
    expect(options(wrapper)).toEqual(["Pick a job of the group", "#12 extract rows", "#900 the old extract", "#1100 billing export"]);
  });

  it("offers no search when the group's jobs were all read", async () => {
    const { wrapper } = await mountView(WorkflowEditView, { path: "/workflows/3", props: { id: "3" } });
    expect(wrapper.find("input[name=node_job_search]").exists()).toBe(false);
    expect(getJob).not.toHaveBeenCalled();
  });
});

describe("the run view's nodes", () => {
  it("shows when each node started and ended, and how long it took", async () => {
    const { wrapper } = await mountView(WorkflowRunView, { path: "/workflow-runs/41", props: { id: "41" } });
    const extract = wrapper.find("li[data-node-run=extract]");
    expect(extract.find("[data-testid=node-times]").text()).toMatch(/:\d\d:00.*→.*:\d\d:42/); // in the viewer's zone
    expect(extract.find("[data-testid=node-times] .sr-only").text()).toBe("Started");
    expect(extract.find("[data-testid=node-ended]").exists()).toBe(true);
    expect(extract.text()).toContain("42");
    // a running node has no end yet
    const late = wrapper.find("li[data-node-run=late]");
    expect(late.find("[data-testid=node-times]").exists()).toBe(true);
    expect(late.find("[data-testid=node-ended]").exists()).toBe(false);
  });

  it("lists a fan-out's items once opened, each with its state, try and its job run's log", async () => {
    const { wrapper } = await mountView(WorkflowRunView, { path: "/workflow-runs/41", props: { id: "41" } });
    const items = wrapper.find("li[data-node-run=files] [data-testid=fanout-items]");
    expect(items.find("summary").text()).toContain("3 items");
    expect(items.findAll("summary .badge").map((b) => b.text())).toEqual(["Waiting 1", "Success 1", "Failed 1"]);
    expect(items.find("li[data-item]").exists()).toBe(false); // listed only when opened
    (items.element as HTMLDetailsElement).open = true;
    await items.trigger("toggle");
    const rows = items.findAll("li[data-item]");
    expect(rows).toHaveLength(3);
    expect(rows[0]!.find("[data-testid=item-run-link]").attributes("href")).toBe("/runs/601");
    expect(rows[1]!.find(".badge").attributes("data-state")).toBe("failed");
    expect(rows[1]!.text()).toContain("try 3");
    expect(rows[1]!.find("[data-testid=item-run-link]").attributes("href")).toBe("/runs/602");
    expect(rows[1]!.text()).toContain("<i>no such file</i>"); // the message as text
    expect(rows[1]!.find("i").exists()).toBe(false);
    expect(rows[2]!.find("[data-testid=item-run-link]").exists()).toBe(false); // not started: no log yet
    (items.element as HTMLDetailsElement).open = false;
    await items.trigger("toggle");
    expect(items.find("li[data-item]").exists()).toBe(false);
  });
});
