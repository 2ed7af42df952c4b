// @vitest-environment happy-dom
// The Calendars page: the list, the editor (every part, errors the API names), the import (an .ics
// file read in the browser, or dates), and who may edit what (the API modules mocked).
import { flushPromises } from "@vue/test-utils";
import { beforeEach, describe, expect, it, vi } from "vitest";
import { ApiError } from "../../src/api/client";
import { createCalendar, deleteCalendar, importCalendar, listCalendars, updateCalendar } from "../../src/api/calendars";
import { listGroups } from "../../src/api/groups";
import CalendarsView from "../../src/views/CalendarsView.vue";
import { group, page } from "./fixtures";
import { clickAndConfirm, mountView, toastTexts } from "./harness";

vi.mock("../../src/api/calendars");
vi.mock("../../src/api/groups");

const holidays = {
  id: 1, name: "holidays", job_group: null, update_time: Date.UTC(2026, 0, 1), updated_by: "admin", used_by: [7], used_by_hidden: 0,
  spec: { name: "holidays", zone: "Asia/Shanghai", invert: false, dates: ["2026-10-01", "2026-10-02"] },
};
const ops = {
  id: 2, name: "ops", job_group: 4, update_time: Date.UTC(2026, 0, 1), updated_by: "ana", used_by: [], used_by_hidden: 0,
  spec: { name: "ops", zone: "UTC", invert: false, day_windows: [{ start: "22:00", end: "06:00" }], workdays: ["MON", "TUE"] },
};

