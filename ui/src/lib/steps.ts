// Per-step summaries for the profiler, derived from a run's frames.
import type { FrameDelta, TokenState } from "./bindings";

/** One row of the per-step table. */
export type StepSummary = {
  step: number;
  block: [number, number];
  /** Positions newly committed by this step (masked -> visible/stable). */
  committed: number;
  /**
   * Positions whose committed token this step replaced by another token or masked again.
   * Frames also re-send positions whose token stays (visible -> stable promotions) and
   * speculative drafts of later blocks (still masked); neither counts.
   */
  revised: number;
  /** Speculative drafts streamed for positions of later blocks (they stay masked). */
  drafts: number;
  forwardTokens: number;
  /** Width of the block being denoised. */
  windowSize: number;
  stepWallS: number | null;
  simulatedS: number | null;
  committedTotal: number;
};

/** Summarises each frame; `committed` is the increase of committedTotal. */
export function stepSummaries(frames: readonly FrameDelta[]): StepSummary[] {
  let prev = 0;
  // What each position holds so far; absent = masked (every canvas starts fully masked).
  const held = new Map<number, { state: TokenState; token: number }>();
  return frames.map((f) => {
    const committed = f.committedTotal - prev;
    prev = f.committedTotal;
    let revised = 0;
    let drafts = 0;
    for (const c of f.changes) {
      const before = held.get(c.pos);
      const wasCommitted = before !== undefined && before.state !== "masked";
      if (c.state === "masked") {
        if (wasCommitted) {
          revised += 1;
          held.delete(c.pos);
        } else if (c.speculative) {
          drafts += 1;
        }
        continue;
      }
      if (wasCommitted && before.token !== c.token) revised += 1;
      held.set(c.pos, { state: c.state, token: c.token });
    }
    return {
      step: f.step,
      block: f.block,
      committed,
      revised,
      drafts,
      forwardTokens: f.forwardTokens,
      windowSize: f.block[1] - f.block[0],
      stepWallS: f.stepWallS,
      simulatedS: f.simulatedS,
      committedTotal: f.committedTotal,
    };
  });
}

/** Totals over a run's steps. */
export function stepTotals(rows: readonly StepSummary[]): { steps: number; wallS: number; simulatedS: number | null;
  forwardTokens: number; committed: number; revised: number; drafts: number } {
  let wallS = 0;
  let sim = 0;
  let anySim = false;
  let forwardTokens = 0;
  let revised = 0;
  let drafts = 0;
  for (const r of rows) {
    wallS += r.stepWallS ?? 0;
    if (r.simulatedS !== null) {
      sim += r.simulatedS;
      anySim = true;
    }
    forwardTokens += r.forwardTokens;
    revised += r.revised;
    drafts += r.drafts;
  }
  const committed = rows.length > 0 ? rows[rows.length - 1].committedTotal : 0;
  return { steps: rows.length, wallS, simulatedS: anySim ? sim : null, forwardTokens, committed, revised, drafts };
}
