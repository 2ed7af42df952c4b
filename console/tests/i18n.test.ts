import { readdirSync, readFileSync, statSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { en } from "../src/i18n/en";
import { format, translate } from "../src/i18n";
import { zhCN } from "../src/i18n/zh-CN";

function sources(dir: string): string[] {
  return readdirSync(dir).flatMap((name) => {
    const path = join(dir, name);
    return statSync(path).isDirectory() ? sources(path) : /\.(ts|vue)$/.test(name) ? [path] : [];
  });
}

describe("i18n", () => {
  it("has the same keys in English and Chinese", () => {
    const missingInZh = Object.keys(en).filter((k) => !(k in zhCN));
    const missingInEn = Object.keys(zhCN).filter((k) => !(k in en));
    expect(missingInZh).toEqual([]);
    expect(missingInEn).toEqual([]);
  });

  it("has no empty message and the same placeholders in both", () => {
    const holders = (s: string): string[] => (s.match(/\{\w+\}/g) ?? []).sort();
    for (const [key, text] of Object.entries(en)) {
      const zh = (zhCN as Record<string, string>)[key] ?? "";
      expect(text.trim(), key).not.toBe("");
      expect(zh.trim(), key).not.toBe("");
      expect(holders(zh), key).toEqual(holders(text));
    }
  });

  it("translates Chinese for real (not copied English)", () => {
    const same = Object.entries(en).filter(([k, v]) => (zhCN as Record<string, string>)[k] === v && /[a-z]{4,}/.test(v));
    // a few proper names stay as they are (jobring, CRON, AppName, JobHandler ...)
    expect(same.map(([k]) => k).filter((k) => !["app.name", "groups.appName", "common.id"].includes(k))).toEqual([]);
  });

  it("uses only keys that exist", () => {
    const root = join(import.meta.dirname, "..", "src");
    const used = new Set<string>();
    for (const file of sources(root)) {
      for (const m of readFileSync(file, "utf8").matchAll(/\bt\(\s*"([\w.]+)"/g)) used.add(m[1]!);
    }
    expect([...used].filter((k) => !(k in en))).toEqual([]);
    expect(used.size).toBeGreaterThan(100);
  });

  it("fills placeholders", () => {
    expect(format("{a} of {b}", { a: 1, b: "x" })).toBe("1 of x");
    expect(format("{a} {missing}", { a: 1 })).toBe("1 {missing}");
    expect(translate("zh-CN", "jobs.selected", { n: 3 })).toBe("已选 3 项");
  });
});
