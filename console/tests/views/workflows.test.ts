// @vitest-environment happy-dom
// The Workflows pages: the list and its run dialog, the graph editor (nodes, edges, a refusal
// pointing at its node), and the run view (states, node runs, repairs naming the round).
import { flushPromises } from "@vue/test-utils";
import { beforeEach, describe, expect, it, vi } from "vitest";
import { ApiError } from "../../src/api/client";
import { listGroups } from "../../src/api/groups";
import { listJobs } from "../../src/api/jobs";
import {
  createWorkflow, getWorkflow, getWorkflowRun, getWorkflowSchedule, putWorkflowSchedule, listWorkflows, markNodeSucceeded, rerunFromNode, retryWorkflowRun, stopWorkflowRun,
  triggerWorkflow, updateWorkflow, validateWorkflow, type NodeRun, type Workflow, type WorkflowRun, type WorkflowSchedule,
} from "../../src/api/workflows";
import WorkflowEditView from "../../src/views/WorkflowEditView.vue";
import WorkflowRunView from "../../src/views/WorkflowRunView.vue";
import WorkflowsView from "../../src/views/WorkflowsView.vue";
import { group, job, page } from "./fixtures";
import { clickAndConfirm, mountView } from "./harness";

vi.mock("../../src/api/groups");
vi.mock("../../src/api/jobs");
vi.mock("../../src/api/workflows");

function workflow(over: Partial<Workflow> = {}): Workflow {
  return {
    id: 3, name: "nightly", job_group: 4, description: "the nightly load", version: 2, created_by: "ana", created_at: 0,
    updated_at: Date.UTC(2026, 0, 1),
    nodes: [{ key: "extract", job_id: 12, result_json: true }, { key: "route", kind: "decision" }, { key: "load", job_id: 13 }],
    edges: [{ from: "extract", to: "route" }, { from: "route", to: "load", when: "rows > 10" }],
    ...over,
  };
}

function nodeRun(over: Partial<NodeRun> = {}): NodeRun {
  return {
    key: "extract", kind: "job", job_id: 12, state: "success", run_id: 501, attempt: 1, started_at: Date.UTC(2026, 0, 1),
    ended_at: Date.UTC(2026, 0, 1, 0, 0, 2), duration_ms: 2000, message: "", skip_reason: null, marked_succeeded: false, items: null, ...over,
  };
}

function wfRun(over: Partial<WorkflowRun> = {}): WorkflowRun {
  return {
    id: 41, workflow_id: 3, version: 2, job_group: 4, state: "failed", triggered_by: "ana", started_at: Date.UTC(2026, 0, 1),
    ended_at: Date.UTC(2026, 0, 1, 0, 1), round: 1, message: "node 'load' failed", context: { rows: 1234 },
    nodes: [
      nodeRun(),
      nodeRun({ key: "route", kind: "decision", job_id: null, run_id: null, message: "took load" }),
      nodeRun({ key: "load", job_id: 13, state: "failed", run_id: 502, attempt: 2, message: "<b>disk full</b>" }),
    ],
    edges: [{ from: "extract", to: "route" }, { from: "route", to: "load", when: "rows > 10" }],
    ...over,
  };
}

function schedule(over: Partial<WorkflowSchedule> = {}): WorkflowSchedule {
  return {
    workflow_id: 3, schedule_type: "NONE", schedule_conf: "", schedule_timezone: null, misfire_strategy: "DO_NOTHING",
    overlap: "skip", params: {}, enabled: false, next_fire_at: null, next_times: [], queued: false, last_fire_at: null,
    last_result: "", updated_by: null, updated_at: null, spent: false, ...over,
  };
}

beforeEach(() => {
  vi.mocked(getWorkflowSchedule).mockResolvedValue(schedule());
  vi.mocked(listGroups).mockResolvedValue(page([group({ id: 4, title: "Reports" })]));
  vi.mocked(listJobs).mockResolvedValue(page([job({ id: 12, job_group: 4, job_desc: "extract rows" }), job({ id: 13, job_group: 4, job_desc: "load" })]));
  vi.mocked(listWorkflows).mockResolvedValue(page([workflow()]));
  vi.mocked(getWorkflow).mockResolvedValue(workflow());
  vi.mocked(getWorkflowRun).mockResolvedValue(wfRun());
});

