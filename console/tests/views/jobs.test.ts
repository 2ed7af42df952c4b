// @vitest-environment happy-dom
// Component tests of one job and its runs: editor, trigger dialog, run detail, GLUE (the API modules mocked).
import { flushPromises, mount } from "@vue/test-utils";
import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import { defineComponent, h } from "vue";
import openapi from "../../openapi.json";
import { ApiError } from "../../src/api/client";
import { listCalendars } from "../../src/api/calendars";
import { getGlue, listGlueVersions, restoreGlueVersion, saveGlue } from "../../src/api/glue";
import { getGroup, listGroups } from "../../src/api/groups";
import {
  cancelDelayed, createJob, getJob, listDelayed, previewSchedule, setJobStarted, triggerJob, triggerJobAt, updateJob,
} from "../../src/api/jobs";
import { getRun, getRunAttempts, getRunLog, killRun, listRuns } from "../../src/api/runs";
import TriggerDialog from "../../src/components/TriggerDialog.vue";
import { locale } from "../../src/i18n";
import { session } from "../../src/stores/session";
import { toasts } from "../../src/stores/toast";
import GlueView from "../../src/views/GlueView.vue";
import JobEditView from "../../src/views/JobEditView.vue";
import RunDetailView from "../../src/views/RunDetailView.vue";
import { delayed, group, job, page, run } from "./fixtures";
import { clickAndConfirm, fill, mountView, toastTexts } from "./harness";

vi.mock("../../src/api/calendars");
vi.mock("../../src/api/glue");
vi.mock("../../src/api/groups");
vi.mock("../../src/api/jobs");
vi.mock("../../src/api/runs");

