import { describe, expect, it } from "vitest";
import { isFinal, RUN_STATES, runDuration, runDurationText } from "../src/lib/runState";
import { sideBySide } from "../src/lib/sideBySide";
import { formatDuration } from "../src/lib/time";

const T0 = "2026-01-01T00:00:00Z";
const run = { state: "running" as const, trigger_time: T0, duration_ms: null };

describe("run state presentation", () => {
  it("polls only the states that can still change", () => {
    expect(RUN_STATES.filter((s) => !isFinal(s))).toEqual(["scheduled", "dispatching", "running"]);
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
