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

/** A slice with its lane, as nesting and hit testing need it. */
type Placed = { lane: string; startS: number; durS: number };

/**
 * How slices nest on their lanes: `depth[i]` is the sub-row of slice i (0 = top level) and
 * `parent[i]` the innermost slice of the same lane that contains it. A slice that starts
 * inside another one is drawn one sub-row lower, so operators never cover their forward pass.
 */
export type Nesting = { depth: number[]; parent: (number | null)[]; maxDepth: Map<string, number> };

/** Slack for containment: back-to-back operator durations summed in f64 overshoot their parent's end by a few ulps. */
const nestSlack = (t: number) => 1e-12 + 1e-9 * Math.abs(t);

export function nestSlices(events: readonly Placed[]): Nesting {
  const depth = new Array<number>(events.length).fill(0);
  const parent = new Array<number | null>(events.length).fill(null);
  const maxDepth = new Map<string, number>();
  const byLane = new Map<string, number[]>();
  events.forEach((e, i) => {
    const list = byLane.get(e.lane);
    if (list) list.push(i);
    else byLane.set(e.lane, [i]);
  });
  for (const [lane, idx] of byLane) {
    // Earlier first; at equal starts the longer (enclosing) slice first.
    idx.sort((a, b) => events[a].startS - events[b].startS || events[b].durS - events[a].durS || a - b);
    const open: number[] = [];
    let max = 0;
    for (const i of idx) {
      const e = events[i];
      while (open.length > 0) {
        const top = events[open[open.length - 1]];
        const topEnd = top.startS + top.durS;
        if (topEnd <= e.startS + nestSlack(topEnd)) open.pop();
        else break;
      }
      depth[i] = open.length;
      const end = e.startS + e.durS;
      for (let k = open.length - 1; k >= 0; k--) {
        const o = events[open[k]];
        const oEnd = o.startS + o.durS;
        if (end <= oEnd + nestSlack(oEnd)) {
          parent[i] = open[k];
          break;
        }
      }
      open.push(i);
      max = Math.max(max, depth[i]);
    }
    maxDepth.set(lane, max);
  }
  return { depth, parent, maxDepth };
}

/** Slices of each (lane, depth) row in time order, keyed by `rowKey`. */
export function rowIndex(events: readonly Placed[], nesting: Nesting): Map<string, number[]> {
  const rows = new Map<string, number[]>();
  events.forEach((e, i) => {
    const k = rowKey(e.lane, nesting.depth[i]);
    const list = rows.get(k);
    if (list) list.push(i);
    else rows.set(k, [i]);
  });
  for (const list of rows.values()) list.sort((a, b) => events[a].startS - events[b].startS || a - b);
  return rows;
}

/** Key of a sub-row: lane id and depth. */
export const rowKey = (lane: string, depth: number) => `${lane}#${depth}`;

/**
 * The slice of sub-row `key` under time `t`, or the nearest one within `slackS` seconds (thin
 * slices are hard to hit with a finger); null when there is none.
 */
export function pickSlice(events: readonly Placed[], rows: Map<string, number[]>, key: string, t: number,
  slackS: number): number | null {
  let best: number | null = null;
  let bestGap = Infinity;
  for (const i of rows.get(key) ?? []) {
    const e = events[i];
    const gap = t < e.startS ? e.startS - t : t > e.startS + e.durS ? t - (e.startS + e.durS) : 0;
    if (gap < bestGap) {
      best = i;
      bestGap = gap;
    }
  }
  return bestGap <= slackS ? best : null;
}

/** Keyboard moves between slices: along the sub-row in time, or to the neighbouring sub-row. */
export type SliceMove = "next" | "prev" | "up" | "down";

/**
 * The slice reached from `from` by `move`; `rowOrder` lists sub-row keys top to bottom. Up and
 * down pick the slice of the neighbouring non-empty sub-row closest in time to `from`'s middle.
 */
export function moveSelection(events: readonly Placed[], nesting: Nesting, rows: Map<string, number[]>,
  rowOrder: readonly string[], from: number, move: SliceMove): number {
  const e = events[from];
  const key = rowKey(e.lane, nesting.depth[from]);
  const own = rows.get(key) ?? [from];
  const at = own.indexOf(from);
  if (move === "next") return own[Math.min(own.length - 1, at + 1)] ?? from;
  if (move === "prev") return own[Math.max(0, at - 1)] ?? from;
  const dir = move === "down" ? 1 : -1;
  const mid = e.startS + e.durS / 2;
  for (let r = rowOrder.indexOf(key) + dir; r >= 0 && r < rowOrder.length; r += dir) {
    const pick = pickSlice(events, rows, rowOrder[r], mid, Infinity);
    if (pick !== null) return pick;
  }
  return from;
}

