// Per-step summaries for the profiler, derived from a run's frames.
import type { FrameDelta } from "./contract";

/** One row of the per-step table. */
export type StepSummary = {
  step: number;
  block: [number, number];
  /** Positions newly committed by this step (masked -> visible/stable). */
  committed: number;
  /** Positions re-masked or rewritten by this step. */
  revised: number;
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
  return frames.map((f) => {
    const committed = f.committedTotal - prev;
    prev = f.committedTotal;
    return {
      step: f.step,
      block: f.block,
      committed,
      revised: f.changes.filter((c) => c.revised || c.state === "masked").length,
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
  forwardTokens: number; committed: number } {
  let wallS = 0;
  let sim = 0;
  let anySim = false;
  let forwardTokens = 0;
  for (const r of rows) {
    wallS += r.stepWallS ?? 0;
    if (r.simulatedS !== null) {
      sim += r.simulatedS;
      anySim = true;
    }
    forwardTokens += r.forwardTokens;
  }
  const committed = rows.length > 0 ? rows[rows.length - 1].committedTotal : 0;
  return { steps: rows.length, wallS, simulatedS: anySim ? sim : null, forwardTokens, committed };
}
