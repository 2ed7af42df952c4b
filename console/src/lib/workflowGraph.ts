// A workflow's graph in the console: the editor's form of nodes and edges (text fields, as the
// inputs hold them), the API body made from it, and a layered layout for the SVG picture.

export const NODE_KINDS = ["job", "decision", "fanout", "subworkflow"] as const;
export type NodeKind = (typeof NODE_KINDS)[number];
export const JOINS = ["all_success", "any_success", "all_done"] as const;
export const FAILURE_RULES = ["stop", "skip_descendants", "continue"] as const;

/** One node as the editor's inputs hold it (numbers as text: an empty field means "unset"). */
export interface NodeForm {
  key: string;
  kind: NodeKind;
  job_id: string;
  /** a sub-workflow node's workflow */
  workflow_id: string;
  params: string;
  join: string;
  on_failure: string;
  retries: string;
  timeout_s: string;
  result_json: boolean;
  items: string;
  parallelism: string;
}

export interface EdgeForm {
  from: string;
  to: string;
  /** a decision's condition; empty with `otherwise` false on a plain edge */
  when: string;
  otherwise: boolean;
}

type Doc = Record<string, unknown>;
const text = (v: unknown): string => (typeof v === "string" ? v : typeof v === "number" ? String(v) : "");

export function blankNode(key: string, kind: NodeKind = "job"): NodeForm {
  return {
    key, kind, job_id: "", workflow_id: "", params: "", join: "all_success", on_failure: "stop", retries: "", timeout_s: "",
    result_json: false, items: "", parallelism: kind === "fanout" ? "4" : "",
  };
}

/** A stored node (the API's JSON) as the editor's form; an unknown kind reads as a job node. */
export function nodeForm(doc: Doc): NodeForm {
  const kind = NODE_KINDS.find((k) => k === doc.kind) ?? "job";
  return {
    ...blankNode(text(doc.key), kind),
    job_id: text(doc.job_id), workflow_id: text(doc.workflow_id), params: text(doc.params), join: text(doc.join) || "all_success",
    on_failure: text(doc.on_failure) || "stop", retries: text(doc.retries), timeout_s: text(doc.timeout_s),
    result_json: doc.result_json === true, items: text(doc.items), parallelism: text(doc.parallelism),
  };
}

export function edgeForm(doc: Doc): EdgeForm {
  return { from: text(doc.from), to: text(doc.to), when: text(doc.when), otherwise: doc.else === true };
}

/** A number field as the API wants it: the number, or the text itself when it is none (so the API
 * names the field), or nothing when empty. */
function number(value: string): number | string | undefined {
  const v = value.trim();
  if (v === "") return undefined;
  return /^-?\d+$/.test(v) ? Number(v) : v;
}

/** The API's JSON of a node: only the fields of its kind, defaults left out. */
export function nodeDoc(node: NodeForm): Doc {
  const doc: Doc = { key: node.key.trim() };
  if (node.kind !== "job") doc.kind = node.kind;
  const put = (name: string, value: unknown) => {
    if (value !== undefined && value !== "") doc[name] = value;
  };
  if (node.kind === "job" || node.kind === "fanout") {
    put("job_id", number(node.job_id));
    put("params", node.params);
    if (node.result_json) doc.result_json = true;
  }
  if (node.kind === "subworkflow") put("workflow_id", number(node.workflow_id));
  if (node.kind !== "decision") {
    put("timeout_s", number(node.timeout_s));
    put("retries", number(node.retries));
  }
  if (node.kind === "fanout") {
    put("items", node.items.trim());
    put("parallelism", number(node.parallelism));
  }
  if (node.join !== "all_success") doc.join = node.join;
  if (node.on_failure !== "stop") doc.on_failure = node.on_failure;
  return doc;
}

/** The API's JSON of an edge; a condition or else only out of a decision node. */
export function edgeDoc(edge: EdgeForm, fromDecision: boolean): Doc {
  const doc: Doc = { from: edge.from, to: edge.to };
  if (!fromDecision) return doc;
  if (edge.otherwise) doc.else = true;
  else doc.when = edge.when;
  return doc;
}

