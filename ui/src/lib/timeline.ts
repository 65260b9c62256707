// Zoom/pan math of the profiler timeline: a visible window [start, end] in seconds within bounds.

/** The visible time window, seconds. */
export type View = { start: number; end: number };

/** Smallest window relative to the full range (limits zoom-in to 10,000x). */
export const MIN_SPAN_FRACTION = 1e-4;

/** A slice with both times known. */
export type Slice<T> = T & { startS: number; durS: number };

/**
 * Slices whose start is known; a missing duration (serde writes a non-finite f64 as null) is
 * drawn as an instant.
 */
export function solidSlices<T extends { startS: number | null; durS: number | null }>(events: readonly T[]): Slice<T>[] {
  return events.flatMap((e) =>
    e.startS === null || !Number.isFinite(e.startS) ? [] : [{ ...e, startS: e.startS, durS: e.durS ?? 0 }]);
}

/** Counter points with both coordinates known. */
export function solidPoints(points: readonly [number | null, number | null][]): [number, number][] {
  return points.flatMap((p) => (p[0] === null || p[1] === null ? [] : [[p[0], p[1]] as [number, number]]));
}

/** Whole range of a set of slices; a zero-length range is widened to avoid division by zero. */
export function fullView(events: readonly { startS: number; durS: number }[]): View {
  if (events.length === 0) return { start: 0, end: 1 };
  let start = Infinity;
  let end = -Infinity;
  for (const e of events) {
    start = Math.min(start, e.startS);
    end = Math.max(end, e.startS + e.durS);
  }
  if (!(end > start)) end = start + 1e-6;
  return { start, end };
}

/** Keeps `v` inside `bounds`, preserving its span where possible. */
export function clampView(v: View, bounds: View): View {
  const full = bounds.end - bounds.start;
  let span = Math.min(Math.max(v.end - v.start, full * MIN_SPAN_FRACTION), full);
  let start = v.start;
  if (start < bounds.start) start = bounds.start;
  if (start + span > bounds.end) start = bounds.end - span;
  return { start, end: start + span };
}

/**
 * Zooms by `factor` (> 1 zooms in) keeping the time under `anchor` (0..1 across the width) fixed.
 */
export function zoomAt(v: View, factor: number, anchor: number, bounds: View): View {
  const a = Math.min(1, Math.max(0, anchor));
  const t = v.start + a * (v.end - v.start);
  const span = (v.end - v.start) / factor;
  return clampView({ start: t - a * span, end: t - a * span + span }, bounds);
}

/** Pans by `fraction` of the visible span (positive moves later in time). */
export function pan(v: View, fraction: number, bounds: View): View {
  const d = fraction * (v.end - v.start);
  return clampView({ start: v.start + d, end: v.end + d }, bounds);
}

/** Maps a time to an x pixel within `width`. */
export function timeToX(t: number, v: View, width: number): number {
  return ((t - v.start) / (v.end - v.start)) * width;
}

/** About `target` evenly spaced tick times at a 1/2/5 x 10^k step. */
export function ticks(v: View, target = 6): number[] {
  const span = v.end - v.start;
  if (!(span > 0)) return [v.start];
  const raw = span / target;
  const mag = 10 ** Math.floor(Math.log10(raw));
  const norm = raw / mag;
  const step = (norm < 1.5 ? 1 : norm < 3.5 ? 2 : norm < 7.5 ? 5 : 10) * mag;
  const out: number[] = [];
  for (let t = Math.ceil(v.start / step) * step; t <= v.end + step * 1e-9; t += step) {
    out.push(Number(t.toPrecision(12)));
  }
  return out;
}

/** Slices overlapping the window, for culling what is drawn. */
export function visible<T extends { startS: number; durS: number }>(events: readonly T[], v: View): T[] {
  return events.filter((e) => e.startS + e.durS >= v.start && e.startS <= v.end);
}
