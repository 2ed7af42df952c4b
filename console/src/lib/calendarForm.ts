// A calendar's parts as the console's editor holds them (one text area per list part, one entry a
// line) and as the API takes them. Pure functions: tests/calendarForm.test.ts.

export const WEEKDAYS = ["MON", "TUE", "WED", "THU", "FRI", "SAT", "SUN"] as const;

export interface CalendarForm {
  name: string;
  job_group: string; // "" = global
  zone: string;
  dates: string;
  date_ranges: string; // START..END a line
  workdays: string[]; // empty: the part is not used
  day_windows: string; // HH:MM-HH:MM a line
  cron: string;
  periods: string; // START..END a line
  invert: boolean;
}

export interface Span {
  start: string;
  end: string;
}

export interface CalendarParts {
  zone: string;
  dates: string[];
  date_ranges: Span[];
  workdays: string[] | null;
  day_windows: Span[];
  cron: string | null;
  periods: Span[];
  invert: boolean;
}

export const blankCalendar = (): CalendarForm => ({
  name: "", job_group: "", zone: "UTC", dates: "", date_ranges: "", workdays: [], day_windows: "", cron: "", periods: "",
  invert: false,
});

const lines = (text: string): string[] => text.split(/[\n,;]+/).map((s) => s.trim()).filter(Boolean);

/** "A..B" (or "A - B" for day windows) lines as spans; a line without its separator keeps the
 * text as its start and an empty end, so the API names the entry that is wrong. */
function spans(text: string, separator: RegExp): Span[] {
  return text.split("\n").map((s) => s.trim()).filter(Boolean).map((line) => {
    const [start = "", end = ""] = line.split(separator, 2).map((s) => s.trim());
    return { start, end };
  });
}

export function partsOf(form: CalendarForm): CalendarParts {
  return {
    zone: form.zone.trim() || "UTC",
    dates: lines(form.dates),
    date_ranges: spans(form.date_ranges, /\.\./),
    workdays: form.workdays.length ? WEEKDAYS.filter((d) => form.workdays.includes(d)) : null,
    day_windows: spans(form.day_windows, /\s*-\s*(?=\d)/),
    cron: form.cron.trim() || null,
    periods: spans(form.periods, /\.\./),
    invert: form.invert,
  };
}

interface Spec {
  zone?: string;
  dates?: string[];
  date_ranges?: Span[];
  workdays?: string[];
  day_windows?: Span[];
  cron?: string;
  periods?: Span[];
  invert?: boolean;
}

export function formOf(calendar: { name: string; job_group?: number | null; spec: Record<string, unknown> }): CalendarForm {
  const spec = calendar.spec as Spec;
  const join = (items: Span[] | undefined, sep: string) => (items ?? []).map((s) => `${s.start}${sep}${s.end}`).join("\n");
  return {
    name: calendar.name,
    job_group: calendar.job_group ? String(calendar.job_group) : "",
    zone: spec.zone ?? "UTC",
    dates: (spec.dates ?? []).join("\n"),
    date_ranges: join(spec.date_ranges, ".."),
    workdays: spec.workdays ?? [],
    day_windows: join(spec.day_windows, "-"),
    cron: spec.cron ?? "",
    periods: join(spec.periods, ".."),
    invert: Boolean(spec.invert),
  };
}

/** One line on what a calendar names: "3 dates, 1 range, workdays MON-FRI, 2 windows". */
export function summary(spec: Record<string, unknown>, words: (key: string, n: number) => string): string[] {
  const s = spec as Spec;
  const out: string[] = [];
  if (s.dates?.length) out.push(words("dates", s.dates.length));
  if (s.date_ranges?.length) out.push(words("ranges", s.date_ranges.length));
  if (s.workdays?.length) out.push(words("workdays", s.workdays.length));
  if (s.day_windows?.length) out.push(words("windows", s.day_windows.length));
  if (s.cron) out.push(words("cron", 1));
  if (s.periods?.length) out.push(words("periods", s.periods.length));
  return out;
}

/** The dates of a pasted list (one a line, or separated by commas / semicolons / spaces). */
export const datesOf = (text: string): string[] => text.split(/[\s,;]+/).map((s) => s.trim()).filter(Boolean);

export interface PreviewRow {
  at: number;
  kind: "fire" | "excluded";
  logical?: number;
  reason?: string;
  calendar?: string | null;
}

