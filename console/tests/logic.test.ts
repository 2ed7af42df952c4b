import { describe, expect, it } from "vitest";
import { isFinal, RUN_STATES, runDuration, runDurationText } from "../src/lib/runState";
import { sideBySide } from "../src/lib/sideBySide";
import { formatDuration } from "../src/lib/time";

const T0 = "2026-01-01T00:00:00Z";
const run = { state: "running" as const, trigger_time: T0, duration_ms: null };

describe("run state presentation", () => {
  it("polls only the states that can still change", () => {
    expect(RUN_STATES.filter((s) => !isFinal(s))).toEqual(["scheduled", "queued", "dispatching", "running"]);
  });

  it("shows the API's duration once finished, the live time while running", () => {
    expect(runDuration({ ...run, state: "success", duration_ms: 2500 }, 0)).toBe(2500);
    expect(runDuration(run, Date.UTC(2026, 0, 1, 0, 0, 3))).toBe(3000);
    expect(runDuration({ ...run, state: "failed" }, Date.UTC(2026, 0, 1, 0, 0, 3))).toBeNull();
    expect(runDuration({ ...run, trigger_time: null }, 0)).toBeNull();
  });

  it("says under a second for a live time counted from whole seconds", () => {
    expect(runDurationText(run, Date.UTC(2026, 0, 1, 0, 0, 0, 400), formatDuration)).toBe("< 1 s");
    expect(runDurationText({ ...run, state: "success", duration_ms: 400 }, 0, formatDuration)).toBe("400 ms");
  });
});

describe("sideBySide", () => {
  it("aligns changed, removed and added lines", () => {
    const rows = sideBySide("a\nb\nc\n", "a\nB\nc\nd\n");
    expect(rows).toEqual([
      { left: "a", right: "a", kind: "same" },
      { left: "b", right: "B", kind: "changed" },
      { left: "c", right: "c", kind: "same" },
      { left: null, right: "d", kind: "added" },
    ]);
  });
});

describe("flow control form", () => {
  it("sends null when nothing is set, and only the fields set", async () => {
    const { blankFlow, flowFormOf, flowOf } = await import("../src/lib/flowForm");
    expect(flowOf(blankFlow())).toBeNull();
    const form = { ...blankFlow(), max_concurrent_runs: 30, concurrency_key: " {{params.tenant}} ", key_limit: "2",
      on_limit: "skip" as const, rate_limit: "10", rate_period: "minute" as const, priority: "3" };
    expect(flowOf(form)).toEqual({ max_concurrent_runs: 30, concurrency_key: "{{params.tenant}}", key_limit: 2,
      on_limit: "skip", rate_limit: 10, rate_period: "minute", priority: 3 });
    // A key limit without a key is dropped (the key field was cleared).
    expect(flowOf({ ...blankFlow(), key_limit: 4 })).toBeNull();
    const back = flowFormOf({ max_concurrent_runs: 5, concurrency_key: null, key_limit: null, on_limit: "queue",
      rate_limit: null, rate_period: "second", priority: null });
    expect(flowOf(back)).toEqual({ max_concurrent_runs: 5, concurrency_key: null, key_limit: null, rate_limit: null, priority: null });
  });
});
