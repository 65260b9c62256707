import { describe, expect, it } from "vitest";
import type { FrameDelta, SettingInfo } from "../../src/lib/bindings";
import { stepSummaries, stepTotals } from "../../src/lib/steps";

const tok = (pos: number, state: "masked" | "visible" | "stable", revised = false) => ({
  pos, token: 1, text: "x", state, confidence: 0.5, speculative: false, revised, rejectedDraft: null, end: false,
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
    // Position 5 was committed and is masked again; 7 is a first commit whatever its flag says.
    expect(rows.map((r) => r.revised)).toEqual([0, 1]);
    expect(rows.map((r) => r.windowSize)).toEqual([8, 8]);
    expect(stepTotals(rows)).toEqual({ steps: 2, wallS: 0.75, simulatedS: 0.1, forwardTokens: 20, committed: 3,
      revised: 1, drafts: 0 });
    expect(stepTotals([]).simulatedS).toBeNull();
  });

});