/** A timing preview's fires and excluded instants in one list, in time order (excluded ones
 * are shown struck through among the fires). */
export function previewRows(
  fires: { fire_at: number; logical: number; moved_by?: string | null }[],
  excluded: { instant: number; reason: string; calendar: string | null }[],
): PreviewRow[] {
  const rows: PreviewRow[] = [
    ...fires.map((f) => ({ at: f.fire_at, kind: "fire" as const, logical: f.logical, reason: f.moved_by ?? undefined })),
    ...excluded.map((e) => ({ at: e.instant, kind: "excluded" as const, reason: e.reason, calendar: e.calendar })),
  ];
  return rows.sort((a, b) => a.at - b.at || (a.kind === "excluded" ? -1 : 1));
}

export interface TimingForm {
  calendars: string[];
  calendar_action: string;
  start_at: string;
  end_at: string;
  max_runs: string | number;
  jitter_seconds: string | number;
  params_template: boolean;
  /** skip, buffer_one, buffer_all, cancel_other, terminate_other, allow_all (default). */
  overlap: string;
  /** Catch-up window in seconds ("" or 0: none). */
  catch_up_seconds: string | number;
  catch_up_mode: string;
  catch_up_limit: string | number;
  dst_gap: string;
  dst_repeat: string;
}

export const OVERLAP_POLICIES = ["allow_all", "skip", "buffer_one", "buffer_all", "cancel_other", "terminate_other"] as const;

export const blankTiming = (): TimingForm => ({
  calendars: [], calendar_action: "skip", start_at: "", end_at: "", max_runs: "", jitter_seconds: "",
  params_template: false, overlap: "allow_all", catch_up_seconds: "", catch_up_mode: "each", catch_up_limit: "",
  dst_gap: "skip", dst_repeat: "second",
});

/** The job's `timing` for the API: null when no rule is set. */
export function timingOf(form: TimingForm): Record<string, unknown> | null {
  const timing: Record<string, unknown> = {};
  if (form.calendars.length) {
    timing.calendars = [...form.calendars];
    timing.calendar_action = form.calendar_action;
  }
  if (form.start_at.trim()) timing.start_at = form.start_at.trim();
  if (form.end_at.trim()) timing.end_at = form.end_at.trim();
  if (form.max_runs !== "" && Number(form.max_runs) > 0) timing.max_runs = Number(form.max_runs);
  if (form.jitter_seconds !== "" && Number(form.jitter_seconds) > 0) timing.jitter_seconds = Number(form.jitter_seconds);
  if (form.params_template) timing.params_template = true;
  if (form.overlap && form.overlap !== "allow_all") timing.overlap = form.overlap;
  if (form.catch_up_seconds !== "" && Number(form.catch_up_seconds) > 0) {
    const catchUp: Record<string, unknown> = { window_seconds: Number(form.catch_up_seconds), mode: form.catch_up_mode || "each" };
    if (form.catch_up_limit !== "" && Number(form.catch_up_limit) > 0) catchUp.limit = Number(form.catch_up_limit);
    timing.catch_up = catchUp;
  }
  if (form.dst_gap !== "skip" || form.dst_repeat !== "second") timing.dst = { gap: form.dst_gap, repeat: form.dst_repeat };
  return Object.keys(timing).length ? timing : null;
}

export function timingFormOf(timing: {
  calendars?: string[]; calendar_action?: string; start_at?: string | null; end_at?: string | null;
  max_runs?: number | null; jitter_seconds?: number | null; params_template?: boolean; overlap?: string;
  catch_up?: { window_seconds: number; mode?: string; limit?: number } | null;
  dst?: { gap?: string; repeat?: string } | null;
} | null | undefined): TimingForm {
  return {
    calendars: timing?.calendars ?? [],
    calendar_action: timing?.calendar_action ?? "skip",
    start_at: timing?.start_at ?? "",
    end_at: timing?.end_at ?? "",
    max_runs: timing?.max_runs ?? "",
    jitter_seconds: timing?.jitter_seconds ?? "",
    params_template: timing?.params_template ?? false,
    overlap: timing?.overlap ?? "allow_all",
    catch_up_seconds: timing?.catch_up?.window_seconds ?? "",
    catch_up_mode: timing?.catch_up?.mode ?? "each",
    catch_up_limit: timing?.catch_up?.limit ?? "",
    dst_gap: timing?.dst?.gap ?? "skip",
    dst_repeat: timing?.dst?.repeat ?? "second",
  };
}
