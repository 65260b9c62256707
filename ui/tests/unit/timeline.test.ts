import { describe, expect, it } from "vitest";
import { clampView, counterInfo, explicitLanes, fullView, MIN_SPAN_FRACTION, moveSelection, nestSlices, pan, pickSlice, rowIndex, rowKey,
  solidPoints, solidSlices, tickLabel, ticks, timeToX, unionView, visible, zoomAt } from "../../src/lib/timeline";

const bounds = { start: 0, end: 10 };

describe("timeline zoom math", () => {
  it("fullView spans all slices and widens an empty range", () => {
    expect(fullView([{ startS: 2, durS: 1 }, { startS: 0.5, durS: 0.25 }])).toEqual({ start: 0.5, end: 3 });
    expect(fullView([])).toEqual({ start: 0, end: 1 });
    const z = fullView([{ startS: 1, durS: 0 }]);
    expect(z.end).toBeGreaterThan(z.start);
  });

  it("zoomAt keeps the time under the anchor fixed", () => {
    const v = zoomAt(bounds, 2, 0.25, bounds);
    expect(v.end - v.start).toBeCloseTo(5);
    expect(v.start + 0.25 * (v.end - v.start)).toBeCloseTo(2.5);
    const w = zoomAt(v, 4, 0.5, bounds);
    expect(w.start + 0.5 * (w.end - w.start)).toBeCloseTo(v.start + 0.5 * (v.end - v.start));
  });

  it("zooming out never leaves the bounds and zooming in stops at the minimum span", () => {
    expect(zoomAt({ start: 8, end: 9 }, 0.01, 0.9, bounds)).toEqual(bounds);
    let v = bounds;
    for (let i = 0; i < 40; i++) v = zoomAt(v, 2, 0.5, bounds);
    expect(v.end - v.start).toBeCloseTo(10 * MIN_SPAN_FRACTION);
  });

  it("pan moves by a fraction of the span and clamps at the edges", () => {
    const v = { start: 2, end: 4 };
    expect(pan(v, 0.5, bounds)).toEqual({ start: 3, end: 5 });
    expect(pan(v, -5, bounds)).toEqual({ start: 0, end: 2 });
    expect(pan(v, 50, bounds)).toEqual({ start: 8, end: 10 });
    expect(clampView({ start: -1, end: 20 }, bounds)).toEqual(bounds);
  });

  it("timeToX maps the window onto the width", () => {
    expect(timeToX(2, { start: 2, end: 4 }, 800)).toBe(0);
    expect(timeToX(3, { start: 2, end: 4 }, 800)).toBe(400);
    expect(timeToX(5, { start: 2, end: 4 }, 800)).toBe(1200);
  });

  it("ticks use 1/2/5 steps inside the window", () => {
    expect(ticks({ start: 0, end: 10 }, 5)).toEqual([0, 2, 4, 6, 8, 10]);
    expect(ticks({ start: 0.013, end: 0.031 }, 4)).toEqual([0.015, 0.02, 0.025, 0.03]);
    const t = ticks({ start: 1e-6, end: 7.3e-6 }, 6);
    expect(t.length).toBeGreaterThanOrEqual(4);
    expect(t.every((x) => x >= 1e-6 && x <= 7.3e-6)).toBe(true);
  });

  it("visible culls slices outside the window", () => {
    const ev = [{ startS: 0, durS: 1 }, { startS: 3, durS: 1 }, { startS: 1.5, durS: 3 }];
    expect(visible(ev, { start: 1.2, end: 2.8 })).toEqual([ev[2]]);
  });
});

describe("null times from serde (non-finite f64)", () => {
  it("drops slices without a start and draws a missing duration as an instant", () => {
    const ev = [{ n: "a", startS: 1, durS: null }, { n: "b", startS: null, durS: 2 }, { n: "c", startS: 2, durS: 0.5 }];
    expect(solidSlices(ev)).toEqual([{ n: "a", startS: 1, durS: 0 }, { n: "c", startS: 2, durS: 0.5 }]);
    expect(fullView(solidSlices(ev))).toEqual({ start: 1, end: 2.5 });
  });
  it("drops counter points with a missing coordinate", () => {
    expect(solidPoints([[0, 1], [null, 2], [1, null], [2, 3]])).toEqual([[0, 1], [2, 3]]);
  });
});

