import type { Run, RunState } from "../api/client";

/** Every run state, in the order the console lists them (the API's `RunState`). */
export const RUN_STATES: readonly RunState[] = [
  "scheduled", "queued", "dispatching", "running", "success", "failed", "killed", "timed_out", "lost", "skipped",
];

const GOING: ReadonlySet<RunState> = new Set(["scheduled", "queued", "dispatching", "running"]);

/** True once the run has ended: the console stops polling it. */
export function isFinal(state: RunState): boolean {
  return !GOING.has(state);
}

type Timed = Pick<Run, "state" | "trigger_time" | "duration_ms">;

/** The API's duration once the run has finished; while it runs, the time since it was triggered. */
export function runDuration(run: Timed, nowMs: number): number | null {
  if (run.duration_ms !== null) return run.duration_ms;
  if (run.state !== "running" || !run.trigger_time) return null;
  return Math.max(0, nowMs - new Date(run.trigger_time).getTime());
}

/** The duration as text; a running run's time (counted from whole seconds) shows "< 1 s" for under a second. */
export function runDurationText(
  run: Timed, nowMs: number, format: (ms: number | null) => string, underASecond = "< 1 s",
): string {
  const ms = runDuration(run, nowMs);
  if (ms !== null && run.duration_ms === null && ms < 1000) return underASecond;
  return format(ms);
}