describe("WorkflowsView", () => {
  it("lists the workflows and starts a run with a JSON context, then opens it", async () => {
    vi.mocked(triggerWorkflow)
      .mockRejectedValueOnce(new ApiError(409, "workflow 3 has a run going (40) and its overlap rule, skip, runs one at a time: wait for it, stop it, or trigger with force", "force"))
      .mockResolvedValue({ workflow_run_id: 41 });
    const { wrapper, router } = await mountView(WorkflowsView, { path: "/workflows" });
    const row = wrapper.find("tr[data-workflow='3']");
    expect(row.text()).toContain("nightly");
    expect(row.text()).toContain("Reports");
    await row.find("[data-testid=wf-run]").trigger("click");
    await wrapper.find("textarea[name=params]").setValue("[1]");
    await wrapper.find("#wf-trigger-form").trigger("submit");
    expect(wrapper.find("#wf-trigger-form .form-error").text()).toContain("JSON object");
    expect(triggerWorkflow).not.toHaveBeenCalled();
    await wrapper.find("textarea[name=params]").setValue('{"day": "20261201"}');
    await wrapper.find("#wf-trigger-form").trigger("submit");
    await flushPromises();
    expect(triggerWorkflow).toHaveBeenLastCalledWith(3, { day: "20261201" }, false);
    // a run is going and the overlap rule runs one at a time: said in the dialog; forced, it starts
    expect(wrapper.find("#wf-trigger-form .form-error").text()).toContain("run going (40)");
    await wrapper.find("[data-testid=wf-trigger-force]").setValue(true);
    await wrapper.find("#wf-trigger-form").trigger("submit");
    await flushPromises();
    expect(triggerWorkflow).toHaveBeenLastCalledWith(3, { day: "20261201" }, true);
    expect(router.currentRoute.value.path).toBe("/workflow-runs/41");
  });

  it("offers a viewer no run, new or delete", async () => {
    const { wrapper } = await mountView(WorkflowsView, { path: "/workflows", as: { role: "viewer" } });
    expect(wrapper.find("[data-testid=new-workflow]").exists()).toBe(false);
    expect(wrapper.find("[data-testid=wf-run]").exists()).toBe(false);
  });
});

