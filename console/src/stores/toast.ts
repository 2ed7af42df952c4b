import { reactive } from "vue";
import { ApiError, type ErrorParams } from "../api/client";
import { format, t, tMaybe } from "../i18n";

export interface Toast {
  id: number;
  kind: "ok" | "error";
  text: string;
  /** a page the toast is about (e.g. the run just started) */
  link?: { to: string; label: string } | undefined;
}

export const toasts = reactive<Toast[]>([]);
let next = 1;

const timers = new Map<number, ReturnType<typeof setTimeout>>();

/** Shows a toast; the same message again (e.g. every poll while the admin is down) does not
 * stack up: the one shown stays longer instead. */
export function notify(text: string, kind: Toast["kind"] = "ok", link?: Toast["link"]): void {
  const shown = toasts.find((x) => x.kind === kind && x.text === text);
  const toast = shown ?? { id: next++, kind, text, link };
  if (!shown) toasts.push(toast);
  clearTimeout(timers.get(toast.id));
  timers.set(toast.id, setTimeout(() => dismiss(toast.id), kind === "error" ? 8000 : 3500));
}

export function dismiss(id: number): void {
  clearTimeout(timers.get(id));
  timers.delete(id);
  const i = toasts.findIndex((x) => x.id === id);
  if (i >= 0) toasts.splice(i, 1);
}

/** A coded API message in the console's language (params filled in); null for a code it does
 * not know (the API's English text is shown then). `withField`: prefixed by the field's name. */
export function codedText(code: string | null, params: ErrorParams, field: string | null, withField: boolean): string | null {
  if (!code) return null;
  const template = tMaybe(`apiError.${code}`, "");
  if (!template) return null;
  const text = format(template, params as Record<string, string | number>);
  return withField && field ? `${field}: ${text}` : text;
}

/** An error as a message for people: 403 names the missing permission; coded errors in the
 * console's language. */
export function errorText(exc: unknown): string {
  if (exc instanceof ApiError) {
    if (exc.status === 403) return t("error.forbidden", { msg: exc.message });
    if (exc.status === 0) return t("error.network");
    return codedText(exc.code, exc.params, exc.field, true) ?? exc.message;
  }
  return exc instanceof Error ? exc.message : String(exc);
}

export function notifyError(exc: unknown): void {
  if (exc instanceof ApiError && exc.status === 401) return; // the login page takes over
  notify(errorText(exc), "error");
}

/** Runs `work` and shows its error, if any, as a toast; true when it succeeded. */
export async function attempt(work: () => Promise<unknown>): Promise<boolean> {
  try {
    await work();
    return true;
  } catch (exc) {
    notifyError(exc);
    return false;
  }
}

export function copyToClipboard(text: string): Promise<boolean> {
  return attempt(async () => {
    await navigator.clipboard.writeText(text);
    notify(t("common.copied"));
  });
}
