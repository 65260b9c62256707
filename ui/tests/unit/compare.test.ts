import { describe, expect, it } from "vitest";
import { bestOfKind, formatRatio, latencyOf, ratio, settingsDiff } from "../../src/lib/compare";
import type { DecodeSettings, RunSummary } from "../../src/lib/bindings";
import { loadFixtures } from "../fixtures";

const m = (value: number) => ({ value, kind: "measured" as const });
const s = (value: number) => ({ value, kind: "simulated" as const });

describe("compare", () => {
  it("never ranks a simulated value against a measured one", () => {
    // 47 ms simulated is lower than 295 ms measured, but they are not comparable.
    expect([...bestOfKind([m(0.295), s(0.047)])]).toEqual([]);
    expect([...bestOfKind([m(0.295), s(0.047), m(0.2)])]).toEqual([2]);
    expect([...bestOfKind([s(0.05), m(0.3), s(0.04), null])]).toEqual([2]);
    expect([...bestOfKind([m(1), m(2)], true)]).toEqual([1]);
    expect([...bestOfKind([m(1), m(1)])]).toEqual([]);
  });
  it("takes a vNPU run's latency as simulated and a CPU run's as measured", () => {
    const runs = loadFixtures().map((f) => f.run.detail.summary);
    for (const r of runs) {
      const l = latencyOf(r);
      expect(l?.kind).toBe(r.simulatedS !== null ? "simulated" : "measured");
    }
    const base = runs[0] as RunSummary;
    expect(latencyOf({ ...base, simulatedS: null, wallS: null })).toBeNull();
  });
  it("ratios only between values of the same kind", () => {
    expect(ratio(m(0.5), m(0.21))).toBeCloseTo(0.42);
    expect(ratio(m(0.5), s(0.21))).toBeNull();
    expect(ratio(null, m(1))).toBeNull();
    expect(ratio(m(0), m(1))).toBeNull();
    expect(formatRatio(0.42)).toBe("0.42×");
    expect(formatRatio(2.1)).toBe("2.10×");
    expect(formatRatio(null)).toBe("–");
  });
  it("lists only the settings that differ, with every run's value", () => {
    const a = loadFixtures()[0].run.detail.summary.settings;
    const b: DecodeSettings = { ...a, speculative: !a.speculative, steps: a.steps };
    const c: DecodeSettings = { ...a, threshold: 0.9 };
    expect(settingsDiff([a, b, c])).toEqual([
      { key: "speculative", values: [a.speculative, !a.speculative, a.speculative] },
      { key: "threshold", values: [a.threshold, a.threshold, 0.9] },
    ]);
    expect(settingsDiff([a, { ...a }])).toEqual([]);
  });
});