describe("WorkflowEditView", () => {
  it("draws the graph, edits a node picked on it, adds a decision and saves over the version read", async () => {
    vi.mocked(updateWorkflow).mockResolvedValue(workflow({ version: 3 }));
    const { wrapper } = await mountView(WorkflowEditView, { path: "/workflows/3", props: { id: "3" } });
    const boxes = wrapper.findAll("svg [data-node]");
    expect(boxes.map((b) => b.attributes("data-node"))).toEqual(["extract", "route", "load"]);
    expect(wrapper.find("svg [data-node=extract]").text()).toContain("#12 extract rows");
    expect(wrapper.find(".wf-edge-label").text()).toBe("rows > 10");
    await wrapper.find("svg [data-node=load]").trigger("click");
    expect((wrapper.find("select[name=node_job]").element as HTMLSelectElement).value).toBe("13");
    await wrapper.find("select[name=node_on_failure]").setValue("skip_descendants");
    await wrapper.find("[data-testid=add-decision]").trigger("click");
    expect(wrapper.find("svg [data-node=decision]").exists()).toBe(true);
    await wrapper.find("input[name=node_key]").setValue("check");
    await wrapper.find("input[name=node_key]").trigger("change");
    await wrapper.find("[data-testid=add-job]").trigger("click");
    await wrapper.find("select[name=node_job]").setValue("12");
    await wrapper.find("input[name=edge_when_3]").setValue("rows | default(0) > 0");
    await wrapper.find("#wf-form").trigger("submit");
    await flushPromises();
    const [id, body] = vi.mocked(updateWorkflow).mock.calls[0]!;
    expect(id).toBe(3);
    expect(body).toMatchObject({ name: "nightly", job_group: 4, version: 2 });
    expect(body.nodes).toEqual([
      { key: "extract", job_id: 12, result_json: true }, { key: "route", kind: "decision" },
      { key: "load", job_id: 13, on_failure: "skip_descendants" }, { key: "check", kind: "decision" }, { key: "node", job_id: 12 },
    ]);
    expect(body.edges).toEqual([
      { from: "extract", to: "route" }, { from: "route", to: "load", when: "rows > 10" },
      { from: "load", to: "check" }, { from: "check", to: "node", when: "rows | default(0) > 0" },
    ]);
  });

  it("shows a refusal above the form and at the node it names", async () => {
    vi.mocked(updateWorkflow).mockRejectedValue(new ApiError(422, "nodes[2].job_id (node 'load'): job 13 does not exist or is in a group you may not operate", "nodes[2].job_id"));
    const { wrapper } = await mountView(WorkflowEditView, { path: "/workflows/3", props: { id: "3" } });
    await wrapper.find("#wf-form").trigger("submit");
    await flushPromises();
    expect(wrapper.find("[data-testid=wf-refusal]").text()).toContain("node 'load'");
    expect(wrapper.find("svg [data-node=load]").classes()).toContain("selected");
    expect(wrapper.find("[data-testid=node-fields] .field-error").text()).toContain("job 13 does not exist");
  });

  it("validates without saving: the summary as text, or the refusal at the node it names", async () => {
    vi.mocked(validateWorkflow)
      .mockResolvedValueOnce({ valid: true, nodes: 3, edges: 2, order: ["extract", "route", "load"], roots: ["extract"] })
      .mockRejectedValueOnce(new ApiError(422, "nodes[0].job_id (node 'extract'): job 12 does not exist or is in a group you may not operate", "nodes[0].job_id"));
    const { wrapper } = await mountView(WorkflowEditView, { path: "/workflows/3", props: { id: "3" } });
    await wrapper.find("[data-testid=wf-validate]").trigger("click");
    await flushPromises();
    const [body, id] = vi.mocked(validateWorkflow).mock.calls[0]!;
    expect(id).toBe(3);
    expect(body).toMatchObject({ name: "nightly", job_group: 4, version: 2, edges: workflow().edges });
    expect(wrapper.find("[data-testid=wf-valid]").text()).toBe("Valid (nodes: 3, edges: 2; starts at extract). Nothing was saved yet.");
    expect(updateWorkflow).not.toHaveBeenCalled();
    await wrapper.find("svg [data-node=load]").trigger("click");
    await wrapper.find("select[name=node_on_failure]").setValue("continue");
    expect(wrapper.find("[data-testid=wf-valid]").exists()).toBe(false); // an edit makes it stale
    await wrapper.find("[data-testid=wf-validate]").trigger("click");
    await flushPromises();
    expect(wrapper.find("[data-testid=wf-refusal]").text()).toContain("node 'extract'");
    expect(wrapper.find("svg [data-node=extract]").classes()).toContain("selected");
    expect(wrapper.find("[data-testid=node-fields] .field-error").text()).toContain("job 12 does not exist");
    expect(updateWorkflow).not.toHaveBeenCalled();
  });

  it("creates a workflow and goes to its page", async () => {
    vi.mocked(createWorkflow).mockResolvedValue(workflow({ id: 9, version: 1 }));
    const { wrapper, router } = await mountView(WorkflowEditView, { path: "/workflows/new" });
    await wrapper.find("input[name=name]").setValue("daily");
    await wrapper.find("select[name=node_job]").setValue("12");
    await wrapper.find("#wf-form").trigger("submit");
    await flushPromises();
    expect(createWorkflow).toHaveBeenCalledWith(expect.objectContaining({
      name: "daily", job_group: 4, nodes: [{ key: "start", job_id: 12 }], edges: [], version: null }));
    expect(router.currentRoute.value.path).toBe("/workflows/9");
  });
});

describe("WorkflowScheduleForm", () => {
  it("sets a cron schedule, started, and shows the next fire times and the last fire", async () => {
    vi.mocked(putWorkflowSchedule).mockRejectedValueOnce(new ApiError(422, "schedule_conf: bad cron", "schedule_conf"));
    vi.mocked(putWorkflowSchedule).mockResolvedValueOnce(schedule({
      schedule_type: "CRON", schedule_conf: "0 0 2 * * ?", enabled: true, overlap: "queue_one", next_fire_at: Date.UTC(2026, 0, 2, 2),
      next_times: [Date.UTC(2026, 0, 2, 2)], last_result: "2026-01-01T02:00:00.000Z: started run 40", params: { day: "x" } }));
    const { wrapper } = await mountView(WorkflowEditView, { path: "/workflows/3", props: { id: "3" } });
    const form = wrapper.find("[data-testid=wf-schedule]");
    await form.find("select[name=schedule_type]").setValue("CRON");
    await form.find("input[name=schedule_conf]").setValue("0 0 2 * * ?");
    await form.find("select[name=overlap]").setValue("queue_one");
    await form.find("input[name=params]").setValue('{"day": "x"}');
    await form.find("input[name=enabled]").setValue(true);
    await form.trigger("submit");
    await flushPromises();
    expect(form.find(".field-error").text()).toContain("bad cron");
    await form.trigger("submit");
    await flushPromises();
    expect(putWorkflowSchedule).toHaveBeenLastCalledWith(3, {
      schedule_type: "CRON", schedule_conf: "0 0 2 * * ?", schedule_timezone: null, misfire_strategy: "DO_NOTHING",
      overlap: "queue_one", params: { day: "x" }, enabled: true });
    expect(form.find("[data-testid=wf-schedule-facts]").text()).toContain("started run 40");
  });
});