/** A lane as drawn; `note` says why an always-shown lane is empty. */
export type LaneSpec = { id: string; label: string; kind: "npu" | "cpu" | "dma"; note: string | null };

const emptyLaneNote = { npu: "no NPU work in this run", cpu: "no CPU-side tasks in this run",
  dma: "no DMA transfers in this run" } as const;

/**
 * The lanes to draw. A simulated (virtual NPU) timeline always shows NPU, CPU and DMA, an
 * empty one with a note, so a missing lane reads as "nothing happened there" rather than
 * going unnoticed. A measured CPU run shows only the lanes it has.
 */
export function explicitLanes(lanes: readonly { id: string; label: string; kind: "npu" | "cpu" | "dma" }[],
  simulated: boolean, events: readonly { lane: string }[]): LaneSpec[] {
  const used = new Set(events.map((e) => e.lane));
  const out: LaneSpec[] = lanes.map((l) => ({ ...l, note: used.has(l.id) ? null : emptyLaneNote[l.kind] }));
  if (!simulated) return out;
  const has = (kind: LaneSpec["kind"]) => out.some((l) => l.kind === kind);
  if (!has("npu")) out.unshift({ id: "npu", label: "NPU", kind: "npu", note: emptyLaneNote.npu });
  if (!has("cpu")) {
    const after = out.filter((l) => l.kind === "npu").length;
    out.splice(after, 0, { id: "cpu", label: "CPU", kind: "cpu", note: emptyLaneNote.cpu });
  }
  if (!has("dma")) out.push({ id: "dma", label: "DMA", kind: "dma", note: emptyLaneNote.dma });
  return out;
}

/** The smallest window holding every given window (the shared axis of compared timelines). */
export function unionView(views: readonly View[]): View | null {
  if (views.length === 0) return null;
  return { start: Math.min(...views.map((v) => v.start)), end: Math.max(...views.map((v) => v.end)) };
}

/** How a counter is shown: a readable name, its unit and what it counts. */
export type CounterInfo = { label: string; unit: string; note: string };

const knownCounters: Record<string, CounterInfo> = {
  npu_visible_bytes: { label: "NPU-visible memory", unit: "bytes",
    note: "weights and K/V resident in memory the NPU can address, sampled per forward (simulated)" },
  energy_active_j: { label: "Active energy, cumulative", unit: "J",
    note: "busy lanes × their active power plus DRAM traffic; leaves out NPU idle power (simulated)" },
  committed_tokens: { label: "Committed tokens", unit: "tokens",
    note: "generated positions holding a token after each step" },
};

const unitSuffixes: [RegExp, string][] = [[/_bytes$/, "bytes"], [/_j$/, "J"], [/_w$/, "W"], [/_s$/, "s"]];

/**
 * The readable name and unit of a counter (names come from the engine trace and the app's
 * measured timeline); unknown names are prettified ("dma_queue_bytes" -> "Dma queue", bytes).
 */
export function counterInfo(name: string, unit: string): CounterInfo {
  const known = knownCounters[name.replace(/ /g, "_")];
  if (known) return known;
  let base = name;
  let u = unit;
  for (const [re, suffixUnit] of unitSuffixes) {
    if (re.test(base)) {
      base = base.replace(re, "");
      if (u === "") u = suffixUnit;
      break;
    }
  }
  const words = base.replace(/[_\s]+/g, " ").trim();
  const label = words === "" ? name : words[0].toUpperCase() + words.slice(1);
  return { label, unit: u, note: "" };
}

/**
 * Axis label of tick `t` with as many decimals as the tick `step` needs, in the unit that suits
 * the largest time `end` on the axis, so neighbouring ticks never read the same ("23.72 ms").
 */
export function tickLabel(t: number, step: number, end: number): string {
  const units: [number, string][] = [[1, "s"], [1e-3, "ms"], [1e-6, "µs"], [1e-9, "ns"]];
  const [scale, name] = units.find(([s]) => Math.abs(end) >= s) ?? units[units.length - 1];
  const decimals = step > 0 ? Math.min(6, Math.max(0, Math.ceil(-Math.log10(step / scale) - 1e-9))) : 0;
  const v = t / scale;
  return `${(Math.abs(v) < 0.5 * 10 ** -decimals ? 0 : v).toFixed(decimals)} ${name}`;
}
