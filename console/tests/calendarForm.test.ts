import { describe, expect, it } from "vitest";
import { blankCalendar, datesOf, formOf, partsOf, previewRows, timingFormOf, timingOf } from "../src/lib/calendarForm";

describe("calendar form", () => {
  it("turns the editor's lines into the API's parts and back", () => {
    const form = {
      ...blankCalendar(), name: "cn", zone: " Asia/Shanghai ", dates: "2026-10-01\n\n2026-10-02, 2026-10-03",
      date_ranges: "2026-02-15..2026-02-21\n", workdays: ["FRI", "MON"], day_windows: "22:00-06:00\n12:00 - 13:30",
      cron: " * * 0-6 ? * * ", periods: "2026-03-01T09:00Z..2026-03-01T10:00Z", invert: false,
    };
    const parts = partsOf(form);
    expect(parts).toEqual({
      zone: "Asia/Shanghai", dates: ["2026-10-01", "2026-10-02", "2026-10-03"],
      date_ranges: [{ start: "2026-02-15", end: "2026-02-21" }], workdays: ["MON", "FRI"],
      day_windows: [{ start: "22:00", end: "06:00" }, { start: "12:00", end: "13:30" }], cron: "* * 0-6 ? * *",
      periods: [{ start: "2026-03-01T09:00Z", end: "2026-03-01T10:00Z" }], invert: false,
    });
    const back = formOf({ name: "cn", job_group: 4, spec: { ...parts, workdays: ["MON", "FRI"] } });
    expect(partsOf(back)).toEqual(parts);
    expect(back.job_group).toBe("4");
    // A line without its separator keeps its text, so the API names the entry that is wrong.
    expect(partsOf({ ...blankCalendar(), date_ranges: "2026-02-15" }).date_ranges).toEqual([{ start: "2026-02-15", end: "" }]);
    expect(partsOf(blankCalendar()).workdays).toBeNull();
    expect(datesOf("2026-01-01 2026-01-02;2026-01-03\n")).toEqual(["2026-01-01", "2026-01-02", "2026-01-03"]);
  });

  it("lists fires and excluded instants in time order", () => {
    const rows = previewRows(
      [{ fire_at: 30, logical: 30 }, { fire_at: 15, logical: 10, moved_by: "calendar 'x': dates[0]" }],
      [{ instant: 20, reason: "r", calendar: "x" }, { instant: 10, reason: "moved", calendar: "x" }],
    );
    expect(rows.map((r) => [r.at, r.kind])).toEqual([[10, "excluded"], [15, "fire"], [20, "excluded"], [30, "fire"]]);
  });

  it("sends a job's timing only when a rule is set", () => {
    expect(timingOf(timingFormOf(null))).toBeNull();
    expect(timingOf({ ...timingFormOf(null), calendar_action: "move" })).toBeNull();
    const form = timingFormOf({ calendars: ["h"], calendar_action: "move", max_runs: 3, start_at: "2026-01-01T00:00:00Z" });
    expect(timingOf(form)).toEqual({ calendars: ["h"], calendar_action: "move", max_runs: 3, start_at: "2026-01-01T00:00:00Z" });
    expect(timingOf({ ...form, calendars: [], max_runs: "", jitter_seconds: 0 })).toEqual({ start_at: "2026-01-01T00:00:00Z" });
  });

  it("sends the overlap policy, catch-up window and DST rules only when not the defaults", () => {
    const fromApi = { overlap: "allow_all", catch_up: null, dst: { gap: "skip", repeat: "second" } };
    expect(timingOf(timingFormOf(fromApi))).toBeNull();
    const form = timingFormOf({ overlap: "buffer_one", catch_up: { window_seconds: 600, mode: "once", limit: 100 },
      dst: { gap: "next_valid", repeat: "second" } });
    expect(timingOf(form)).toEqual({ overlap: "buffer_one", catch_up: { window_seconds: 600, mode: "once", limit: 100 },
      dst: { gap: "next_valid", repeat: "second" } });
    expect(timingOf({ ...form, catch_up_seconds: "", overlap: "allow_all" })).toEqual({ dst: { gap: "next_valid", repeat: "second" } });
    expect(timingOf({ ...timingFormOf(null), catch_up_seconds: 60 })).toEqual({ catch_up: { window_seconds: 60, mode: "each" } });
  });
});