describe("nested slices", () => {
  const ev = (lane: string, startS: number, durS: number) => ({ lane, startS, durS });
  // A forward pass on the NPU holding three back-to-back operators, a second forward, and a
  // CPU slice overlapping the first forward (other lane, so not nested).
  const events = [
    ev("npu", 0, 1), ev("npu", 0.1, 0.2), ev("npu", 0.1 + 0.2, 0.3), ev("npu", 0.1 + 0.2 + 0.3, 0.4),
    ev("cpu0", 0, 0.5), ev("npu", 2, 1), ev("npu", 2.5, 0.1),
  ];
  it("puts slices contained in another slice of the same lane one row lower", () => {
    const n = nestSlices(events);
    expect(n.depth).toEqual([0, 1, 1, 1, 0, 0, 1]);
    expect(n.parent).toEqual([null, 0, 0, 0, null, null, 5]);
    expect(n.maxDepth.get("npu")).toBe(1);
    expect(n.maxDepth.get("cpu0")).toBe(0);
  });
  it("nests operators whose float sum overshoots the parent's end by ulps, and not back-to-back slices", () => {
    const end = 0.1 + 0.2 + 0.3 + 0.4; // 1.0000000000000002 > 1
    const n = nestSlices([ev("npu", 0, 1), ev("npu", 0.1 + 0.2 + 0.3, end - 0.6), ev("npu", 1, 0.5)]);
    expect(n.depth).toEqual([0, 1, 0]);
    expect(n.parent).toEqual([null, 0, null]);
  });
  it("stacks three levels and starts again after a gap", () => {
    const n = nestSlices([ev("a", 0, 10), ev("a", 1, 5), ev("a", 2, 1), ev("a", 4, 1), ev("a", 20, 1)]);
    expect(n.depth).toEqual([0, 1, 2, 2, 0]);
    expect(n.parent).toEqual([null, 0, 1, 1, null]);
    expect(n.maxDepth.get("a")).toBe(2);
  });
  it("picks the slice under a time in a sub-row, or the nearest within the slack", () => {
    const n = nestSlices(events);
    const rows = rowIndex(events, n);
    expect(rows.get(rowKey("npu", 1))).toEqual([1, 2, 3, 6]);
    expect(pickSlice(events, rows, rowKey("npu", 1), 0.35, 0)).toBe(2);
    expect(pickSlice(events, rows, rowKey("npu", 0), 1.5, 0.1)).toBeNull();
    expect(pickSlice(events, rows, rowKey("npu", 0), 1.95, 0.1)).toBe(5);
    expect(pickSlice(events, rows, rowKey("dma", 0), 0.5, 1)).toBeNull();
  });
  it("moves a keyboard selection along a sub-row and between sub-rows", () => {
    const n = nestSlices(events);
    const rows = rowIndex(events, n);
    const order = [rowKey("npu", 0), rowKey("npu", 1), rowKey("cpu0", 0)];
    expect(moveSelection(events, n, rows, order, 1, "next")).toBe(2);
    expect(moveSelection(events, n, rows, order, 1, "prev")).toBe(1);
    expect(moveSelection(events, n, rows, order, 0, "down")).toBe(2);
    expect(moveSelection(events, n, rows, order, 2, "up")).toBe(0);
    expect(moveSelection(events, n, rows, order, 1, "down")).toBe(4);
    expect(moveSelection(events, n, rows, order, 4, "down")).toBe(4);
  });
});

