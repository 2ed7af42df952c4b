import { describe, expect, it } from "vitest";
import { formatDuration, formatInstant, isKnownZone } from "../src/lib/time";

const T = Date.UTC(2026, 0, 15, 23, 30, 5); // 2026-01-15T23:30:05Z

describe("formatInstant", () => {
  it("shows an instant in the given zone", () => {
    expect(formatInstant(T, "UTC", "en")).toBe("2026-01-15 23:30:05");
    expect(formatInstant(T, "Asia/Shanghai", "en")).toBe("2026-01-16 07:30:05");
    expect(formatInstant(T, "America/New_York", "zh-CN")).toBe("2026-01-15 18:30:05");
  });

  it("reads ISO strings as well as epoch ms", () => {
    expect(formatInstant("2026-01-15T23:30:05Z", "Europe/Berlin", "en")).toBe("2026-01-16 00:30:05");
  });

  it("names the zone when asked", () => {
    expect(formatInstant(T, "UTC", "en", true)).toBe("2026-01-15 23:30:05 UTC");
  });

  it("shows a dash for no instant", () => {
    expect(formatInstant(null, "UTC", "en")).toBe("—");
    expect(formatInstant(0, "UTC", "en")).toBe("—");
    expect(formatInstant("garbage", "UTC", "en")).toBe("—");
  });

  it("falls back to UTC for an unknown zone", () => {
    expect(isKnownZone("Mars/Olympus")).toBe(false);
    expect(formatInstant(T, "Mars/Olympus", "en")).toBe("2026-01-15 23:30:05 UTC");
  });
});

describe("formatDuration", () => {
  it("picks a readable unit", () => {
    expect(formatDuration(850)).toBe("850 ms");
    expect(formatDuration(12_340)).toBe("12.3 s");
    expect(formatDuration(245_000)).toBe("4 min 05 s");
    expect(formatDuration(7_380_000)).toBe("2 h 03 min");
    expect(formatDuration(null)).toBe("—");
  });
});

describe("durations in Chinese", () => {
  it("uses Chinese units", () => {
    expect(formatDuration(850, "zh-CN")).toBe("850 毫秒");
    expect(formatDuration(60_000, "zh-CN")).toBe("1 分 00 秒");
    expect(formatDuration(3_900_000, "zh-CN")).toBe("1 小时 05 分");
    expect(formatDuration(60_000)).toBe("1 min 00 s");
  });
});