describe("JobEditView", () => {
  beforeEach(() => {
    vi.mocked(listGroups).mockResolvedValue(page([group({ id: 4, title: "Reports" })]));
    vi.mocked(previewSchedule).mockResolvedValue({ times: [Date.UTC(2026, 0, 2, 2)], times_iso: [], timezone: "UTC", more_excluded: false });
    vi.mocked(listCalendars).mockResolvedValue([]);
    vi.mocked(getJob).mockResolvedValue(job({ id: 7, job_group: 4, job_desc: "weekly", schedule_conf: "0 15 10 ? * 6" }));
    vi.mocked(listDelayed).mockResolvedValue([]);
    vi.mocked(listRuns).mockResolvedValue(page([run({ id: 31, job_id: 7, state: "failed", handle_msg: "exit 1" })]));
    vi.mocked(getRunAttempts).mockResolvedValue([]);
  });

  it("shows the job's recent runs and last result, and runs, starts and stops it", async () => {
    vi.mocked(getGroup).mockResolvedValue(group({ id: 4 }));
    vi.mocked(setJobStarted).mockResolvedValue(job({ id: 7, job_group: 4, trigger_status: 1 }));
    const { wrapper } = await mountView(JobEditView, { path: "/jobs/7", props: { id: "7" } });
    expect(listRuns).toHaveBeenCalledWith({ job_id: 7, limit: 10 });
    expect(wrapper.find("[data-testid=last-result] .badge").attributes("data-state")).toBe("failed");
    expect(wrapper.find("[data-testid=recent-runs] tr[data-run-id='31']").text()).toContain("exit 1");
    await wrapper.find("[data-testid=job-toggle]").trigger("click");
    await flushPromises();
    expect(setJobStarted).toHaveBeenCalledWith(7, true);
    expect(wrapper.find("[data-testid=job-status]").text()).toBe("Running");
    await wrapper.find("[data-testid=job-run-once]").trigger("click");
    await flushPromises();
    expect(wrapper.find("#trigger-form").exists()).toBe(true);
  });

  it("says e-mail alarms are not sent when the admin has no SMTP server, and shows a run's alarm status", async () => {
    session.emailAlarms = false;
    const { wrapper } = await mountView(JobEditView, { path: "/jobs/7", props: { id: "7" } });
    expect(wrapper.find("[data-testid=no-smtp]").exists()).toBe(false);
    await wrapper.find("input[name=alarm_email]").setValue("ops@example.com");
    expect(wrapper.find("[data-testid=no-smtp]").text()).toContain("JOBRING_SMTP_HOST");
    wrapper.unmount();
    vi.mocked(getRun).mockResolvedValue(run({ id: 5, state: "failed", alarm_status: 3 }));
    vi.mocked(getRunLog).mockResolvedValue({ log_content: "", from_line_num: 1, to_line_num: 0, is_end: true });
    const detail = await mountView(RunDetailView, { path: "/runs/5", props: { id: "5" } });
    expect(detail.wrapper.find("[data-testid=run-alarm]").text()).toBe("Sending failed");
  });

  it("offers no start for a manual-only job", async () => {
    vi.mocked(getJob).mockResolvedValue(job({ id: 7, job_group: 4, schedule_type: "NONE", schedule_conf: null }));
    const { wrapper } = await mountView(JobEditView, { path: "/jobs/7", props: { id: "7" } });
    expect(wrapper.find("[data-testid=job-toggle]").attributes("disabled")).toBeDefined();
  });

  it("lists the job's delayed runs and cancels one once confirmed", async () => {
    vi.mocked(listDelayed).mockResolvedValueOnce([delayed({ id: 3, job_id: 7, executor_param: "late" })]).mockResolvedValue([]);
    vi.mocked(cancelDelayed).mockResolvedValue(undefined);
    const { wrapper } = await mountView(JobEditView, { path: "/jobs/7", props: { id: "7" } });
    expect(listDelayed).toHaveBeenCalledWith({ job_id: 7 });
    const row = wrapper.find("[data-testid=delayed-runs] tr[data-fire-id='3']");
    expect(row.text()).toContain("late");
    await clickAndConfirm(wrapper, row.find("button"));
    expect(cancelDelayed).toHaveBeenCalledWith(7, 3);
    expect(wrapper.find("[data-testid=delayed-runs]").text()).toContain("No delayed run is pending.");
    expect(toastTexts("ok")).toEqual(["Delayed run cancelled."]);
  });

  it("loads the job into the form", async () => {
    const { wrapper } = await mountView(JobEditView, { path: "/jobs/7", props: { id: "7" } });
    expect(getJob).toHaveBeenCalledWith(7);
    expect((wrapper.find("input[name=job_desc]").element as HTMLInputElement).value).toBe("weekly");
    expect(wrapper.find("[data-testid=cron-description]").text()).toBe("At 10:15, only on Friday");
  });

  it("creates a job in the first group and goes to it", async () => {
    vi.mocked(createJob).mockResolvedValue(job({ id: 9 }));
    const { wrapper, router } = await mountView(JobEditView, { path: "/jobs/new" });
    await fill(wrapper, { job_desc: "new one", executor_handler: "hello", executor_timeout: "30" });
    await wrapper.find("form.editor").trigger("submit");
    await flushPromises();
    expect(createJob).toHaveBeenCalledWith(expect.objectContaining({
      job_group: 4, job_desc: "new one", executor_handler: "hello", executor_timeout: 30, schedule_conf: "0 0 2 * * ?",
    }));
    expect(router.currentRoute.value.path).toBe("/jobs/9");
    expect(toastTexts("ok")).toHaveLength(1);
  });

  it("marks the field the API refuses and focuses it; editing clears the mark", async () => {
    vi.mocked(updateJob).mockRejectedValue(new ApiError(400, "not a Quartz expression", "schedule_conf"));
    const { wrapper } = await mountView(JobEditView, { path: "/jobs/7", props: { id: "7" } });
    await wrapper.find("form.editor").trigger("submit");
    await flushPromises();
    const conf = wrapper.find("input[name=schedule_conf]");
    expect(wrapper.find("label.invalid input[name=schedule_conf]").exists()).toBe(true);
    expect(wrapper.find("label.invalid .field-error").text()).toBe("not a Quartz expression");
    expect(document.activeElement).toBe(conf.element);
    await conf.setValue("0 0 3 * * ?");
    await flushPromises();
    expect(wrapper.find("label.invalid").exists()).toBe(false);
  });

  it("shows every field the API may refuse at its control, or above the form when it has none", async () => {
    const schema = openapi.components.schemas.JobUpdate.properties as Record<string, unknown>;
    const atField: string[] = [];
    for (const field of Object.keys(schema)) {
      vi.mocked(updateJob).mockRejectedValueOnce(new ApiError(422, `${field}: refused here`, `${field}.0`));
      const { wrapper } = await mountView(JobEditView, { path: "/jobs/7", props: { id: "7" } });
      await wrapper.find("form.editor").trigger("submit");
      await flushPromises();
      const marked = wrapper.find(`[aria-invalid=true][name=${field}]`);
      if (marked.exists()) {
        atField.push(field);
        expect(document.activeElement).toBe(marked.element);
        expect(marked.element.closest("label")!.querySelector(".field-error")!.textContent).toBe(`${field}: refused here`);
      } else {
        expect(wrapper.find(".form-error").text(), field).toBe(`${field}: refused here`);
      }
      wrapper.unmount();
    }
    for (const shown of ["job_desc", "alarm_email", "schedule_conf", "schedule_timezone", "executor_handler", "executor_timeout",
      "executor_fail_retry_count", "child_job_ids", "misfire_strategy", "executor_route_strategy", "executor_block_strategy",
      "alarm_on", "deadline_minutes", "executor_fail_retry_interval_s", "retry_backoff"]) {
      expect(atField).toContain(shown);
    }
  }, 20_000); // one mount per field of the API

  it("edits the alarm targets, alarm rule, deadline and retry back-off the API has", async () => {
    vi.mocked(getJob).mockResolvedValue(job({
      id: 7, job_group: 4, alarm_targets: [{ kind: "dingtalk", url: "https://oapi.example/robot", secret: "****" }],
    }));
    vi.mocked(updateJob).mockResolvedValue({ ...job({ id: 7 }), warnings: [] });
    const { wrapper } = await mountView(JobEditView, { path: "/jobs/7", props: { id: "7" } });
    expect(wrapper.findAll("[data-testid=alarm-target]")).toHaveLength(1);
    await wrapper.find("[data-testid=add-alarm-target]").trigger("click");
    const added = wrapper.findAll("[data-testid=alarm-target]")[1]!;
    await added.find("select").setValue("email");
    await added.find("input").setValue("a@example.com, b@example.com");
    await fill(wrapper, { alarm_on: "every_failure", deadline_minutes: "30", executor_fail_retry_interval_s: "10", retry_backoff: "exponential" });
    await fill(wrapper, { retry_backoff_max_s: "600" });
    await wrapper.find("input[name=alarm_recovery]").setValue(true);
    await wrapper.find("form.editor").trigger("submit");
    await flushPromises();
    expect(updateJob).toHaveBeenCalledWith(7, expect.objectContaining({
      alarm_targets: [
        { kind: "dingtalk", url: "https://oapi.example/robot", secret: "****" }, { kind: "email", to: ["a@example.com", "b@example.com"] },
      ],
      alarm_on: "every_failure", alarm_recovery: true, deadline_minutes: 30, executor_fail_retry_interval_s: 10,
      retry_backoff: "exponential", retry_backoff_max_s: 600,
    }));
  });

  it("marks every field a 422 lists, in the console's language", async () => {
    vi.mocked(updateJob).mockRejectedValue(new ApiError(422, "job_desc: String should have at least 1 character", "job_desc",
      "invalid.string_too_short", { min_length: 1 }, [
        { field: "job_desc", message: "job_desc: String should have at least 1 character", code: "invalid.string_too_short", params: { min_length: 1 } },
        { field: "executor_timeout", message: "executor_timeout: Input should be greater than or equal to 0", code: "invalid.greater_than_equal", params: { ge: 0 } },
        { field: "glue_source", message: "glue_source: String should have at most 1000000 characters", code: "invalid.string_too_long", params: { max_length: 1000000 } },
      ]));
    locale.value = "zh-CN";
    try {
      const { wrapper } = await mountView(JobEditView, { path: "/jobs/7", props: { id: "7" } });
      await wrapper.find("form.editor").trigger("submit");
      await flushPromises();
      expect(wrapper.find("label.invalid input[name=job_desc]").exists()).toBe(true);
      expect(wrapper.find("input[name=job_desc]").element.closest("label")!.querySelector(".field-error")!.textContent).toBe("至少需要 1 个字符");
      expect(wrapper.find("input[name=executor_timeout]").element.closest("label")!.querySelector(".field-error")!.textContent).toBe("不能小于 0");
      expect(wrapper.find(".form-error").text()).toBe("glue_source: 最多 1000000 个字符"); // no control of its own
      expect(document.activeElement).toBe(wrapper.find("input[name=job_desc]").element);
    } finally {
      locale.value = "en";
    }
  });

  it("shows an error without a field above the form", async () => {
    vi.mocked(updateJob).mockRejectedValue(new ApiError(403, "operator of group 4 required"));
    const { wrapper } = await mountView(JobEditView, { path: "/jobs/7", props: { id: "7" } });
    await wrapper.find("form.editor").trigger("submit");
    await flushPromises();
    expect(wrapper.find(".form-error").text()).toBe("Not permitted: operator of group 4 required");
  });

  it("previews the next fire times the API computes", async () => {
    const { wrapper } = await mountView(JobEditView, { path: "/jobs/new" });
    expect(previewSchedule).toHaveBeenCalledWith(expect.objectContaining({ schedule_type: "CRON", schedule_conf: "0 0 2 * * ?" }));
    expect(wrapper.findAll("[data-testid=next-time]")).toHaveLength(1);
  });

  it("edits the job's timing: calendars of its group, the preview with excluded instants struck through", async () => {
    vi.mocked(listCalendars).mockResolvedValue([
      { id: 1, name: "holidays", job_group: null, spec: { zone: "UTC" }, update_time: 0, updated_by: "admin", used_by: [], used_by_hidden: 0 },
      { id: 2, name: "reports-only", job_group: 4, spec: { zone: "UTC" }, update_time: 0, updated_by: "ana", used_by: [], used_by_hidden: 0 },
      { id: 3, name: "other-group", job_group: 9, spec: { zone: "UTC" }, update_time: 0, updated_by: "bo", used_by: [], used_by_hidden: 0 },
    ]);
    const jan = (d: number) => Date.UTC(2026, 0, d, 2);
    vi.mocked(previewSchedule).mockResolvedValue({
      times: [jan(1), jan(3)], times_iso: [], timezone: "UTC", more_excluded: false,
      fires: [{ logical: jan(1), fire_at: jan(1), fire_at_iso: "" }, { logical: jan(3), fire_at: jan(3), fire_at_iso: "" }],
      excluded: [{ instant: jan(2), instant_iso: "", reason: "calendar 'holidays': dates[0] (2026-01-02)", calendar: "holidays" }],
    });
    vi.mocked(updateJob).mockResolvedValue(job({ id: 7, job_group: 4, timing: { calendars: ["holidays"], calendar_action: "move", params_template: false, overlap: "allow_all" } }));
    const { wrapper } = await mountView(JobEditView, { path: "/jobs/7", props: { id: "7" } });
    const offered = wrapper.findAll("[data-testid=job-calendars] input[type=checkbox]").map((i) => i.attributes("name"));
    expect(offered).toEqual(["calendar_holidays", "calendar_reports-only"]);
    await wrapper.find("input[name=calendar_holidays]").setValue(true);
    await wrapper.find("select[name=calendar_action]").setValue("move");
    await new Promise((resolve) => setTimeout(resolve, 300));
    await flushPromises();
    expect(previewSchedule).toHaveBeenLastCalledWith(expect.objectContaining({
      job_group: 4, timing: { calendars: ["holidays"], calendar_action: "move" } }));
    const excluded = wrapper.find("[data-testid=excluded-time]");
    expect(excluded.find("s").exists()).toBe(true);
    expect(excluded.text()).toContain("excluded: calendar 'holidays': dates[0] (2026-01-02)");
    expect(wrapper.findAll("[data-testid=next-time]")).toHaveLength(2);
    await wrapper.find("form.editor").trigger("submit");
    await flushPromises();
    expect(updateJob).toHaveBeenCalledWith(7, expect.objectContaining({ timing: { calendars: ["holidays"], calendar_action: "move" } }));
  });

  it("edits the job's flow control and sends only the settings given", async () => {
    vi.mocked(getJob).mockResolvedValue(job({ id: 7, flow: { max_concurrent_runs: 3, concurrency_key: null, key_limit: null,
      on_limit: "queue", rate_limit: null, rate_period: "second", priority: null } }));
    vi.mocked(updateJob).mockResolvedValue(job({ id: 7 }));
    const { wrapper } = await mountView(JobEditView, { path: "/jobs/7", props: { id: "7" } });
    expect((wrapper.find("input[name=flow_max_concurrent_runs]").element as HTMLInputElement).value).toBe("3");
    expect(wrapper.find("input[name=flow_key_limit]").exists()).toBe(false);
    await wrapper.find("input[name=flow_concurrency_key]").setValue("{{params.tenant}}");
    await wrapper.find("input[name=flow_key_limit]").setValue("2");
    await wrapper.find("select[name=flow_on_limit]").setValue("skip");
    await wrapper.find("select[name=flow_priority]").setValue("3");
    await wrapper.find("form.editor").trigger("submit");
    await flushPromises();
    expect(updateJob).toHaveBeenCalledWith(7, expect.objectContaining({ flow: {
      max_concurrent_runs: 3, concurrency_key: "{{params.tenant}}", key_limit: 2, rate_limit: null, priority: 3, on_limit: "skip" } }));
  });

  it("asks why when stopping, and shows who paused the job, why and when", async () => {
    vi.mocked(getJob).mockResolvedValue(job({ id: 7, job_group: 4, trigger_status: 1 }));
    vi.mocked(setJobStarted).mockResolvedValue(job({
      id: 7, job_group: 4, trigger_status: 0, pause_note: { by: "ana", reason: "upstream late", at: Date.UTC(2026, 0, 2, 9) } }));
    const { wrapper } = await mountView(JobEditView, { path: "/jobs/7", props: { id: "7" } });
    await wrapper.find("[data-testid=job-toggle]").trigger("click");
    await flushPromises();
    await wrapper.find("#stop-form input[name=reason]").setValue("upstream late");
    await wrapper.find("#stop-form").trigger("submit");
    await flushPromises();
    expect(setJobStarted).toHaveBeenCalledWith(7, false, "upstream late");
    const note = wrapper.find("[data-testid=pause-note]").text();
    expect(note).toContain("Paused by ana");
    expect(note).toContain("Reason: upstream late");
  });

  it("shows a missing or hidden job as not found, not as an empty form", async () => {
    vi.mocked(getJob).mockRejectedValue(new ApiError(404, "job 99999 not found"));
    const { wrapper } = await mountView(JobEditView, { path: "/jobs/99999", props: { id: "99999" } });
    expect(wrapper.find("[data-testid=not-found]").text()).toContain("Job #99999 does not exist");
    expect(wrapper.find("form").exists()).toBe(false);
  });

  it("is read only for a viewer", async () => {
    const { wrapper } = await mountView(JobEditView, { path: "/jobs/7", props: { id: "7" }, as: { role: "viewer" } });
    expect(wrapper.find("input[name=job_desc]").element.closest("fieldset")!.disabled).toBe(true);
    expect(wrapper.find("[data-testid=save-job]").exists()).toBe(false);
  });
});

