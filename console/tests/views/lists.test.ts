// @vitest-environment happy-dom
// Component tests of the listings: jobs, runs, audit, dashboard (the API modules mocked).
import { flushPromises } from "@vue/test-utils";
import { beforeEach, describe, expect, it, vi } from "vitest";
import { listAudit } from "../../src/api/audit";
import { ApiError, type Schemas } from "../../src/api/client";
import { getDashboard } from "../../src/api/dashboard";
import { listGroups } from "../../src/api/groups";
import { deleteJob, listDelayed, listJobs, setJobStarted } from "../../src/api/jobs";
import { cancelRun, clearRuns, killRun, listRuns } from "../../src/api/runs";
import AuditView from "../../src/views/AuditView.vue";
import DashboardView from "../../src/views/DashboardView.vue";
import JobsView from "../../src/views/JobsView.vue";
import RunsView from "../../src/views/RunsView.vue";
import { auditEntry, delayed, group, job, page, run } from "./fixtures";
import { clickAndConfirm, mountView, toastTexts } from "./harness";

vi.mock("../../src/api/audit");
vi.mock("../../src/api/dashboard");
vi.mock("../../src/api/groups");
vi.mock("../../src/api/jobs");
vi.mock("../../src/api/runs");

describe("JobsView", () => {
  beforeEach(() => {
    vi.mocked(listGroups).mockResolvedValue(page([group()]));
    vi.mocked(listJobs).mockResolvedValue(page([job({ id: 1 }), job({ id: 2, job_desc: "cleanup", trigger_status: 1 })], { total: 45 }));
  });

  it("lists the jobs with the filters of the URL", async () => {
    const { wrapper } = await mountView(JobsView, { path: "/jobs?group=1&desc=rep&offset=20" });
    expect(listJobs).toHaveBeenCalledWith(expect.objectContaining({ job_group: 1, desc: "rep", offset: 20, limit: 20, sort: "id_desc" }));
    expect(wrapper.findAll("tr[data-job-id]").map((r) => r.attributes("data-job-id"))).toEqual(["1", "2"]);
    expect(wrapper.find("tr[data-job-id='1'] a.job-desc").text()).toBe("nightly report");
    expect(wrapper.find(".pager").text()).toContain("21");
  });

  it("writes the filters into the URL and goes back to the first page on a search", async () => {
    const { wrapper, router } = await mountView(JobsView, { path: "/jobs?offset=20" });
    await wrapper.find("input[name=author]").setValue("alice");
    await wrapper.find("form[role=search]").trigger("submit");
    await flushPromises();
    expect(listJobs).toHaveBeenLastCalledWith(expect.objectContaining({ author: "alice", offset: 0 }));
    expect(router.currentRoute.value.query).toEqual({ author: "alice" });
  });

  it("pages on with the pager", async () => {
    const { wrapper, router } = await mountView(JobsView, { path: "/jobs" });
    await wrapper.findAll(".pager button").at(1)!.trigger("click");
    await flushPromises();
    expect(listJobs).toHaveBeenLastCalledWith(expect.objectContaining({ offset: 20 }));
    expect(router.currentRoute.value.query).toEqual({ offset: "20" });
  });

  it("keeps the rows a page in the URL and resets the filters to their defaults", async () => {
    const { wrapper, router } = await mountView(JobsView, { path: "/jobs?status=1&sort=desc" });
    await wrapper.find(".pager select").setValue("50");
    await flushPromises();
    expect(listJobs).toHaveBeenLastCalledWith(expect.objectContaining({ trigger_status: 1, sort: "desc", limit: 50, offset: 0 }));
    expect(router.currentRoute.value.query).toEqual({ status: "1", sort: "desc", limit: "50" });
    await wrapper.findAll(".filter-actions button").filter((b) => b.text() === "Reset")[0]!.trigger("click");
    await flushPromises();
    expect(listJobs).toHaveBeenLastCalledWith(expect.objectContaining({ trigger_status: undefined, sort: "id_desc", limit: 50 }));
    expect(router.currentRoute.value.query).toEqual({ limit: "50" });
    await wrapper.find("select[name=sort]").setValue("next_time");
    await flushPromises();
    expect(listJobs).toHaveBeenLastCalledWith(expect.objectContaining({ sort: "next_time" }));
  });

  it("starts a stopped job with its switch", async () => {
    vi.mocked(setJobStarted).mockResolvedValue(job({ id: 1, trigger_status: 1 }));
    const { wrapper } = await mountView(JobsView, { path: "/jobs" });
    await wrapper.find("tr[data-job-id='1'] [data-testid=toggle]").trigger("click");
    await flushPromises();
    expect(setJobStarted).toHaveBeenCalledWith(1, true);
    expect(wrapper.find("tr[data-job-id='1'] [role=switch]").attributes("aria-checked")).toBe("true");
  });

  it("says how many jobs a bulk start changed and why the others did not; keeps those selected", async () => {
    vi.mocked(listJobs).mockResolvedValue(page([
      job({ id: 1 }), job({ id: 2, job_desc: "manual", schedule_type: "NONE", schedule_conf: null }), job({ id: 3, job_desc: "odd" }),
    ]));
    vi.mocked(setJobStarted).mockImplementation(async (id) => {
      if (id === 3) throw new ApiError(400, "the schedule of job 3 never fires again", "schedule_conf");
      return job({ id, trigger_status: 1 });
    });
    const { wrapper } = await mountView(JobsView, { path: "/jobs" });
    expect(wrapper.find("tr[data-job-id='2'] [data-testid=toggle]").attributes("disabled")).toBeDefined();
    expect(wrapper.find("tr[data-job-id='1'] [data-testid=toggle]").attributes("disabled")).toBeUndefined();
    await wrapper.find("input[aria-label='Select all on this page']").setValue(true);
    await wrapper.findAll(".bulk-bar button")[0]!.trigger("click");
    await flushPromises();
    expect(setJobStarted).toHaveBeenCalledTimes(2); // the manual-only job is not asked
    const result = wrapper.find("[data-testid=bulk-result]");
    expect(result.text()).toContain("Started 1 of 3 jobs.");
    expect(result.findAll("li").map((li) => li.text())).toEqual([
      "#2 manual: Manual only (schedule type None): use Run once", "#3 odd: the schedule of job 3 never fires again",
    ]);
    expect(wrapper.find(".bulk-bar").text()).toContain("2 selected");
  });

  it("refreshes itself every 10 s, but not while a dialog is open", async () => {
    vi.useFakeTimers({ toFake: ["setInterval", "clearInterval"] });
    try {
      const { wrapper } = await mountView(JobsView, { path: "/jobs" });
      expect(listJobs).toHaveBeenCalledTimes(1);
      vi.advanceTimersByTime(10_000);
      await flushPromises();
      expect(listJobs).toHaveBeenCalledTimes(2);
      await wrapper.findAll("tr[data-job-id='2'] button").filter((b) => b.text() === "Delete")[0]!.trigger("click");
      vi.advanceTimersByTime(10_000);
      expect(listJobs).toHaveBeenCalledTimes(2);
    } finally {
      vi.useRealTimers();
    }
  });

  it("deletes a job once confirmed and reloads", async () => {
    vi.mocked(deleteJob).mockResolvedValue(undefined);
    const { wrapper } = await mountView(JobsView, { path: "/jobs" });
    await clickAndConfirm(wrapper, wrapper.findAll("tr[data-job-id='2'] button").filter((b) => b.text() === "Delete")[0]!);
    expect(deleteJob).toHaveBeenCalledWith(2);
    expect(listJobs).toHaveBeenCalledTimes(2);
  });

  it("shows the API's refusal as an error toast", async () => {
    vi.mocked(setJobStarted).mockRejectedValue(new ApiError(403, "operator of group 1 required"));
    const { wrapper } = await mountView(JobsView, { path: "/jobs" });
    await wrapper.find("tr[data-job-id='1'] [data-testid=toggle]").trigger("click");
    await flushPromises();
    expect(toastTexts("error")).toEqual(["Not permitted: operator of group 1 required"]);
  });

  it("offers no write action to a viewer", async () => {
    const { wrapper } = await mountView(JobsView, { path: "/jobs", as: { role: "viewer" } });
    expect(wrapper.find("[data-testid=toggle]").exists()).toBe(false);
    expect(wrapper.find("[data-testid=new-job]").exists()).toBe(false);
    expect(wrapper.find("[data-testid=run-once]").exists()).toBe(false);
  });
});

