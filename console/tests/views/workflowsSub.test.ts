// @vitest-environment happy-dom
// Sub-workflow nodes, one-shot schedules and workflows declared in code in the console: the editor
// picks a workflow of the group for a sub-workflow node, the run view links a node's child run and
// a child run its parent, a ONCE schedule is saved with its zone, a declared workflow is read-only.
import { flushPromises } from "@vue/test-utils";
import { beforeEach, describe, expect, it, vi } from "vitest";
import { listGroups } from "../../src/api/groups";
import { listJobs } from "../../src/api/jobs";
import {
  getWorkflow, getWorkflowRun, getWorkflowSchedule, listWorkflows, putWorkflowSchedule, updateWorkflow,
  type NodeRun, type Workflow, type WorkflowRun, type WorkflowSchedule,
} from "../../src/api/workflows";
import WorkflowEditView from "../../src/views/WorkflowEditView.vue";
import WorkflowRunView from "../../src/views/WorkflowRunView.vue";
import { group, job, page } from "./fixtures";
import { mountView } from "./harness";

vi.mock("../../src/api/groups");
vi.mock("../../src/api/jobs");
vi.mock("../../src/api/workflows");

function workflow(over: Partial<Workflow> = {}): Workflow {
  return {
    id: 3, name: "nightly", job_group: 4, description: "", version: 2, created_by: "ana", created_at: 0, updated_at: 0,
    managed_by: null, nodes: [{ key: "extract", job_id: 12 }], edges: [], ...over,
  };
}

function nodeRun(over: Partial<NodeRun> = {}): NodeRun {
  return {
    key: "extract", kind: "job", job_id: 12, workflow_id: null, state: "success", run_id: 501, attempt: 1, started_at: 0,
    ended_at: 2000, duration_ms: 2000, message: "", skip_reason: null, marked_succeeded: false, items: null, ...over,
  };
}

function wfRun(over: Partial<WorkflowRun> = {}): WorkflowRun {
  return {
    id: 41, workflow_id: 3, version: 2, job_group: 4, state: "running", triggered_by: "ana", started_at: 0, ended_at: null,
    parent_run_id: null, round: 0, message: "", context: {},
    nodes: [nodeRun(), nodeRun({ key: "part", kind: "subworkflow", job_id: null, workflow_id: 5, run_id: 77, state: "running" })],
    edges: [{ from: "extract", to: "part" }], ...over,
  };
}

function schedule(over: Partial<WorkflowSchedule> = {}): WorkflowSchedule {
  return {
    workflow_id: 3, schedule_type: "NONE", schedule_conf: "", schedule_timezone: null, misfire_strategy: "DO_NOTHING",
    overlap: "skip", params: {}, enabled: false, next_fire_at: null, next_times: [], queued: false, spent: false,
    last_fire_at: null, last_result: "", updated_by: null, updated_at: null, ...over,
  };
}

beforeEach(() => {
  vi.mocked(getWorkflowSchedule).mockResolvedValue(schedule());
  vi.mocked(listGroups).mockResolvedValue(page([group({ id: 4, title: "Reports" })]));
  vi.mocked(listJobs).mockResolvedValue(page([job({ id: 12, job_group: 4, job_desc: "extract rows" })]));
  vi.mocked(listWorkflows).mockResolvedValue(page([workflow(), workflow({ id: 5, name: "part" })]));
  vi.mocked(getWorkflow).mockResolvedValue(workflow());
  vi.mocked(getWorkflowRun).mockResolvedValue(wfRun());
});

describe("sub-workflow nodes", () => {
  it("the editor picks a workflow of the group (not this one) and saves its id", async () => {
    vi.mocked(updateWorkflow).mockResolvedValue(workflow({ version: 3 }));
    const { wrapper } = await mountView(WorkflowEditView, { path: "/workflows/3", props: { id: "3" } });
    await wrapper.find("[data-testid=add-subworkflow]").trigger("click");
    const options = wrapper.findAll("select[name=node_workflow] option").map((o) => o.attributes("value"));
    expect(options).toEqual(["", "5"]);
    expect(wrapper.find("select[name=node_job]").exists()).toBe(false);
    await wrapper.find("select[name=node_workflow]").setValue("5");
    await wrapper.find("input[name=node_retries]").setValue("1");
    expect(wrapper.find("svg [data-node=subworkflow]").text()).toContain("#5 part");
    await wrapper.find("#wf-form").trigger("submit");
    await flushPromises();
    const [, body] = vi.mocked(updateWorkflow).mock.calls[0]!;
    expect(body.nodes[1]).toEqual({ key: "subworkflow", kind: "subworkflow", workflow_id: 5, retries: 1 });
  });

  it("the run view links a node's child run, and a child run its parent", async () => {
    const { wrapper } = await mountView(WorkflowRunView, { path: "/workflow-runs/41", props: { id: "41" } });
    const part = wrapper.find("li[data-node-run=part]");
    expect(part.find("[data-testid=node-child-run]").attributes("href")).toBe("/workflow-runs/77");
    expect(part.find("[data-testid=node-run-link]").exists()).toBe(false);
    vi.mocked(getWorkflowRun).mockResolvedValue(wfRun({ id: 77, workflow_id: 5, parent_run_id: 41 }));
    const child = await mountView(WorkflowRunView, { path: "/workflow-runs/77", props: { id: "77" } });
    expect(child.wrapper.find("[data-testid=wf-parent-run]").attributes("href")).toBe("/workflow-runs/41");
  });
});

describe("declared workflows and one-shot schedules", () => {
  it("a workflow declared in code is read-only", async () => {
    vi.mocked(getWorkflow).mockResolvedValue(workflow({ managed_by: "code" }));
    const { wrapper } = await mountView(WorkflowEditView, { path: "/workflows/3", props: { id: "3" } });
    expect(wrapper.find("[data-testid=wf-declared]").exists()).toBe(true);
    expect(wrapper.find("[data-testid=wf-save]").exists()).toBe(false);
    expect(wrapper.find("[data-testid=add-job]").exists()).toBe(false);
  });

  it("a ONCE schedule is saved with its time and zone, and shows when it is spent", async () => {
    vi.mocked(putWorkflowSchedule).mockResolvedValue(schedule({
      schedule_type: "ONCE", schedule_conf: "2026-12-01T02:00:00", schedule_timezone: "Asia/Shanghai", enabled: true, spent: true }));
    const { wrapper } = await mountView(WorkflowEditView, { path: "/workflows/3", props: { id: "3" } });
    const form = wrapper.find("[data-testid=wf-schedule]");
    await form.find("select[name=schedule_type]").setValue("ONCE");
    await form.find("input[name=schedule_conf]").setValue("2026-12-01 02:00");
    await form.find("input[name=schedule_timezone]").setValue("Asia/Shanghai");
    await form.find("input[name=enabled]").setValue(true);
    await form.trigger("submit");
    await flushPromises();
    expect(putWorkflowSchedule).toHaveBeenLastCalledWith(3, expect.objectContaining({
      schedule_type: "ONCE", schedule_conf: "2026-12-01 02:00", schedule_timezone: "Asia/Shanghai", enabled: true }));
    expect(form.find("[data-testid=wf-schedule-spent]").exists()).toBe(true);
  });
});
