import { describe, expect, it } from "vitest";
import { workflowScheduleText } from "../src/lib/schedule";

describe("workflowScheduleText", () => {
  it("says a workflow's schedule in a few words, in each language", () => {
    expect(workflowScheduleText({ schedule_type: "FIX_RATE", schedule_conf: "600" }, "en")).toBe("every 600 s");
    expect(workflowScheduleText({ schedule_type: "FIX_RATE", schedule_conf: "600" }, "zh-CN")).toBe("每 600 秒");
    expect(workflowScheduleText({ schedule_type: "ONCE", schedule_conf: "2027-01-01T02:00:00" }, "en"))
      .toBe("once at 2027-01-01T02:00:00");
    expect(workflowScheduleText({ schedule_type: "NONE", schedule_conf: "" }, "zh-CN")).toBe("手动");
    expect(workflowScheduleText({ schedule_type: "CRON", schedule_conf: "0 0 2 * * ?" }, "en")).not.toBe("");
  });

  it("keeps markup in a stored conf as text (no HTML is built)", () => {
    expect(workflowScheduleText({ schedule_type: "ONCE", schedule_conf: "<b>x</b>" }, "en")).toBe("once at <b>x</b>");
  });
});
