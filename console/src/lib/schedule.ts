import type { Locale } from "../i18n";
import { translate } from "../i18n";
import { describeCron } from "./cron";

/** A job's schedule in a few words for lists. */
export function scheduleSummary(type: string, conf: string | null | undefined, lang: Locale): string {
  if (type === "CRON" && conf) return describeCron(conf, lang) ?? conf;
  if (type === "FIX_RATE" && conf) return `${translate(lang, "edit.type.FIX_RATE")}: ${conf} s`;
  return translate(lang, "edit.type.NONE");
}

/** A workflow's schedule in a few words for its list: cron in words, every N s, or once at a time. */
export function workflowScheduleText(
  schedule: { schedule_type: string; schedule_conf: string }, lang: Locale,
): string {
  const conf = schedule.schedule_conf;
  if (schedule.schedule_type === "FIX_RATE") return translate(lang, "workflows.schedule.every", { n: conf });
  if (schedule.schedule_type === "ONCE") return translate(lang, "workflows.schedule.onceAt", { at: conf });
  if (schedule.schedule_type === "CRON") return describeCron(conf, lang) ?? conf;
  return translate(lang, "workflows.schedule.manual");
}
