import { diffLines } from "diff";

export interface DiffRow {
  left: string | null;
  right: string | null;
  kind: "same" | "removed" | "added" | "changed";
}

function split(text: string): string[] {
  const lines = text.split("\n");
  if (lines.length && lines[lines.length - 1] === "") lines.pop();
  return lines;
}

/** Rows of a side-by-side view of `before` (left) and `after` (right). */
export function sideBySide(before: string, after: string): DiffRow[] {
  const rows: DiffRow[] = [];
  const parts = diffLines(before, after);
  for (let i = 0; i < parts.length; i++) {
    const part = parts[i]!;
    const lines = split(part.value);
    if (part.removed) {
      const nextPart = parts[i + 1];
      const added = nextPart?.added ? split(nextPart.value) : [];
      if (nextPart?.added) i++;
      const n = Math.max(lines.length, added.length);
      for (let k = 0; k < n; k++) {
        const left = lines[k] ?? null;
        const right = added[k] ?? null;
        rows.push({ left, right, kind: left !== null && right !== null ? "changed" : left !== null ? "removed" : "added" });
      }
    } else if (part.added) {
      for (const line of lines) rows.push({ left: null, right: line, kind: "added" });
    } else {
      for (const line of lines) rows.push({ left: line, right: line, kind: "same" });
    }
  }
  return rows;
}
