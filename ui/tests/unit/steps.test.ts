import { describe, expect, it } from "vitest";
import type { FrameDelta, TokenState, TokenView } from "../../src/lib/bindings";
import { stepSummaries, stepTotals } from "../../src/lib/steps";
import { loadFixtures } from "../fixtures";

describe("revised count of the steps table", () => {
  it("counts only replaced or re-masked tokens, not drafts of later blocks or visible -> stable promotions", () => {
    const at = (pos: number, state: TokenState, token: number, flags: { spec?: boolean; rev?: boolean } = {}) =>
      ({ pos, token, text: `t${token}`, state, confidence: 0.5, speculative: flags.spec ?? false,
        revised: flags.rev ?? false }) as TokenView;
    const drafts = (from: number, n: number) => Array.from({ length: n }, (_, i) => at(from + i, "masked", 1, { spec: true }));
    // What a speculative + revision run streams: each step commits one position of block [0, 4)
    // while re-sending the 16 drafts of the next block, and leaving the block promotes its tokens.
    const seq: FrameDelta[] = [
      { step: 0, block: [0, 4], forwardTokens: 20, changes: [at(0, "visible", 7)], stepWallS: 0.1, simulatedS: null, committedTotal: 1 },
      { step: 1, block: [0, 4], forwardTokens: 20, changes: [...drafts(4, 16), at(1, "visible", 8)], stepWallS: 0.1,
        simulatedS: null, committedTotal: 2 },
      { step: 2, block: [0, 4], forwardTokens: 20, changes: [...drafts(4, 16), at(0, "visible", 9, { rev: true }), at(2, "visible", 3)],
        stepWallS: 0.1, simulatedS: null, committedTotal: 3 },
      { step: 3, block: [4, 8], forwardTokens: 20,
        changes: [at(3, "stable", 4), at(0, "stable", 9), at(1, "stable", 8), at(2, "stable", 3), at(4, "stable", 1)],
        stepWallS: 0.1, simulatedS: null, committedTotal: 5 },
    ];
    const rows = stepSummaries(seq);
    expect(rows.map((r) => r.committed)).toEqual([1, 1, 1, 2]);
    expect(rows.map((r) => r.revised)).toEqual([0, 0, 1, 0]);
    expect(rows.map((r) => r.drafts)).toEqual([0, 16, 16, 0]);
    expect(stepTotals(rows)).toMatchObject({ revised: 1, drafts: 32, committed: 5 });
  });

  it("matches the engine's own revision flags on the recorded runs", () => {
    // The engine flags a commit over a committed position (promotions clear it); drafts stay masked.
    for (const f of loadFixtures()) {
      const frames = f.run.detail.frames;
      const rows = stepSummaries(frames);
      expect(rows.map((r) => r.revised)).toEqual(frames.map((fr) => fr.changes.filter((c) => c.revised && c.state !== "masked").length));
      expect(rows.map((r) => r.drafts)).toEqual(frames.map((fr) => fr.changes.filter((c) => c.speculative && c.state === "masked").length));
    }
  });
});
