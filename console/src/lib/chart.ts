// Axis ticks and labels of the dashboard's chart.

/** Ticks from 0 past `max` in steps of 1, 2 or 5 times a power of ten (about `count` of them). */
export function niceTicks(max: number, count = 4): number[] {
  const rough = Math.max(1, max) / count;
  const power = 10 ** Math.floor(Math.log10(rough));
  const step = ([1, 2, 5, 10].map((m) => m * power).find((s) => s >= rough) ?? 10 * power);
  const whole = Math.max(1, Math.round(step));
  const ticks: number[] = [];
  for (let v = 0; v < max + whole; v += whole) {
    ticks.push(v);
    if (v >= max) break;
  }
  return ticks.length > 1 ? ticks : [0, whole];
}

/** A tick value short enough for the axis: 12,000 -> "12K" (English), "1.2万" (Chinese). */
export function tickLabel(value: number, lang: string): string {
  return new Intl.NumberFormat(lang, { notation: "compact", maximumFractionDigits: 1 }).format(value);
}

/** Success / (success + failed) in percent; null for a day without finished runs. */
export function successRatio(success: number, fail: number): number | null {
  const done = success + fail;
  return done === 0 ? null : (100 * success) / done;
}
