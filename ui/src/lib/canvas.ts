// The answer canvas as the UI holds it: one slot per generated position, updated by frame deltas.
import type { FrameDelta, TokenState, TokenView } from "./contract";

/** One generated position on screen. */
export type Slot = {
  pos: number;
  token: number | null;
  text: string;
  state: TokenState;
  confidence: number | null;
  speculative: boolean;
  revised: boolean;
  /** Step that last changed this position (null before any change). */
  changedStep: number | null;
  /** How many times this position changed; > 1 means it was rewritten. */
  changes: number;
};

/** Canvas state: the generated region `[start, start + slots.length)` of the engine canvas. */
export type CanvasState = {
  start: number;
  slots: Slot[];
  step: number | null;
  block: [number, number] | null;
  committed: number;
  forwardTokens: number;
  simulatedS: number;
  wallS: number;
};

function maskSlot(pos: number): Slot {
  return { pos, token: null, text: "", state: "masked", confidence: null, speculative: false, revised: false,
    changedStep: null, changes: 0 };
}

/**
 * A fully masked canvas. Positions in frames are absolute (prompt included), so the generated
 * region starts at `promptTokens`; `canvasLength` is the whole canvas (prompt + generated).
 */
export function emptyCanvas(promptTokens: number, canvasLength: number): CanvasState {
  const n = Math.max(0, canvasLength - promptTokens);
  const slots = Array.from({ length: n }, (_, i) => maskSlot(promptTokens + i));
  return { start: promptTokens, slots, step: null, block: null, committed: 0, forwardTokens: 0, simulatedS: 0,
    wallS: 0 };
}

function applyChange(slots: Slot[], start: number, c: TokenView, step: number): void {
  const i = c.pos - start;
  // Prompt positions never change; a position past the end means the canvas grew (never for
  // the engine's fixed-length canvases), so extend rather than drop the delta.
  if (i < 0) return;
  while (slots.length <= i) slots.push(maskSlot(start + slots.length));
  const prev = slots[i];
  slots[i] = {
    pos: c.pos,
    token: c.state === "masked" ? null : c.token,
    text: c.state === "masked" ? "" : c.text,
    state: c.state,
    confidence: c.state === "masked" ? null : c.confidence,
    speculative: c.speculative,
    revised: c.revised || (prev.revised && c.state !== "masked"),
    changedStep: step,
    changes: prev.changes + 1,
  };
}

/** Applies frames in order to a copy of `state` (the input is not mutated). */
export function applyFrames(state: CanvasState, frames: readonly FrameDelta[]): CanvasState {
  if (frames.length === 0) return state;
  const slots = state.slots.slice();
  let { step, block, committed, forwardTokens, simulatedS, wallS } = state;
  for (const f of frames) {
    for (const c of f.changes) applyChange(slots, state.start, c, f.step);
    step = f.step;
    block = f.block;
    committed = f.committedTotal;
    forwardTokens = f.forwardTokens;
    simulatedS += f.simulatedS ?? 0;
    wallS += f.stepWallS ?? 0;
  }
  return { start: state.start, slots, step, block, committed, forwardTokens, simulatedS, wallS };
}

/** The canvas after the first `count` frames (0 = all masked): what the scrubber shows. */
export function canvasAtStep(promptTokens: number, canvasLength: number, frames: readonly FrameDelta[],
  count: number): CanvasState {
  const n = Math.max(0, Math.min(count, frames.length));
  return applyFrames(emptyCanvas(promptTokens, canvasLength), frames.slice(0, n));
}

/** Text of the committed tokens, masks left out. */
export function canvasText(state: CanvasState): string {
  return state.slots.filter((s) => s.state !== "masked").map((s) => s.text).join("");
}

/** Counts per state, for the legend. */
export function stateCounts(state: CanvasState): Record<TokenState, number> {
  const counts: Record<TokenState, number> = { masked: 0, visible: 0, stable: 0 };
  for (const s of state.slots) counts[s.state] += 1;
  return counts;
}
