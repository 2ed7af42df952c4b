import { describe, expect, it } from "vitest";
import { buildCron, DEFAULT_BUILDER, describeCron } from "../src/lib/cron";

describe("describeCron", () => {
  it("describes a Quartz expression in English", () => {
    expect(describeCron("0 15 10 ? * 6#3", "en")).toBe("At 10:15, on the third Friday of the month");
    expect(describeCron("0/10 * * * * ?", "en")).toBe("Every 10 seconds");
  });

  it("describes the same expression in Chinese", () => {
    const text = describeCron("0 15 10 ? * 6#3", "zh-CN");
    expect(text).toContain("10:15");
    expect(text).toContain("第三");
    expect(text).toMatch(/星期五|周五/);
  });

  it("reads Quartz weekdays as 1 = Sunday", () => {
    expect(describeCron("0 0 9 ? * 2", "en")).toContain("Monday");
  });

  it("returns null for what is not a Quartz expression", () => {
    expect(describeCron("* * * * *", "en")).toBeNull();
    expect(describeCron("not a cron at all", "en")).toBeNull();
    expect(describeCron("", "en")).toBeNull();
  });
});

describe("buildCron", () => {
  it("builds each unit", () => {
    expect(buildCron({ ...DEFAULT_BUILDER, unit: "minute", every: 5 })).toBe("0 0/5 * * * ?");
    expect(buildCron({ ...DEFAULT_BUILDER, unit: "hour", every: 1, minute: 30 })).toBe("0 30 * * * ?");
    expect(buildCron({ ...DEFAULT_BUILDER, unit: "day", hour: 2, minute: 5 })).toBe("0 5 2 * * ?");
    expect(buildCron({ ...DEFAULT_BUILDER, unit: "week", weekday: 6, hour: 10, minute: 15 })).toBe("0 15 10 ? * 6");
    expect(buildCron({ ...DEFAULT_BUILDER, unit: "month", dayOfMonth: 15, hour: 0, minute: 0 })).toBe("0 0 0 15 * ?");
  });

  it("builds what describeCron can read", () => {
    for (const unit of ["minute", "hour", "day", "week", "month"] as const) {
      expect(describeCron(buildCron({ ...DEFAULT_BUILDER, unit }), "en")).not.toBeNull();
    }
  });
});

describe("cron text in Chinese", () => {
  it("uses Chinese commas and single spaces", () => {
    expect(describeCron("0 0 2 1,15 * ?", "zh-CN")).toBe("在02:00，限每月 1 号 和 15 号");
    expect(describeCron("0 0/30 9-17 ? * MON-FRI", "zh-CN")).toBe("每隔 30 分钟，在 09:00 和 17:59 之间，星期一至星期五");
  });
});
