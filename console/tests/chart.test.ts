import { describe, expect, it } from "vitest";
import { niceTicks, successRatio, tickLabel } from "../src/lib/chart";

describe("chart axis", () => {
  it("steps by 1, 2 or 5 times a power of ten, up past the largest bar", () => {
    expect(niceTicks(0)).toEqual([0, 1]);
    expect(niceTicks(3)).toEqual([0, 1, 2, 3]);
    expect(niceTicks(10_188)).toEqual([0, 5000, 10_000, 15_000]);
    expect(niceTicks(37)).toEqual([0, 10, 20, 30, 40]);
  });

  it("labels ticks compactly in the console's language", () => {
    expect(tickLabel(15_000, "en")).toBe("15K");
    expect(tickLabel(15_000, "zh-CN")).toBe("1.5万");
    expect(tickLabel(20, "en")).toBe("20");
  });

  it("computes the success ratio of finished runs", () => {
    expect(successRatio(3, 1)).toBe(75);
    expect(successRatio(0, 0)).toBeNull();
  });
});
