import { api, ok, type Schemas } from "./client";

export type Calendar = Schemas["CalendarOut"];
const path = (calendarId: number) => ({ params: { path: { calendar_id: calendarId } } });

/** The calendars the user may see (global ones and their groups'), or one group's and the global ones. */
export const listCalendars = (jobGroup?: number) =>
  ok(api.GET("/calendars", { params: { query: jobGroup ? { job_group: jobGroup } : {} } }));
export const createCalendar = (body: Schemas["CalendarIn"]) => ok(api.POST("/calendars", { body }));
export const updateCalendar = (calendarId: number, body: Schemas["CalendarUpdate"]) =>
  ok(api.PUT("/calendars/{calendar_id}", { ...path(calendarId), body }));
export const deleteCalendar = (calendarId: number) => ok(api.DELETE("/calendars/{calendar_id}", path(calendarId)));
/** A calendar from an .ics file's text or a list of dates (`notes`: what the import left out). */
export const importCalendar = (body: Schemas["CalendarImport"]) => ok(api.POST("/calendars/import", { body }));