describe("TriggerDialog", () => {
  beforeEach(() => {
    vi.mocked(getGroup).mockResolvedValue(group({ online: [{ address: "http://127.0.0.1:9999", last_heartbeat: null, dispatch: "push" }] }));
  });

  async function open() {
    const wrapper = mount(TriggerDialog, { props: { job: job({ id: 4, executor_param: "p=1" }) }, attachTo: document.body });
    await flushPromises();
    return wrapper;
  }

  it("runs the job now on the chosen executor with the parameters", async () => {
    vi.mocked(triggerJob).mockResolvedValue({ trigger_code: 200, trigger_msg: "", run_ids: [55], log_ids: [55] });
    const wrapper = await open();
    await wrapper.find("input[type=checkbox]").setValue(true);
    await wrapper.find("#trigger-form").trigger("submit");
    await flushPromises();
    expect(triggerJob).toHaveBeenCalledWith(4, { executor_param: "p=1", addresses: ["http://127.0.0.1:9999"] });
    expect(toastTexts("ok")[0]).toContain("55");
    expect(toasts[0]!.link).toEqual({ to: "/runs/55", label: "Open the run" });
    expect(wrapper.emitted("close")).toHaveLength(1);
  });

  it("schedules a run for later when a time is given", async () => {
    vi.mocked(triggerJobAt).mockResolvedValue({
      id: 1, job_id: 4, job_group: 1, fire_at: Date.UTC(2030, 0, 1), fire_at_iso: "2030-01-01T00:00:00Z", created_at: 0,
      created_by: "admin", executor_param: "p=1", addresses: null, state: "pending",
    });
    const wrapper = await open();
    await wrapper.find("input[name=run_at]").setValue("2030-01-01T08:00:00");
    await wrapper.find("#trigger-form").trigger("submit");
    await flushPromises();
    expect(triggerJobAt).toHaveBeenCalledWith(4, expect.objectContaining({ executor_param: "p=1", at: expect.any(Number) }));
  });

  it("stays open on a refusal and shows it", async () => {
    vi.mocked(triggerJob).mockRejectedValue(new ApiError(409, "no executor online"));
    const wrapper = await open();
    await wrapper.find("#trigger-form").trigger("submit");
    await flushPromises();
    expect(toastTexts("error")).toEqual(["no executor online"]);
    expect(wrapper.emitted("close")).toBeUndefined();
  });
});