export interface GraphBody {
  nodes: Doc[];
  edges: Doc[];
}

export function graphBody(nodes: readonly NodeForm[], edges: readonly EdgeForm[]): GraphBody {
  const decisions = new Set(nodes.filter((n) => n.kind === "decision").map((n) => n.key.trim()));
  return { nodes: nodes.map(nodeDoc), edges: edges.map((e) => edgeDoc(e, decisions.has(e.from))) };
}

/** A key not used yet: `prefix`, then `prefix_2`, `prefix_3` ... */
export function freeKey(taken: Iterable<string>, prefix = "node"): string {
  const used = new Set(taken);
  if (!used.has(prefix)) return prefix;
  for (let i = 2; ; i += 1) if (!used.has(`${prefix}_${i}`)) return `${prefix}_${i}`;
}

// -- layout ------------------------------------------------------------------------------------

export const BOX = { w: 168, h: 48, gapX: 64, gapY: 20, pad: 12 } as const;

export interface Placed {
  key: string;
  layer: number;
  row: number;
  x: number;
  y: number;
}

export interface Layout {
  nodes: Map<string, Placed>;
  width: number;
  height: number;
}

/** Layers by longest path from the roots (left to right), rows by the mean row of a node's
 * parents (one sweep). Nodes on a cycle, or edges to unknown keys, which the editor may hold
 * before a save is refused, do not stop the picture: such nodes go to a last layer. */
export function layout(keys: readonly string[], edges: readonly { from: string; to: string }[]): Layout {
  const known = new Set(keys);
  const parents = new Map<string, string[]>(keys.map((k) => [k, []]));
  const children = new Map<string, string[]>(keys.map((k) => [k, []]));
  for (const e of edges) {
    if (!known.has(e.from) || !known.has(e.to) || e.from === e.to) continue;
    parents.get(e.to)!.push(e.from);
    children.get(e.from)!.push(e.to);
  }
  const layer = new Map<string, number>();
  const waiting = new Map(keys.map((k) => [k, parents.get(k)!.length]));
  const queue = keys.filter((k) => waiting.get(k) === 0);
  for (const k of queue) layer.set(k, 0);
  for (let i = 0; i < queue.length; i += 1) {
    const k = queue[i]!;
    for (const c of children.get(k)!) {
      layer.set(c, Math.max(layer.get(c) ?? 0, layer.get(k)! + 1));
      const left = waiting.get(c)! - 1;
      waiting.set(c, left);
      if (left === 0) queue.push(c);
    }
  }
  const placed = new Set(queue);
  const deepest = Math.max(-1, ...queue.map((k) => layer.get(k)!));
  for (const k of keys) if (!placed.has(k)) layer.set(k, deepest + 1);

  const layers: string[][] = [];
  for (const k of keys) (layers[layer.get(k)!] ??= []).push(k);
  const row = new Map<string, number>();
  for (const members of layers) {
    if (!members) continue;
    const weight = (k: string) => {
      const rows = parents.get(k)!.map((p) => row.get(p)).filter((r): r is number => r !== undefined);
      return rows.length ? rows.reduce((a, b) => a + b, 0) / rows.length : Number.POSITIVE_INFINITY;
    };
    const order = members.map((k, i) => ({ k, i, w: weight(k) })).sort((a, b) => a.w - b.w || a.i - b.i);
    order.forEach(({ k }, i) => row.set(k, i));
  }
  const tallest = Math.max(1, ...layers.map((m) => m?.length ?? 0));
  const nodes = new Map<string, Placed>();
  for (const [l, members] of layers.entries()) {
    if (!members) continue;
    // a short layer is centred against the tallest one
    const offset = ((tallest - members.length) * (BOX.h + BOX.gapY)) / 2;
    for (const k of members) {
      const r = row.get(k)!;
      nodes.set(k, {
        key: k, layer: l, row: r, x: BOX.pad + l * (BOX.w + BOX.gapX), y: BOX.pad + offset + r * (BOX.h + BOX.gapY),
      });
    }
  }
  const width = BOX.pad * 2 + Math.max(1, layers.length) * (BOX.w + BOX.gapX) - BOX.gapX;
  const height = BOX.pad * 2 + tallest * (BOX.h + BOX.gapY) - BOX.gapY;
  return { nodes, width, height };
}

