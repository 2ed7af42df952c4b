import cronstrue from "cronstrue";
import "cronstrue/locales/zh_CN";
import type { Locale } from "../i18n";

/**
 * A plain-language description of a Quartz cron expression (6 or 7 fields, weekdays 1-7
 * with Sunday = 1) in the given language; null when the expression cannot be read.
 */
export function describeCron(expression: string, lang: Locale): string | null {
  const text = expression.trim();
  const fields = text.split(/\s+/);
  if (fields.length < 6 || fields.length > 7) return null;
  try {
    const described = cronstrue.toString(text, {
      locale: lang === "zh-CN" ? "zh_CN" : "en",
      dayOfWeekStartIndexZero: false,
      use24HourTimeFormat: true,
      throwExceptionOnParseError: true,
      verbose: false,
    });
    // cronstrue's Chinese keeps English commas and doubled spaces: Chinese punctuation instead.
    return lang === "zh-CN" ? described.replace(/\s*,\s*/g, "，").replace(/\s{2,}/g, " ") : described;
  } catch {
    return null;
  }
}

export type BuilderUnit = "minute" | "hour" | "day" | "week" | "month";

export interface CronBuilder {
  unit: BuilderUnit;
  /** every N minutes/hours (unit minute/hour) */
  every: number;
  second: number;
  minute: number;
  hour: number;
  /** Quartz weekday 1 (Sunday) .. 7 (Saturday), for unit week */
  weekday: number;
  /** 1..31, for unit month */
  dayOfMonth: number;
}

export const DEFAULT_BUILDER: CronBuilder = {
  unit: "day",
  every: 1,
  second: 0,
  minute: 0,
  hour: 2,
  weekday: 2,
  dayOfMonth: 1,
};

/** The Quartz expression a builder state stands for. */
export function buildCron(b: CronBuilder): string {
  const step = (n: number): string => (n > 1 ? `0/${n}` : "*");
  switch (b.unit) {
    case "minute":
      return `${b.second} ${step(b.every)} * * * ?`;
    case "hour":
      return `${b.second} ${b.minute} ${step(b.every)} * * ?`;
    case "day":
      return `${b.second} ${b.minute} ${b.hour} * * ?`;
    case "week":
      return `${b.second} ${b.minute} ${b.hour} ? * ${b.weekday}`;
    case "month":
      return `${b.second} ${b.minute} ${b.hour} ${b.dayOfMonth} * ?`;
  }
}