describe("RunDetailView", () => {
  beforeEach(() => {
    vi.useFakeTimers({ toFake: ["setTimeout", "clearTimeout", "setInterval", "clearInterval"] });
    vi.mocked(listGroups).mockResolvedValue(page([group()]));
    vi.mocked(getRunAttempts).mockResolvedValue([run({ id: 5 })]);
  });
  afterEach(() => vi.useRealTimers());

  const log = (content: string, from: number, to: number, isEnd: boolean) => ({
    log_content: content, from_line_num: from, to_line_num: to, is_end: isEnd,
  });

  it("shows a finished run and its whole log, then stops following", async () => {
    vi.mocked(getRun).mockResolvedValue(run({ id: 5, state: "failed", handle_msg: "exit 1" }));
    vi.mocked(getRunLog).mockResolvedValue(log("one\ntwo\n", 1, 2, true));
    const { wrapper } = await mountView(RunDetailView, { path: "/runs/5", props: { id: "5" } });
    expect(wrapper.find("h1 .badge").attributes("data-state")).toBe("failed");
    expect(wrapper.findAll(".log-line").map((l) => l.text())).toEqual(["one", "two"]);
    expect(wrapper.find("[data-testid=log-end]").exists()).toBe(true);
    expect(wrapper.find("[data-testid=kill]").exists()).toBe(false);
  });

  it("shows the run's attempt and shard, and in Chinese its trigger type and duration", async () => {
    vi.mocked(getRun).mockResolvedValue(run({ id: 5, attempt: 3, executor_sharding_param: "1/4", trigger_type: "RETRY", duration_ms: 65_000 }));
    vi.mocked(getRunLog).mockResolvedValue(log("", 1, 0, true));
    const { wrapper } = await mountView(RunDetailView, { path: "/runs/5", props: { id: "5" } });
    expect(wrapper.find("[data-testid=run-attempt]").text()).toBe("3");
    expect(wrapper.find("[data-testid=run-shard]").text()).toBe("1/4");
    locale.value = "zh-CN";
    try {
      await flushPromises();
      expect(wrapper.find(".facts").text()).toContain("失败重试");
      expect(wrapper.find(".facts").text()).toContain("1 分 05 秒");
    } finally {
      locale.value = "en";
    }
  });

  it("lists the attempts of a retried run, each linked but the one shown", async () => {
    vi.mocked(getRun).mockResolvedValue(run({ id: 6, attempt: 2, retry_of: 5, trigger_type: "RETRY" }));
    vi.mocked(getRunAttempts).mockResolvedValue([
      run({ id: 5, attempt: 1, state: "failed" }), run({ id: 6, attempt: 2, retry_of: 5, state: "success" }),
    ]);
    vi.mocked(getRunLog).mockResolvedValue(log("", 1, 0, true));
    const { wrapper } = await mountView(RunDetailView, { path: "/runs/6", props: { id: "6" } });
    expect(getRunAttempts).toHaveBeenCalledWith(6);
    const rows = wrapper.findAll("[data-testid=run-attempts] tr[data-run-id]");
    expect(rows.map((r) => r.attributes("data-run-id"))).toEqual(["5", "6"]);
    const [first, second] = rows;
    expect(first?.find("a").attributes("href")).toBe("/runs/5");
    expect(first?.find(".badge").attributes("data-state")).toBe("failed");
    expect(second?.find("a").exists()).toBe(false);
    expect(second?.find("[aria-current=page]").text()).toBe("#6");
  });

  it("shows no attempts card for a run that was never retried", async () => {
    vi.mocked(getRun).mockResolvedValue(run({ id: 5 }));
    vi.mocked(getRunLog).mockResolvedValue(log("", 1, 0, true));
    const { wrapper } = await mountView(RunDetailView, { path: "/runs/5", props: { id: "5" } });
    expect(wrapper.find("[data-testid=run-attempts]").exists()).toBe(false);
  });

  it("shows XXL-JOB's <br> as lines and its markers as section titles, never as markup", async () => {
    vi.mocked(getRun).mockResolvedValue(run({
      id: 5, state: "failed", handle_msg: null,
      trigger_msg: "Trigger type: Cron\n>>>>>>>>>>> Trigger Job <<<<<<<<<<<\nmsg: refused\n\n>>>>>>>>>>> Fail retry trigger <<<<<<<<<<<",
    }));
    vi.mocked(getRunLog).mockResolvedValue(log("<br>----------- start<br>----------- Param:<b>x</b>\n", 1, 1, true));
    const { wrapper } = await mountView(RunDetailView, { path: "/runs/5", props: { id: "5" } });
    expect(wrapper.findAll(".log-line").map((l) => l.text())).toEqual(["", "----------- start", "----------- Param:<b>x</b>"]);
    expect(wrapper.findAll("[data-testid=trigger-msg] .msg-section").map((s) => s.text())).toEqual(["Trigger Job", "Fail retry trigger"]);
    expect(wrapper.find("[data-testid=trigger-msg]").text()).not.toContain(">>>");
    expect(wrapper.find("[data-testid=log-zone]").text()).toContain("UTC");
  });

  it("follows a running run's log from the next line until it ends", async () => {
    vi.mocked(getRun)
      .mockResolvedValueOnce(run({ id: 6, state: "running", duration_ms: null }))
      .mockResolvedValueOnce(run({ id: 6, state: "running", duration_ms: null }))
      .mockResolvedValue(run({ id: 6, state: "success" }));
    vi.mocked(getRunLog)
      .mockResolvedValueOnce(log("start\n", 1, 1, false))
      .mockResolvedValue(log("done\n", 2, 2, true));
    const { wrapper } = await mountView(RunDetailView, { path: "/runs/6", props: { id: "6" } });
    expect(wrapper.find("[data-testid=kill]").exists()).toBe(true);
    expect(wrapper.find("[data-testid=log-live]").exists()).toBe(true);
    await vi.advanceTimersByTimeAsync(1000);
    await flushPromises();
    expect(getRunLog).toHaveBeenLastCalledWith(6, 2);
    expect(wrapper.findAll(".log-line").map((l) => l.text())).toEqual(["start", "done"]);
    expect(wrapper.find("h1 .badge").attributes("data-state")).toBe("success");
    expect(wrapper.find("[data-testid=log-end]").exists()).toBe(true);
  });

  it("kills the run once confirmed and says when the executor refused", async () => {
    vi.mocked(getRun).mockResolvedValue(run({ id: 6, state: "running", duration_ms: null }));
    vi.mocked(getRunLog).mockResolvedValue(log("", 1, 0, false));
    vi.mocked(killRun).mockResolvedValue({ killed: false, msg: "job thread not running" });
    const { wrapper } = await mountView(RunDetailView, { path: "/runs/6", props: { id: "6" } });
    await clickAndConfirm(wrapper, wrapper.find("[data-testid=kill]"));
    expect(killRun).toHaveBeenCalledWith(6);
    expect(toastTexts("error")).toEqual(["job thread not running"]);
  });

  it("shows a missing or hidden run as not found, and follows no log", async () => {
    vi.mocked(getRun).mockRejectedValue(new ApiError(404, "run 99 not found"));
    const { wrapper } = await mountView(RunDetailView, { path: "/runs/99", props: { id: "99" } });
    expect(wrapper.find("[data-testid=not-found]").text()).toContain("Run #99 does not exist");
    expect(wrapper.find("[data-testid=log-live]").exists()).toBe(false);
    expect(getRunLog).not.toHaveBeenCalled();
  });

  it("offers to try again when the run could not be loaded", async () => {
    vi.mocked(getRun).mockRejectedValueOnce(new ApiError(0, "Failed to fetch")).mockResolvedValue(run({ id: 5 }));
    vi.mocked(getRunLog).mockResolvedValue(log("", 1, 0, true));
    const { wrapper } = await mountView(RunDetailView, { path: "/runs/5", props: { id: "5" } });
    expect(wrapper.find("[data-testid=load-failure]").text()).toContain("Cannot reach the admin.");
    await wrapper.find("[data-testid=load-failure] button").trigger("click");
    await flushPromises();
    expect(wrapper.find("h1 .badge").attributes("data-state")).toBe("success");
  });
});

