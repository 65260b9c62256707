import { describe, expect, it } from "vitest";
import { clampView, fullView, MIN_SPAN_FRACTION, pan, solidPoints, solidSlices, ticks, timeToX, visible, zoomAt } from "../../src/lib/timeline";

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