describe("lanes and counters", () => {
  const npu = { id: "npu", label: "NPU", kind: "npu" as const };
  const cpu0 = { id: "cpu0", label: "CPU 0", kind: "cpu" as const };
  it("always shows NPU, CPU and DMA for a simulated run, an empty lane with a note", () => {
    const lanes = explicitLanes([npu, cpu0], true, [{ lane: "npu" }, { lane: "cpu0" }]);
    expect(lanes.map((l) => [l.kind, l.note])).toEqual([["npu", null], ["cpu", null], ["dma", "no DMA transfers in this run"]]);
    const onlyDma = explicitLanes([{ id: "dma", label: "DMA", kind: "dma" }], true, [{ lane: "dma" }]);
    expect(onlyDma.map((l) => l.kind)).toEqual(["npu", "cpu", "dma"]);
    expect(onlyDma.filter((l) => l.note).length).toBe(2);
  });
  it("keeps a measured run's own lanes", () => {
    expect(explicitLanes([cpu0], false, [{ lane: "cpu0" }])).toEqual([{ ...cpu0, note: null }]);
  });
  it("names counters readably with units, and prettifies unknown ones", () => {
    expect(counterInfo("energy_active_j", "J")).toMatchObject({ label: "Active energy, cumulative", unit: "J" });
    expect(counterInfo("npu_visible_bytes", "bytes")).toMatchObject({ label: "NPU-visible memory", unit: "bytes" });
    expect(counterInfo("committed tokens", "")).toMatchObject({ label: "Committed tokens", unit: "tokens" });
    expect(counterInfo("dma_queue_bytes", "")).toEqual({ label: "Dma queue", unit: "bytes", note: "" });
    expect(counterInfo("cpu_power_w", "W")).toEqual({ label: "Cpu power", unit: "W", note: "" });
    expect(counterInfo("odd", "")).toEqual({ label: "Odd", unit: "", note: "" });
  });
  it("unionView spans every compared range", () => {
    expect(unionView([{ start: 0, end: 0.295 }, { start: 0, end: 0.047 }])).toEqual({ start: 0, end: 0.295 });
    expect(unionView([])).toBeNull();
  });
});

describe("recorded vNPU timeline", () => {
  it("nests every per-layer operator under its forward pass, one row lower", async () => {
    const { loadFixtures } = await import("../fixtures");
    for (const f of loadFixtures()) {
      const tl = f.run.detail.timeline;
      if (!tl || !tl.simulated) continue;
      const events = solidSlices(tl.events);
      const n = nestSlices(events);
      const npu = events.flatMap((e, i) => (e.lane === "npu" ? [i] : []));
      const forwards = npu.filter((i) => n.depth[i] === 0);
      expect(forwards.length).toBeGreaterThan(0);
      for (const i of npu) {
        if (n.depth[i] === 0) continue;
        expect(n.depth[i]).toBe(1);
        expect(forwards).toContain(n.parent[i]);
      }
      // No two slices of one sub-row overlap, so labels never collide.
      for (const row of rowIndex(events, n).values()) {
        for (let k = 1; k < row.length; k++) {
          const a = events[row[k - 1]];
          expect(a.startS + a.durS).toBeLessThanOrEqual(events[row[k]].startS + 1e-9);
        }
      }
    }
  });
});

describe("tick labels", () => {
  it("use enough decimals that neighbouring ticks differ", () => {
    const v = { start: 0.02365, end: 0.02402 };
    const ts = ticks(v, 12);
    const step = ts[1] - ts[0];
    const labels = ts.map((t) => tickLabel(t, step, v.end));
    expect(new Set(labels).size).toBe(labels.length);
    expect(labels[0]).toMatch(/^23\.\d+ ms$/);
    expect(tickLabel(0, 0.005, 0.0476)).toBe("0 ms");
    expect(tickLabel(0.045, 0.005, 0.0476)).toBe("45 ms");
    expect(tickLabel(2.5, 0.5, 10)).toBe("2.5 s");
    expect(tickLabel(3e-6, 1e-6, 8e-6)).toBe("3 µs");
  });
});
