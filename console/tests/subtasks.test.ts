import { describe, expect, it } from "vitest";
import { progressBar, subtaskOutcome } from "../src/lib/subtasks";

describe("sub-task progress", () => {
  it("gives bar segments that never add up past 100 %", () => {
    expect(progressBar({ total: 3, succeeded: 1, failed: 1, running: 1 })).toEqual({
      succeeded: 33, failed: 33, running: 33, done: 66,
    });
    expect(progressBar({ total: 0, succeeded: 0, failed: 0, running: 0 }).done).toBe(100);
  });

  it("shows a result as JSON and a failure's message, cut short", () => {
    expect(subtaskOutcome({ status: "succeeded", result: { n: 3 } })).toBe('{"n":3}');
    expect(subtaskOutcome({ status: "failed", message: "x".repeat(100) }, 10)).toBe("xxxxxxxxx…");
    expect(subtaskOutcome({ status: "pending", message: null })).toBe("");
  });
});