describe("GlueView", () => {
  // CodeMirror needs a real browser (the browser suite covers it): a textarea stands in.
  const CodeEditor = defineComponent({
    props: { modelValue: { type: String, required: true } },
    emits: ["update:modelValue"],
    setup: (props, { emit }) => () => h("textarea", {
      class: "code-stub", value: props.modelValue,
      onInput: (e: Event) => emit("update:modelValue", (e.target as HTMLTextAreaElement).value),
    }),
  });
  const mountGlue = () => mountView(GlueView, { path: "/jobs/3/glue", props: { id: "3" }, stubs: { CodeEditor } });
  const version = (id: number, remark: string, source: string) => ({
    id, job_id: 3, glue_type: "GLUE_SHELL", glue_source: source, glue_remark: remark, add_time: null,
  });

  const glue = { job_id: 3, glue_type: "GLUE_SHELL", glue_source: "echo one\n", glue_remark: "first", glue_updatetime: null };

  beforeEach(() => {
    vi.mocked(getGlue).mockResolvedValue(glue);
    vi.mocked(listGlueVersions).mockResolvedValue([version(21, "first", "echo zero\n")]);
  });

  it("loads the source and its versions, and saves an edit with a remark", async () => {
    vi.mocked(saveGlue).mockResolvedValue(glue);
    const { wrapper } = await mountGlue();
    expect((wrapper.find(".code-stub").element as HTMLTextAreaElement).value).toBe("echo one\n");
    expect(wrapper.find(".versions li").text()).toContain("first");
    await wrapper.find(".code-stub").setValue("echo two\n");
    await wrapper.find("input[name=glue_remark]").setValue("second");
    await wrapper.find("form.card").trigger("submit");
    await flushPromises();
    expect(saveGlue).toHaveBeenCalledWith(3, { glue_source: "echo two\n", glue_remark: "second" });
    expect(toastTexts("ok")).toHaveLength(1);
  });

  it("compares a version side by side and restores it once confirmed", async () => {
    vi.mocked(restoreGlueVersion).mockResolvedValue(glue);
    const { wrapper } = await mountGlue();
    await wrapper.findAll(".versions button")[0]!.trigger("click");
    expect(wrapper.find(".diff-row.changed").text()).toContain("echo zero");
    await wrapper.find("dialog .icon-btn").trigger("click");
    await clickAndConfirm(wrapper, wrapper.findAll(".versions button")[1]!);
    expect(restoreGlueVersion).toHaveBeenCalledWith(3, 21);
    expect(getGlue).toHaveBeenCalledTimes(2);
  });

  it("has no editor for a BEAN job, and shows a missing job as not found", async () => {
    vi.mocked(getGlue).mockResolvedValueOnce({ ...glue, glue_type: "BEAN", glue_source: null });
    const { wrapper } = await mountGlue();
    expect(wrapper.find("[data-testid=bean-job]").exists()).toBe(true);
    expect(wrapper.find(".code-stub").exists()).toBe(false);
    expect(listGlueVersions).not.toHaveBeenCalled();
    wrapper.unmount();
    vi.mocked(getGlue).mockRejectedValueOnce(new ApiError(404, "job 3 not found"));
    const missing = await mountGlue();
    expect(missing.wrapper.find("[data-testid=not-found]").exists()).toBe(true);
  });

  it("asks for nothing while GLUE is off", async () => {
    session.glueEnabled = false;
    const { wrapper } = await mountGlue();
    expect(getGlue).not.toHaveBeenCalled();
    expect(wrapper.find(".notice").exists()).toBe(true);
  });

  it("shows a refused save as an error toast", async () => {
    vi.mocked(saveGlue).mockRejectedValue(new ApiError(403, "GLUE permission required"));
    const { wrapper } = await mountGlue();
    await wrapper.find("input[name=glue_remark]").setValue("x");
    await wrapper.find("form.card").trigger("submit");
    await flushPromises();
    expect(toastTexts("error")).toEqual(["Not permitted: GLUE permission required"]);
  });
});
