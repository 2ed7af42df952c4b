// @vitest-environment happy-dom
// The sub-task card of a distributed run (progress, filter, retry failed), the API modules mocked.
import { beforeEach, describe, expect, it, vi } from "vitest";
import { listGroups } from "../../src/api/groups";
import { getRun, getRunAttempts, getRunLog, getRunSubtasks, retryFailedSubtasks, type SubTaskPage } from "../../src/api/runs";
import RunDetailView from "../../src/views/RunDetailView.vue";
import { page, run } from "./fixtures";
import { mountView, toastTexts } from "./harness";

vi.mock("../../src/api/groups");
vi.mock("../../src/api/runs");

function subtasks(over: Partial<SubTaskPage["progress"]> = {}): SubTaskPage {
  const task = (id: number, status: "succeeded" | "failed", extra: object) => ({
    id, key: `r/0.${id}`, task: "count_line", kind: "map", shard_index: 0, shard_total: 0, status, attempt: 1,
    executor_address: "http://127.0.0.1:9999/", result: null, message: null, created_at: 0, dispatched_at: 0,
    ended_at: 0, ...extra,
  });
  return {
    progress: {
      kind: "map", phase: "failed", attempt: 1, root_state: "succeeded", total: 3, succeeded: 1, failed: 2,
      running: 0, pending: 0, failure_tolerance: "1", reduce_task: "sum_counts", result: null, ...over,
    },
    items: [task(1, "succeeded", { result: { n: 2 } }), task(2, "failed", { message: "<b>boom</b>" })],
    next_after_id: null,
  };
}

describe("a distributed run's sub-tasks", () => {
  beforeEach(() => {
    vi.mocked(listGroups).mockResolvedValue(page([]));
    vi.mocked(getRun).mockResolvedValue(run({ id: 7, state: "failed" }));
    vi.mocked(getRunAttempts).mockResolvedValue([]);
    vi.mocked(getRunLog).mockResolvedValue({ from_line_num: 1, to_line_num: 0, log_content: "", is_end: true });
    vi.mocked(getRunSubtasks).mockResolvedValue(subtasks());
  });

  it("shows the progress, the sub-tasks as text, filters, and retries the failed ones only", async () => {
    const { wrapper } = await mountView(RunDetailView, { path: "/runs/7", props: { id: "7" } });
    const card = wrapper.find("[data-testid=run-subtasks]");
    expect(card.find("[data-testid=subtask-progress]").text()).toContain("3 of 3 done (2 failed)");
    expect(card.find("[role=progressbar]").attributes("aria-valuenow")).toBe("100");
    const rows = card.findAll("tr[data-subtask-id]");
    expect(rows.map((r) => r.find("td").text())).toEqual(["r/0.1", "r/0.2"]);
    expect(rows[0]?.text()).toContain('{"n":2}');
    expect(rows[1]?.text()).toContain("<b>boom</b>"); // user data as text, never markup
    expect(rows[1]?.find("b").exists()).toBe(false);
    await card.find("[data-testid=subtask-status]").setValue("failed");
    expect(getRunSubtasks).toHaveBeenLastCalledWith(7, { status: "failed", after_id: 0, limit: 50 });
    vi.mocked(retryFailedSubtasks).mockResolvedValue({ retried: 2 });
    vi.mocked(getRunSubtasks).mockResolvedValue(subtasks({ phase: "mapping", failed: 0, running: 2 }));
    await card.find("[data-testid=retry-failed]").trigger("click");
    await vi.waitFor(() => expect(toastTexts("ok")).toEqual(["2 failed sub-task(s) dispatched again"]));
    expect(retryFailedSubtasks).toHaveBeenCalledWith(7);
    await vi.waitFor(() => expect(wrapper.find("[data-testid=retry-failed]").exists()).toBe(false));
  });

  it("offers to go on with a retry interrupted midway (the run stays 'retrying')", async () => {
    vi.mocked(getRunSubtasks).mockResolvedValue(subtasks({ phase: "retrying", attempt: 2, failed: 1, pending: 1 }));
    const { wrapper } = await mountView(RunDetailView, { path: "/runs/7", props: { id: "7" } });
    const card = wrapper.find("[data-testid=run-subtasks]");
    expect(card.text()).toContain("retrying the failed");
    vi.mocked(retryFailedSubtasks).mockResolvedValue({ retried: 1 });
    vi.mocked(getRunSubtasks).mockResolvedValue(subtasks({ phase: "mapping", attempt: 2, failed: 0, pending: 2 }));
    await card.find("[data-testid=retry-failed]").trigger("click");
    expect(retryFailedSubtasks).toHaveBeenCalledWith(7);
    await vi.waitFor(() => expect(wrapper.find("[data-testid=retry-failed]").exists()).toBe(false));
  });

  it("shows no sub-task card for a run without sub-tasks", async () => {
    vi.mocked(getRunSubtasks).mockRejectedValue(new Error("run 7 has no sub-tasks"));
    const { wrapper } = await mountView(RunDetailView, { path: "/runs/7", props: { id: "7" } });
    expect(wrapper.find("[data-testid=run-subtasks]").exists()).toBe(false);
  });
});