describe("RunsView", () => {
  beforeEach(() => {
    vi.mocked(listGroups).mockResolvedValue(page([group()]));
    vi.mocked(listJobs).mockResolvedValue(page([job({ id: 1, job_desc: "nightly report" })]));
    vi.mocked(listRuns).mockResolvedValue(page([
      run({ id: 11, state: "running", duration_ms: null, handle_code: 0 }),
      run({ id: 12, state: "lost", handle_code: 500, handle_msg: "gone" }),
    ], { total: 1000, total_exact: false, next_cursor: "c2" }));
  });

  it("shows a failed trigger's reason in the message column, not the retry marker", async () => {
    vi.mocked(listRuns).mockResolvedValue(page([run({
      id: 13, state: "failed", handle_code: 0, handle_msg: null,
      trigger_msg: "Trigger type: Cron\n>>>>>>>>>>> Trigger Job <<<<<<<<<<<\nmsg: refused\n\n>>>>>>>>>>> Fail retry trigger <<<<<<<<<<<",
    })]));
    const { wrapper } = await mountView(RunsView, { path: "/runs" });
    expect(wrapper.find("tr[data-run-id='13'] .msg-cell").text()).toBe("msg: refused");
  });

  it("reaches the oldest runs by listing them oldest first", async () => {
    const { wrapper } = await mountView(RunsView, { path: "/runs" });
    await wrapper.find("select[name=order]").setValue("oldest");
    await flushPromises();
    expect(listRuns).toHaveBeenLastCalledWith(expect.objectContaining({ order: "oldest", cursor: undefined }));
  });

  it("lists the delayed runs too when the state filter is scheduled", async () => {
    vi.mocked(listDelayed).mockResolvedValue([delayed({ id: 8, job_id: 1 })]);
    const { wrapper } = await mountView(RunsView, { path: "/runs?state=scheduled&group=1" });
    expect(listDelayed).toHaveBeenCalledWith({ job_group: 1, job_id: undefined });
    expect(wrapper.find("[data-testid=delayed-runs] tr[data-fire-id='8']").text()).toContain("nightly report");
  });

  it("shows a refused filter at the filter and no stale rows under it", async () => {
    vi.mocked(listRuns).mockRejectedValueOnce(new ApiError(422, "job_id: Input should be a valid integer", "job_id"));
    const { wrapper } = await mountView(RunsView, { path: "/runs?job=abc" });
    expect(wrapper.findAll("tr[data-run-id]")).toHaveLength(0);
    expect(wrapper.find("[data-testid=list-error]").text()).toBe("job_id: Input should be a valid integer");
    expect(wrapper.find("label.invalid select[name=job]").exists()).toBe(true);
    expect(wrapper.find("td.empty").exists()).toBe(false);
    expect(toastTexts("error")).toEqual([]);
    await wrapper.find("select[name=job]").setValue("1"); // the job selector offers the jobs by name
    expect(wrapper.find("select[name=job] option[value='1']").text()).toBe("#1 nightly report");
    await wrapper.find("form[role=search]").trigger("submit");
    await flushPromises();
    expect(listRuns).toHaveBeenLastCalledWith(expect.objectContaining({ job_id: 1 }));
    expect(wrapper.find("[data-testid=list-error]").exists()).toBe(false);
    expect(wrapper.findAll("tr[data-run-id]")).toHaveLength(2);
  });

  it("shows each run with the state the API gives", async () => {
    const { wrapper } = await mountView(RunsView, { path: "/runs?state=lost&job=1" });
    expect(listRuns).toHaveBeenCalledWith(expect.objectContaining({ state: ["lost"], job_id: 1, cursor: undefined }));
    expect(wrapper.find("tr[data-run-id='11'] .badge").attributes("data-state")).toBe("running");
    expect(wrapper.find("tr[data-run-id='12'] .badge").attributes("data-state")).toBe("lost");
    expect(wrapper.find("tr[data-run-id='12'] .job-desc").text()).toBe("nightly report");
    expect(wrapper.find(".pager").text()).toContain("of about 1,000"); // an estimate, with digit grouping
    expect(wrapper.find(".pager").text()).toMatch(/about/i);
  });

  it("walks pages with the API's cursor and back", async () => {
    const { wrapper } = await mountView(RunsView, { path: "/runs" });
    const [prev, next] = wrapper.findAll(".pager button");
    await next!.trigger("click");
    await flushPromises();
    expect(listRuns).toHaveBeenLastCalledWith(expect.objectContaining({ cursor: "c2" }));
    await prev!.trigger("click");
    await flushPromises();
    expect(listRuns).toHaveBeenLastCalledWith(expect.objectContaining({ cursor: undefined }));
  });

  it("kills a running run once confirmed (only a running one has the button)", async () => {
    vi.mocked(killRun).mockResolvedValue({ killed: true, msg: "" });
    const { wrapper } = await mountView(RunsView, { path: "/runs" });
    expect(wrapper.find("tr[data-run-id='12'] .danger-text").exists()).toBe(false);
    await clickAndConfirm(wrapper, wrapper.find("tr[data-run-id='11'] .danger-text"));
    expect(killRun).toHaveBeenCalledWith(11);
    expect(toastTexts("ok")).toEqual(["Run killed."]);
  });

  it("shows a queued run with its state and cancels it once confirmed", async () => {
    vi.mocked(listRuns).mockResolvedValue(page([
      run({ id: 21, state: "queued", trigger_code: 0, handle_code: 0, trigger_msg: "queued: limit reached: group:1" }),
      run({ id: 22, state: "running", handle_code: 0, duration_ms: null }),
    ]));
    vi.mocked(cancelRun).mockResolvedValue(run({ id: 21, state: "killed" }));
    const { wrapper } = await mountView(RunsView, { path: "/runs?state=queued" });
    expect(wrapper.find("tr[data-run-id='21'] [data-state=queued]").text()).toBe("Queued");
    expect(wrapper.find("tr[data-run-id='22'] [data-testid=cancel-run]").exists()).toBe(false);
    await clickAndConfirm(wrapper, wrapper.find("tr[data-run-id='21'] [data-testid=cancel-run]"));
    expect(cancelRun).toHaveBeenCalledWith(21);
    expect(toastTexts("ok")).toEqual(["Run cancelled."]);
  });

  it("clears the runs of a rule once confirmed", async () => {
    vi.mocked(clearRuns).mockResolvedValue({ deleted: 7 });
    const { wrapper } = await mountView(RunsView, { path: "/runs" });
    await wrapper.findAll(".page-head button")[0]!.trigger("click");
    await wrapper.find("select[name=clear_rule]").setValue("keep_last_1k");
    await wrapper.find("#clear-form").trigger("submit");
    await wrapper.find("[data-testid=confirm-yes]").trigger("click");
    await flushPromises();
    expect(clearRuns).toHaveBeenCalledWith({ rule: "keep_last_1k", job_group: undefined });
    expect(toastTexts("ok")[0]).toContain("7");
  });

  it("shows a listing it could not reach above the rows it had", async () => {
    const { wrapper } = await mountView(RunsView, { path: "/runs" });
    vi.mocked(listRuns).mockRejectedValueOnce(new ApiError(0, "Failed to fetch"));
    await wrapper.findAll(".filter-actions button").filter((b) => b.text() === "Refresh")[0]!.trigger("click");
    await flushPromises();
    expect(wrapper.find("[data-testid=list-error]").text()).toBe("Cannot reach the admin.");
    expect(wrapper.findAll("tr[data-run-id]")).toHaveLength(2);
  });
});

