/** The run states the console shows (the API's `state` when present, else derived). */
export type RunState =
  | "scheduled"
  | "dispatching"
  | "running"
  | "success"
  | "failed"
  | "killed"
  | "timed_out"
  | "lost"
  | "skipped";

export interface RunLike {
  state?: string | null;
  trigger_code: number;
  handle_code: number;
  handle_msg?: string | null;
  trigger_time?: string | null;
  handle_time?: string | null;
  duration_ms?: number | null;
}

const KNOWN = new Set<string>([
  "scheduled", "dispatching", "running", "success", "failed", "killed", "timed_out", "lost", "skipped",
]);

export function runState(run: RunLike): RunState {
  if (run.state && KNOWN.has(run.state)) return run.state as RunState;
  if (run.handle_code === 200) return "success";
  const msg = run.handle_msg ?? "";
  if (run.handle_code !== 0) {
    if (msg.startsWith("killed by user")) return "killed";
    if (run.handle_code === 502) return "timed_out";
    if (msg.includes("result lost")) return "lost";
    return "failed";
  }
  if (run.trigger_code === 0) return "scheduled";
  if (run.trigger_code === 200) return "running";
  return "failed";
}

export function isFinal(state: RunState): boolean {
  return !["scheduled", "dispatching", "running"].includes(state);
}

/** The run's duration in ms (the API's when present, else handle minus trigger time). */
export function runDuration(run: RunLike, nowMs: number): number | null {
  if (run.duration_ms !== undefined && run.duration_ms !== null) return run.duration_ms;
  if (!run.trigger_time) return null;
  const start = new Date(run.trigger_time).getTime();
  if (run.handle_time) return Math.max(0, new Date(run.handle_time).getTime() - start);
  return runState(run) === "running" ? Math.max(0, nowMs - start) : null;
}

/** The duration as text; times of whole seconds (no `duration_ms`) show "< 1 s" for 0. */
export function runDurationText(run: RunLike, nowMs: number, format: (ms: number | null) => string): string {
  const ms = runDuration(run, nowMs);
  const exact = run.duration_ms !== undefined && run.duration_ms !== null;
  if (ms !== null && !exact && ms < 1000) return "< 1 s";
  return format(ms);
}
