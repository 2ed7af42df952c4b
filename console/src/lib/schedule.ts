import type { Locale } from "../i18n";
import { translate } from "../i18n";
import { describeCron } from "./cron";

/** A job's schedule in a few words for lists. */
export function scheduleSummary(type: string, conf: string | null | undefined, lang: Locale): string {
  if (type === "CRON" && conf) return describeCron(conf, lang) ?? conf;
  if (type === "FIX_RATE" && conf) return `${translate(lang, "edit.type.FIX_RATE")}: ${conf} s`;
  return translate(lang, "edit.type.NONE");
}
