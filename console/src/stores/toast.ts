import { reactive } from "vue";
import { ApiError } from "../api/client";
import { t } from "../i18n";

export interface Toast {
  id: number;
  kind: "ok" | "error";
  text: string;
}

export const toasts = reactive<Toast[]>([]);
let next = 1;

export function notify(text: string, kind: Toast["kind"] = "ok"): void {
  const toast = { id: next++, kind, text };
  toasts.push(toast);
  setTimeout(() => dismiss(toast.id), kind === "error" ? 8000 : 3500);
}

export function dismiss(id: number): void {
  const i = toasts.findIndex((x) => x.id === id);
  if (i >= 0) toasts.splice(i, 1);
}

/** An error as a message for people: 403 names the missing permission. */
export function errorText(exc: unknown): string {
  if (exc instanceof ApiError) {
    if (exc.status === 403) return t("error.forbidden", { msg: exc.message });
    if (exc.status === 0) return t("error.network");
    return exc.message;
  }
  return exc instanceof Error ? exc.message : String(exc);
}

export function notifyError(exc: unknown): void {
  if (exc instanceof ApiError && exc.status === 401) return; // the login page takes over
  notify(errorText(exc), "error");
}
