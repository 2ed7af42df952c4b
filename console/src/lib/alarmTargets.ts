// A job's alarm targets (the API's `alarm_targets`) as rows of the job form, and back.

/** The channel kinds of the admin (jobring.admin.alarms), in the order the form offers them. */
export const ALARM_KINDS = ["email", "webhook", "slack", "wecom", "dingtalk", "feishu"] as const;
/** Kinds that take an optional signing secret. */
export const SIGNED_KINDS: ReadonlySet<string> = new Set(["dingtalk", "feishu"]);

export interface TargetRow {
  kind: string;
  /** the URL, or for e-mail the comma separated addresses */
  value: string;
  secret: string;
}

const text = (v: unknown): string => (typeof v === "string" ? v : "");

export function targetRows(targets: readonly Record<string, unknown>[]): TargetRow[] {
  return targets.map((t) => {
    const kind = text(t.kind);
    const value = kind === "email" ? (Array.isArray(t.to) ? t.to.map(text).join(", ") : text(t.to)) : text(t.url);
    return { kind, value, secret: text(t.secret) };
  });
}

/** Rows as the API takes them (a masked secret sent back keeps the stored one). */
export function targetsOf(rows: readonly TargetRow[]): Record<string, unknown>[] {
  return rows.map((row) => {
    if (row.kind === "email") return { kind: "email", to: row.value.split(",").map((a) => a.trim()).filter(Boolean) };
    const target: Record<string, unknown> = { kind: row.kind, url: row.value.trim() };
    if (SIGNED_KINDS.has(row.kind) && row.secret) target.secret = row.secret;
    return target;
  });
}