/** The SVG path of an edge from the right side of `a` to the left side of `b`. */
export function edgePath(a: Placed, b: Placed): string {
  const x1 = a.x + BOX.w;
  const y1 = a.y + BOX.h / 2;
  const x2 = b.x;
  const y2 = b.y + BOX.h / 2;
  if (x2 <= x1) {
    // a back edge (the editor holds a cycle): loop above the boxes
    const top = Math.min(a.y, b.y) - BOX.gapY / 2;
    return `M${x1} ${y1} C${x1 + 40} ${top} ${x2 - 40} ${top} ${x2} ${y2}`;
  }
  const mid = (x1 + x2) / 2;
  return `M${x1} ${y1} C${mid} ${y1} ${mid} ${y2} ${x2} ${y2}`;
}

/** A label cut to `max` characters (the whole text is in the node's tooltip). */
export function clip(value: string, max = 20): string {
  return value.length > max ? `${value.slice(0, max - 1)}…` : value;
}

/** A run's starting context from the text typed: a JSON object (empty text: `{}`), else null. */
export function parseParams(source: string): Record<string, unknown> | null {
  if (source.trim() === "") return {};
  try {
    const value: unknown = JSON.parse(source);
    return value !== null && typeof value === "object" && !Array.isArray(value) ? (value as Record<string, unknown>) : null;
  } catch {
    return null;
  }
}

/** A workflow run's states (the API's filter values). */
export const RUN_STATES = ["running", "success", "failed", "stopped"] as const;

/** What an edge shows on the picture: its condition, or "else". */
export function edgeLabel(edge: Record<string, unknown>): string | undefined {
  if (edge.else === true) return "else";
  return typeof edge.when === "string" ? edge.when : undefined;
}

/** A fan-out's items counted by state, in a fixed order. */
export function itemCounts(items: readonly Record<string, unknown>[]): [string, number][] {
  const counts = new Map<string, number>();
  for (const item of items) {
    const state = typeof item.state === "string" ? item.state : "waiting";
    counts.set(state, (counts.get(state) ?? 0) + 1);
  }
  const order = ["running", "waiting", "success", "failed", "skipped", "stopped"];
  return [...counts.entries()].sort((a, b) => order.indexOf(a[0]) - order.indexOf(b[0]));
}

export interface FanoutItem {
  index: number;
  state: string;
  attempt: number;
  /** the job run (run log) of its latest try, once it has one */
  runId: number | null;
  message: string;
}

/** A fan-out's items as the API gives them (state, run_id, attempt, message), typed. */
export function fanoutItems(items: readonly Record<string, unknown>[]): FanoutItem[] {
  return items.map((item, i) => ({
    index: typeof item.index === "number" ? item.index : i,
    state: typeof item.state === "string" ? item.state : "waiting",
    attempt: typeof item.attempt === "number" ? item.attempt : 0,
    runId: typeof item.run_id === "number" ? item.run_id : null,
    message: typeof item.message === "string" ? item.message : "",
  }));
}

/** Where a refusal's field points: `nodes[2].job_id` -> node 2, `job_id`; `edges[1].when` -> edge 1;
 * `name` -> the workflow's own field. */
export function refusedAt(field: string | null): { node: number | null; edge: number | null; name: string } {
  const m = /^(nodes|edges)\[(\d+)\](?:\.(\w+))?/.exec(field ?? "");
  if (!m) return { node: null, edge: null, name: (field ?? "").split(".")[0] ?? "" };
  const index = Number(m[2]);
  return m[1] === "nodes" ? { node: index, edge: null, name: m[3] ?? "key" } : { node: null, edge: index, name: m[3] ?? "" };
}