describe("AuditView", () => {
  beforeEach(() => {
    vi.mocked(listAudit).mockResolvedValue(page([
      auditEntry({ id: 1, details: { before: "a", after: "b" } }),
      auditEntry({ id: 2, outcome: "failure", action: "user.delete" }),
    ], { total: 120 }));
  });

  it("lists the entries 50 a page with the URL's filters", async () => {
    const { wrapper } = await mountView(AuditView, { path: "/audit?outcome=failure" });
    expect(listAudit).toHaveBeenCalledWith(expect.objectContaining({ outcome: "failure", offset: 0, limit: 50 }));
    expect(wrapper.findAll("tbody .badge").map((b) => b.classes())).toEqual([
      expect.arrayContaining(["st-success"]), expect.arrayContaining(["st-failed"]),
    ]);
  });

  it("filters by actor from the search form (the filter goes into the URL)", async () => {
    const { wrapper, router } = await mountView(AuditView, { path: "/audit" });
    await wrapper.find("input[name=actor]").setValue("alice");
    await wrapper.find("form[role=search]").trigger("submit");
    await flushPromises();
    expect(listAudit).toHaveBeenLastCalledWith(expect.objectContaining({ actor: "alice" }));
    expect(router.currentRoute.value.query).toEqual({ actor: "alice" });
  });

  it("opens an entry's details", async () => {
    const { wrapper } = await mountView(AuditView, { path: "/audit" });
    expect(wrapper.find("pre.msg").exists()).toBe(false);
    await wrapper.find("button[aria-expanded]").trigger("click");
    expect(JSON.parse(wrapper.find("pre.msg").text())).toEqual({ before: "a", after: "b" });
  });

  it("shows a refused listing above the table", async () => {
    vi.mocked(listAudit).mockRejectedValue(new ApiError(403, "admin only"));
    const { wrapper } = await mountView(AuditView, { path: "/audit" });
    expect(wrapper.find("[data-testid=list-error]").text()).toBe("Not permitted: admin only");
  });
});