describe("WorkflowRunView", () => {
  it("shows the nodes with their state, their job runs, and messages as text", async () => {
    const { wrapper } = await mountView(WorkflowRunView, { path: "/workflow-runs/41", props: { id: "41" } });
    expect(wrapper.find("[data-testid=wf-run-state]").attributes("data-state")).toBe("failed");
    expect(wrapper.find("svg [data-node=load]").classes()).toContain("st-failed");
    expect(wrapper.find("svg [data-node=load]").text()).toContain("try 2");
    const load = wrapper.find("li[data-node-run=load]");
    expect(load.find("[data-testid=node-run-link]").attributes("href")).toBe("/runs/502");
    expect(load.text()).toContain("<b>disk full</b>");
    expect(load.find("b").exists()).toBe(false);
    expect(wrapper.find("[data-testid=wf-context]").text()).toContain('"rows": 1234');
    // a decision is never marked succeeded; an ended run may be re-run from any node
    expect(wrapper.find("li[data-node-run=route] [data-testid=node-mark]").exists()).toBe(false);
    expect(wrapper.find("li[data-node-run=route] [data-testid=node-rerun]").exists()).toBe(true);
    expect(wrapper.find("[data-testid=wf-stop]").exists()).toBe(false);
  });

  it("repairs with the round it read: retry, mark succeeded, re-run", async () => {
    vi.mocked(retryWorkflowRun).mockResolvedValue(wfRun({ state: "running", round: 2 }));
    vi.mocked(markNodeSucceeded).mockResolvedValue(wfRun({ round: 3 }));
    vi.mocked(rerunFromNode).mockResolvedValue(wfRun({ round: 4 }));
    const { wrapper } = await mountView(WorkflowRunView, { path: "/workflow-runs/41", props: { id: "41" } });
    await clickAndConfirm(wrapper, wrapper.find("li[data-node-run=load] [data-testid=node-mark]"));
    expect(markNodeSucceeded).toHaveBeenCalledWith(41, "load", 1);
    await clickAndConfirm(wrapper, wrapper.find("li[data-node-run=extract] [data-testid=node-rerun]"));
    expect(rerunFromNode).toHaveBeenCalledWith(41, "extract", 3);
    await clickAndConfirm(wrapper, wrapper.find("[data-testid=wf-retry]"));
    expect(retryWorkflowRun).toHaveBeenCalledWith(41, 4);
    expect(wrapper.find("[data-testid=wf-run-state]").attributes("data-state")).toBe("running");
    expect(wrapper.find("[data-testid=wf-stop]").exists()).toBe(true);
  });

  it("stops a running run; a viewer gets no repairs", async () => {
    vi.mocked(getWorkflowRun).mockResolvedValue(wfRun({ state: "running", ended_at: null, round: 0,
      nodes: [nodeRun({ state: "running", ended_at: null, duration_ms: null })] }));
    vi.mocked(stopWorkflowRun).mockResolvedValue(wfRun({ state: "stopped" }));
    const { wrapper } = await mountView(WorkflowRunView, { path: "/workflow-runs/41", props: { id: "41" } });
    expect(wrapper.find("[data-testid=node-rerun]").exists()).toBe(false);
    await clickAndConfirm(wrapper, wrapper.find("[data-testid=wf-stop]"));
    expect(stopWorkflowRun).toHaveBeenCalledWith(41, 0);
    wrapper.unmount();
    const viewer = await mountView(WorkflowRunView, { path: "/workflow-runs/41", props: { id: "41" }, as: { role: "viewer" } });
    expect(viewer.wrapper.find("[data-testid=wf-stop]").exists()).toBe(false);
    expect(viewer.wrapper.find("[data-testid=node-mark]").exists()).toBe(false);
  });
});
