// What the Compare screen derives from the compared runs: settings that differ, ratios against
// the first run, and "best" values that only ever rank values of the same kind.
import type { DecodeSettings, RunSummary } from "./bindings";

/** How a time or energy value was obtained. */
export type ValueKind = "measured" | "simulated";

/** A value with its kind; null when the run has none. */
export type KindedValue = { value: number; kind: ValueKind } | null;

/**
 * Indices of the best (lowest, or highest with `higherIsBetter`) values, ranked only among
 * values of the same kind: a simulated time never beats a measured one. A kind with fewer
 * than two values has no best.
 */
export function bestOfKind(values: readonly KindedValue[], higherIsBetter = false): Set<number> {
  const out = new Set<number>();
  for (const kind of ["measured", "simulated"] as const) {
    const same = values.flatMap((v, i) => (v !== null && v.kind === kind && Number.isFinite(v.value) ? [i] : []));
    if (same.length < 2) continue;
    const pick = (higherIsBetter ? Math.max : Math.min)(...same.map((i) => (values[i] as { value: number }).value));
    // All equal: nothing stands out.
    if (same.every((i) => (values[i] as { value: number }).value === pick)) continue;
    for (const i of same) if ((values[i] as { value: number }).value === pick) out.add(i);
  }
  return out;
}

/** The headline latency of a run: simulated device time on a virtual NPU, else measured wall time. */
export function latencyOf(s: RunSummary): KindedValue {
  if (s.simulatedS !== null) return { value: s.simulatedS, kind: "simulated" };
  if (s.wallS !== null) return { value: s.wallS, kind: "measured" };
  return null;
}

/** Settings whose values are not the same in every run, with each run's value, in key order. */
export function settingsDiff(settings: readonly DecodeSettings[]): { key: string; values: unknown[] }[] {
  const keys = [...new Set(settings.flatMap((s) => Object.keys(s)))].sort();
  return keys.flatMap((key) => {
    const values = settings.map((s) => (s as Record<string, unknown>)[key] ?? null);
    const same = values.every((v) => JSON.stringify(v) === JSON.stringify(values[0]));
    return same ? [] : [{ key, values }];
  });
}

/** `b / a` when both are known, of the same kind, and `a` is not zero. */
export function ratio(a: KindedValue, b: KindedValue): number | null {
  if (a === null || b === null || a.kind !== b.kind || a.value === 0) return null;
  return b.value / a.value;
}

/** "0.42×", "–" when there is no ratio. */
export function formatRatio(r: number | null): string {
  if (r === null || !Number.isFinite(r)) return "–";
  return `${r < 10 ? r.toFixed(2) : r.toPrecision(3)}×`;
}
