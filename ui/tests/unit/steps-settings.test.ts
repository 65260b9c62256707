import { describe, expect, it } from "vitest";
import type { FrameDelta, SettingInfo } from "../../src/lib/contract";
import { stepSummaries, stepTotals } from "../../src/lib/steps";
import { changedKeys, defaultSettings, parseSetting } from "../../src/lib/settings";

const tok = (pos: number, state: "masked" | "visible" | "stable", revised = false) => ({
  pos, token: 1, text: "x", state, confidence: 0.5, speculative: false, revised, end: false,
});

describe("per-step summaries", () => {
  const frames: FrameDelta[] = [
    { step: 0, block: [4, 12], forwardTokens: 12, changes: [tok(4, "stable"), tok(5, "stable")], stepWallS: 0.5,
      simulatedS: null, committedTotal: 2 },
    { step: 1, block: [4, 12], forwardTokens: 8, changes: [tok(6, "stable"), tok(5, "masked"), tok(7, "stable", true)],
      stepWallS: 0.25, simulatedS: 0.1, committedTotal: 3 },
  ];
  it("derives committed per step, revisions and window size", () => {
    const rows = stepSummaries(frames);
    expect(rows.map((r) => r.committed)).toEqual([2, 1]);
    expect(rows.map((r) => r.revised)).toEqual([0, 2]);
    expect(rows.map((r) => r.windowSize)).toEqual([8, 8]);
    expect(stepTotals(rows)).toEqual({ steps: 2, wallS: 0.75, simulatedS: 0.1, forwardTokens: 20, committed: 3 });
    expect(stepTotals([]).simulatedS).toBeNull();
  });
});

describe("settings form values", () => {
  const schema: SettingInfo[] = [
    { key: "steps", label: "Steps", explanation: "", kind: "int", min: 1, max: 256, options: null, default: 32 },
    { key: "temperature", label: "T", explanation: "", kind: "float", min: 0, max: 2, options: null, default: 0 },
    { key: "threshold", label: "Th", explanation: "", kind: "float", min: 0, max: 1, options: null, default: null },
    { key: "cache", label: "C", explanation: "", kind: "choice", min: null, max: null, options: ["none", "prefix"], default: "none" },
    { key: "speculative", label: "S", explanation: "", kind: "bool", min: null, max: null, options: null, default: false },
  ];
  it("fills defaults and reports changed keys", () => {
    const s = defaultSettings(schema);
    expect(s).toMatchObject({ steps: 32, temperature: 0, threshold: null, cache: "none", speculative: false });
    expect(changedKeys(schema, { ...s, steps: 8 })).toEqual(["steps"]);
  });
  it("parses, rounds and clamps input; empty means unset", () => {
    expect(parseSetting(schema[0], "12.6")).toBe(13);
    expect(parseSetting(schema[0], "0")).toBe(1);
    expect(parseSetting(schema[0], "1000")).toBe(256);
    expect(parseSetting(schema[0], "abc")).toBe(32);
    expect(parseSetting(schema[1], "0.7")).toBe(0.7);
    expect(parseSetting(schema[2], "")).toBeNull();
    expect(parseSetting(schema[1], " ")).toBe(0);
    expect(parseSetting(schema[3], "")).toBe("none");
    expect(parseSetting(schema[3], "prefix")).toBe("prefix");
    expect(parseSetting(schema[4], true)).toBe(true);
  });
});
