import { ref } from "vue";
import { en, type MessageKey, type Messages } from "./en";
import { zhCN } from "./zh-CN";

export type Locale = "en" | "zh-CN";
export const LOCALES: { code: Locale; label: string }[] = [
  { code: "en", label: "English" },
  { code: "zh-CN", label: "简体中文" },
];
export const dictionaries: Record<Locale, Messages> = { en, "zh-CN": zhCN };

const STORAGE_KEY = "jobring.locale";

function initialLocale(): Locale {
  try {
    const saved = globalThis.localStorage?.getItem(STORAGE_KEY);
    if (saved === "en" || saved === "zh-CN") return saved;
  } catch {
    // storage blocked: fall back to the browser's language
  }
  const nav = globalThis.navigator?.language ?? "en";
  return nav.toLowerCase().startsWith("zh") ? "zh-CN" : "en";
}

/** The current language; reactive, so templates re-render on a switch. */
export const locale = ref<Locale>(initialLocale());

export function setLocale(next: Locale): void {
  locale.value = next;
  try {
    globalThis.localStorage?.setItem(STORAGE_KEY, next);
  } catch {
    // not remembered when storage is blocked; the switch still applies
  }
  if (globalThis.document) document.documentElement.lang = next;
}

/** Fill `{name}` placeholders; missing values stay visible as `{name}`. */
export function format(template: string, params?: Record<string, string | number>): string {
  if (!params) return template;
  return template.replace(/\{(\w+)\}/g, (whole, name: string) =>
    name in params ? String(params[name]) : whole,
  );
}

export function translate(lang: Locale, key: MessageKey, params?: Record<string, string | number>): string {
  return format(dictionaries[lang][key], params);
}

/** Translate in the current language (reading `locale` makes callers reactive). */
export function t(key: MessageKey, params?: Record<string, string | number>): string {
  return translate(locale.value, key, params);
}

/** A key built at run time (e.g. `state.${s}`), when it exists; else the raw fallback. */
export function tMaybe(key: string, fallback: string): string {
  const dict = dictionaries[locale.value] as Record<string, string>;
  return dict[key] ?? fallback;
}

export type { MessageKey };
