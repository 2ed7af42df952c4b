import { describe, expect, it } from "vitest";
import { runDuration, runState } from "../src/lib/runState";
import { sideBySide } from "../src/lib/sideBySide";

const base = { trigger_code: 200, handle_code: 0, handle_msg: null };

describe("runState", () => {
  it("uses the API's state when there is one", () => {
    expect(runState({ ...base, state: "timed_out" })).toBe("timed_out");
  });

  it("derives the state from the codes otherwise", () => {
    expect(runState(base)).toBe("running");
    expect(runState({ ...base, handle_code: 200 })).toBe("success");
    expect(runState({ ...base, handle_code: 500 })).toBe("failed");
    expect(runState({ ...base, handle_code: 500, handle_msg: "killed by user (admin)" })).toBe("killed");
    expect(runState({ ...base, trigger_code: 500 })).toBe("failed");
    expect(runState({ ...base, trigger_code: 0 })).toBe("scheduled");
  });

  it("measures durations", () => {
    const run = { ...base, trigger_time: "2026-01-01T00:00:00Z", handle_time: "2026-01-01T00:00:02.5Z" };
    expect(runDuration({ ...run, handle_code: 200 }, 0)).toBe(2500);
    expect(runDuration({ ...base, trigger_time: "2026-01-01T00:00:00Z" }, Date.UTC(2026, 0, 1, 0, 0, 3))).toBe(3000);
    expect(runDuration({ ...base, duration_ms: 42 }, 0)).toBe(42);
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
