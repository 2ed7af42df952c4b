/** A distributed run's progress as bar segments (percent of the total, rounded down so the
 * segments never add up past 100) and its one-line summary. */
export interface ProgressCounts {
  total: number;
  succeeded: number;
  failed: number;
  running: number;
}

export interface ProgressBar {
  succeeded: number;
  failed: number;
  running: number;
  done: number;
}

export function progressBar(p: ProgressCounts): ProgressBar {
  const pct = (n: number): number => (p.total > 0 ? Math.floor((n * 100) / p.total) : 0);
  const done = p.total > 0 ? Math.floor(((p.succeeded + p.failed) * 100) / p.total) : 100;
  return { succeeded: pct(p.succeeded), failed: pct(p.failed), running: pct(p.running), done };
}

/** The sub-task's result or message as one short line (a result is JSON). */
export function subtaskOutcome(task: { status: string; result?: unknown; message?: string | null }, max = 80): string {
  const text = task.status === "succeeded" ? (task.result === undefined ? "" : JSON.stringify(task.result) ?? "") : task.message ?? "";
  return text.length <= max ? text : `${text.slice(0, max - 1)}…`;
}