describe("CalendarsView", () => {
  beforeEach(() => {
    vi.mocked(listGroups).mockResolvedValue(page([group({ id: 4, title: "Reports" })]));
    vi.mocked(listCalendars).mockResolvedValue([holidays, ops]);
  });

  it("lists the calendars with their group, parts and the jobs using them", async () => {
    const { wrapper } = await mountView(CalendarsView, { path: "/calendars" });
    const row = wrapper.find("tr[data-calendar=holidays]");
    expect(row.text()).toContain("Global (every group)");
    expect(row.text()).toContain("2 dates");
    expect(row.text()).toContain("7");
    expect(wrapper.find("tr[data-calendar=ops]").text()).toContain("2 workdays, 1 time of day");
    // A calendar in use cannot be deleted.
    expect(row.find(".danger-text").attributes("disabled")).toBeDefined();
  });

  it("counts the jobs of groups the caller may not read, without ids, and keeps delete off", async () => {
    vi.mocked(listCalendars).mockResolvedValue([holidays, { ...ops, used_by_hidden: 2 }]);
    const { wrapper } = await mountView(CalendarsView, { path: "/calendars" });
    const row = wrapper.find("tr[data-calendar=ops]");
    expect(row.text()).toContain("+2 in other groups");
    expect(row.find(".danger-text").attributes("disabled")).toBeDefined();
  });

  it("creates a calendar from its parts and shows a refused part above the form", async () => {
    vi.mocked(createCalendar).mockRejectedValueOnce(new ApiError(422, "dates[1]: not a valid date: '2026-02-30'", "dates[1]"));
    vi.mocked(createCalendar).mockResolvedValueOnce({ ...holidays, id: 3, name: "cn" });
    const { wrapper } = await mountView(CalendarsView, { path: "/calendars" });
    await wrapper.find("[data-testid=new-calendar]").trigger("click");
    await wrapper.find("#calendar-form input[name=name]").setValue("cn");
    await wrapper.find("#calendar-form input[name=zone]").setValue("Asia/Shanghai");
    await wrapper.find("#calendar-form textarea[name=dates]").setValue("2026-10-01\n2026-02-30");
    await wrapper.find("#calendar-form textarea[name=date_ranges]").setValue("2026-02-15..2026-02-21");
    await wrapper.find("#calendar-form textarea[name=day_windows]").setValue("12:00-13:30");
    await wrapper.find("#calendar-form input[name=workday_SAT]").setValue(true);
    await wrapper.find("#calendar-form").trigger("submit");
    await flushPromises();
    expect(createCalendar).toHaveBeenCalledWith(expect.objectContaining({
      name: "cn", job_group: null, zone: "Asia/Shanghai", dates: ["2026-10-01", "2026-02-30"],
      date_ranges: [{ start: "2026-02-15", end: "2026-02-21" }], day_windows: [{ start: "12:00", end: "13:30" }],
      workdays: ["SAT"], cron: null, invert: false,
    }));
    expect(wrapper.find("#calendar-form .form-error").text()).toContain("dates[1]: not a valid date");
    await wrapper.find("#calendar-form textarea[name=dates]").setValue("2026-10-01");
    await wrapper.find("#calendar-form").trigger("submit");
    await flushPromises();
    expect(wrapper.find("#calendar-form").exists()).toBe(false);
  });

  it("edits a calendar's parts (not its name) and deletes one no job uses", async () => {
    vi.mocked(updateCalendar).mockResolvedValue(ops);
    vi.mocked(deleteCalendar).mockResolvedValue(undefined as never);
    const { wrapper } = await mountView(CalendarsView, { path: "/calendars" });
    await wrapper.find("tr[data-calendar=ops] .btn.ghost").trigger("click");
    expect(wrapper.find("#calendar-form input[name=name]").exists()).toBe(false);
    expect((wrapper.find("#calendar-form textarea[name=day_windows]").element as HTMLTextAreaElement).value).toBe("22:00-06:00");
    await wrapper.find("#calendar-form").trigger("submit");
    await flushPromises();
    expect(updateCalendar).toHaveBeenCalledWith(2, expect.objectContaining({
      day_windows: [{ start: "22:00", end: "06:00" }], workdays: ["MON", "TUE"] }));
    await clickAndConfirm(wrapper, wrapper.find("tr[data-calendar=ops] .danger-text"));
    expect(deleteCalendar).toHaveBeenCalledWith(2);
  });

  it("imports an .ics file read in the browser and tells what was left out", async () => {
    vi.mocked(importCalendar).mockResolvedValue({ ...holidays, id: 5, name: "imported", notes: ["VEVENT 2 (UID x): cancelled, left out"] });
    const { wrapper } = await mountView(CalendarsView, { path: "/calendars" });
    await wrapper.find("[data-testid=import-calendar]").trigger("click");
    await wrapper.find("#import-form input[name=name]").setValue("imported");
    const input = wrapper.find("#import-form input[type=file]");
    const file = new File(["BEGIN:VCALENDAR\\r\\nEND:VCALENDAR\\r\\n"], "h.ics", { type: "text/calendar" });
    Object.defineProperty(input.element, "files", { value: [file] });
    await input.trigger("change");
    await flushPromises();
    await wrapper.find("#import-form input[name=until]").setValue("2027-12-31");
    await wrapper.find("#import-form").trigger("submit");
    await flushPromises();
    expect(importCalendar).toHaveBeenCalledWith(expect.objectContaining({
      name: "imported", ics: "BEGIN:VCALENDAR\\r\\nEND:VCALENDAR\\r\\n", dates: null, until: "2027-12-31", job_group: null }));
    expect(toastTexts("ok")).toContain("VEVENT 2 (UID x): cancelled, left out");
  });

  it("offers a viewer no editing, and an operator only their groups' calendars", async () => {
    const viewer = await mountView(CalendarsView, { path: "/calendars", as: { role: "viewer" } });
    expect(viewer.wrapper.find("[data-testid=new-calendar]").exists()).toBe(false);
    viewer.wrapper.unmount();
    const operator = await mountView(CalendarsView, { path: "/calendars", as: { role: "operator", group_ids: [4] } });
    expect(operator.wrapper.find("tr[data-calendar=holidays] .btn.ghost").exists()).toBe(false);
    expect(operator.wrapper.find("tr[data-calendar=ops] .btn.ghost").exists()).toBe(true);
  });
});
