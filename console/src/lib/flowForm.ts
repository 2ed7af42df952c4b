import type { Schemas } from "../api/client";

/** Flow control of a job or a group as a form: empty strings are "not set". */
export interface FlowForm {
  max_concurrent_runs: string | number;
  concurrency_key: string;
  key_limit: string | number;
  on_limit: "queue" | "skip" | "cancel_oldest";
  rate_limit: string | number;
  rate_period: "second" | "minute" | "hour";
  priority: string;
}

export const ON_LIMIT = ["queue", "skip", "cancel_oldest"] as const;
export const RATE_PERIODS = ["second", "minute", "hour"] as const;

export function blankFlow(): FlowForm {
  return { max_concurrent_runs: "", concurrency_key: "", key_limit: "", on_limit: "queue", rate_limit: "",
    rate_period: "second", priority: "" };
}

export function flowFormOf(flow: Schemas["FlowOut"] | null | undefined): FlowForm {
  if (!flow) return blankFlow();
  return {
    max_concurrent_runs: flow.max_concurrent_runs ?? "", concurrency_key: flow.concurrency_key ?? "",
    key_limit: flow.key_limit ?? "", on_limit: flow.on_limit as FlowForm["on_limit"], rate_limit: flow.rate_limit ?? "",
    rate_period: flow.rate_period as FlowForm["rate_period"], priority: flow.priority === null ? "" : String(flow.priority),
  };
}

const count = (value: string | number): number | null => (String(value).trim() === "" ? null : Number(value));

/** The API's body: null when nothing is set (no flow control). */
export function flowOf(form: FlowForm): Schemas["FlowIn"] | null {
  const key = form.concurrency_key.trim();
  const body: Schemas["FlowIn"] = {
    max_concurrent_runs: count(form.max_concurrent_runs),
    concurrency_key: key || null,
    key_limit: key ? count(form.key_limit) : null,
    rate_limit: count(form.rate_limit),
    priority: form.priority ? Number(form.priority) : null,
  };
  const set = Object.values(body).some((v) => v !== null);
  if (!set) return null;
  if (form.on_limit !== "queue") body.on_limit = form.on_limit;
  if (body.rate_limit !== null && form.rate_period !== "second") body.rate_period = form.rate_period;
  return body;
}
