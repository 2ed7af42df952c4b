import type { Locale } from "../i18n";

/** The viewer's IANA time zone (the browser's). */
export function viewerZone(): string {
  return Intl.DateTimeFormat().resolvedOptions().timeZone || "UTC";
}

/** An instant (epoch ms, or an ISO string) as a date and time in `zone`; "—" when absent. */
export function formatInstant(
  value: number | string | null | undefined,
  zone: string,
  lang: Locale,
  withZone = false,
): string {
  if (value === null || value === undefined || value === "" || value === 0) return "—";
  const date = typeof value === "number" ? new Date(value) : new Date(value);
  if (Number.isNaN(date.getTime())) return "—";
  const options: Intl.DateTimeFormatOptions = {
    timeZone: zone,
    year: "numeric",
    month: "2-digit",
    day: "2-digit",
    hour: "2-digit",
    minute: "2-digit",
    second: "2-digit",
    hourCycle: "h23",
  };
  if (withZone) options.timeZoneName = "short";
  let parts: Intl.DateTimeFormatPart[];
  try {
    parts = new Intl.DateTimeFormat(lang, options).formatToParts(date);
  } catch {
    // an unknown zone name: show UTC rather than nothing
    parts = new Intl.DateTimeFormat(lang, { ...options, timeZone: "UTC", timeZoneName: "short" }).formatToParts(date);
  }
  // XXL-JOB's yyyy-MM-dd HH:mm:ss in every language; only the zone name is localised.
  const part = (type: Intl.DateTimeFormatPartTypes): string => parts.find((p) => p.type === type)?.value ?? "";
  const text = `${part("year")}-${part("month")}-${part("day")} ${part("hour")}:${part("minute")}:${part("second")}`;
  const zoneName = part("timeZoneName");
  return zoneName ? `${text} ${zoneName}` : text;
}

/** A duration in ms as "850 ms", "12.3 s", "4 min 05 s", "2 h 03 min". */
const UNITS: Record<Locale, { ms: string; s: string; min: string; h: string }> = {
  en: { ms: "ms", s: "s", min: "min", h: "h" },
  "zh-CN": { ms: "毫秒", s: "秒", min: "分", h: "小时" },
};

export function formatDuration(ms: number | null | undefined, lang: Locale = "en"): string {
  const u = UNITS[lang];
  if (ms === null || ms === undefined || ms < 0) return "—";
  if (ms < 1000) return `${Math.round(ms)} ${u.ms}`;
  const s = ms / 1000;
  if (s < 60) return `${s.toFixed(1)} ${u.s}`;
  const m = Math.floor(s / 60);
  if (m < 60) return `${m} ${u.min} ${String(Math.floor(s % 60)).padStart(2, "0")} ${u.s}`;
  const h = Math.floor(m / 60);
  return `${h} ${u.h} ${String(m % 60).padStart(2, "0")} ${u.min}`;
}

/** Is `zone` a time zone this browser knows? */
export function isKnownZone(zone: string): boolean {
  try {
    new Intl.DateTimeFormat("en", { timeZone: zone });
    return true;
  } catch {
    return false;
  }
}

/** The zones offered in pickers (the browser's list when it has one). */
export function zoneNames(): string[] {
  const intl = Intl as unknown as { supportedValuesOf?: (k: string) => string[] };
  const names = intl.supportedValuesOf ? intl.supportedValuesOf("timeZone") : [];
  return names.includes("UTC") ? names : ["UTC", ...names];
}

/** epoch ms of a `<input type="datetime-local">` value in the viewer's zone. */
export function localInputToMs(value: string): number | undefined {
  if (!value) return undefined;
  const ms = new Date(value).getTime();
  return Number.isNaN(ms) ? undefined : ms;
}