describe("DashboardView", () => {
  const dashboard: Schemas["DashboardOut"] = {
    job_count: 12, executor_count: 3, runs_today: 40, runs_today_success: 30, runs_today_fail: 4, runs_today_running: 2,
    runs_today_scheduled: 4, chart: [{ day: "2026-01-01", success: 30, fail: 4, running: 2 }],
    recent_failures: [run({ id: 77, state: "timed_out" })],
    nodes: [{ node_id: "node-a", alive: true, held_jobs: 5, fires_last_hour: 60, lateness_avg_ms: 3.4, lateness_max_ms: null }],
  };

  beforeEach(() => {
    vi.mocked(listGroups).mockResolvedValue(page([group()]));
    vi.mocked(getDashboard).mockResolvedValue(dashboard);
  });

  it("shows the counts, the recent failures with their state and the nodes", async () => {
    const { wrapper } = await mountView(DashboardView);
    expect(getDashboard).toHaveBeenCalledWith({ days: 7 });
    expect(wrapper.find("[data-testid=stat-jobs]").text()).toBe("12");
    expect(wrapper.find(".fail-list .badge").attributes("data-state")).toBe("timed_out");
    expect(wrapper.find("tbody tr").text()).toContain("node-a");
    expect(wrapper.find("tbody tr").text()).toContain("3 ms");
  });

  it("labels a large axis compactly and shows the success ratio on request", async () => {
    vi.mocked(getDashboard).mockResolvedValue({ ...dashboard, chart: [{ day: "2026-01-01", success: 10_188, fail: 0, running: 0 }] });
    const { wrapper } = await mountView(DashboardView);
    expect(wrapper.findAll("[data-testid=y-tick]").map((x) => x.text())).toEqual(["0", "5K", "10K", "15K"]);
    await wrapper.find("[data-testid=chart-ratio]").trigger("click");
    expect(wrapper.findAll("[data-testid=y-tick]").map((x) => x.text())).toEqual(["0%", "25%", "50%", "75%", "100%"]);
    expect(wrapper.find("svg title").text()).toContain("(100.0%)");
  });

  it("asks for another span of days", async () => {
    const { wrapper } = await mountView(DashboardView);
    await wrapper.findAll(".seg button")[1]!.trigger("click");
    await flushPromises();
    expect(getDashboard).toHaveBeenLastCalledWith({ days: 30 });
    expect(wrapper.findAll(".seg button")[1]!.attributes("aria-pressed")).toBe("true");
  });

  it("shows a failure as an error toast", async () => {
    vi.mocked(getDashboard).mockRejectedValue(new ApiError(0, "Failed to fetch"));
    const { wrapper } = await mountView(DashboardView);
    expect(toastTexts("error")).toHaveLength(1);
    expect(wrapper.find("[data-testid=stat-jobs]").exists()).toBe(false);
  });
});
