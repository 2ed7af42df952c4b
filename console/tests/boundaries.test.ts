import { readdirSync, readFileSync, statSync } from "node:fs";
import { join, relative } from "node:path";
import { describe, expect, it } from "vitest";

const SRC = join(import.meta.dirname, "..", "src");

function sources(dir: string): string[] {
  return readdirSync(dir).flatMap((name) => {
    const path = join(dir, name);
    return statSync(path).isDirectory() ? sources(path) : /\.(ts|vue)$/.test(name) ? [path] : [];
  });
}

/** The names a file imports from a module whose path ends with `tail`. */
function importedNames(text: string, tail: RegExp): string[] {
  const names: string[] = [];
  for (const m of text.matchAll(/import\s+(type\s+)?\{([^}]*)\}\s+from\s+"([^"]+)"/g)) {
    if (m[1] || !tail.test(m[3]!)) continue;
    names.push(...m[2]!.split(",").map((s) => s.trim()).filter((s) => s && !s.startsWith("type ")));
  }
  return names;
}

describe("the API boundary", () => {
  const outside = sources(SRC).filter((f) => !relative(SRC, f).startsWith("api"));

  it("keeps the raw client inside src/api: views, components and stores call the resource modules", () => {
    const offenders = outside.filter((f) => {
      const text = readFileSync(f, "utf8");
      return importedNames(text, /\/api\/client$/).includes("api") || /from\s+"openapi-fetch"/.test(text);
    });
    expect(offenders.map((f) => relative(SRC, f))).toEqual([]);
  });

  it("derives no run state in the console: the API's `state` is shown as it is", () => {
    // the codes a state was once derived from (a trigger answer's own trigger_code is no run state)
    const deriving = outside.filter((f) => /handle_code|run\.trigger_code/.test(readFileSync(f, "utf8")));
    expect(deriving.map((f) => relative(SRC, f))).toEqual([]);
  });

  it("sees the files it guards", () => {
    expect(outside.length).toBeGreaterThan(30);
    expect(importedNames('import { api, ok } from "../api/client";', /\/api\/client$/)).toEqual(["api", "ok"]);
  });
});
