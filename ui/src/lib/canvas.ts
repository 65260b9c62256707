// The answer canvas as the UI holds it: one slot per generated position, updated by frame deltas.
import type { FrameDelta, TokenState, TokenView } from "./bindings";

/** One generated position on screen. */
export type Slot = {
  pos: number;
  token: number | null;
  text: string;
  state: TokenState;
  confidence: number | null;
  speculative: boolean;
  revised: boolean;
  /** Speculative AR decoding: text of the draft the target refused here (null: none). */
  rejectedDraft: string | null;
  /** Step that last changed this position (null before any change). */
  changedStep: number | null;
  /** How many times this position changed; > 1 means it was rewritten. */
  changes: number;
  /** The token is one of the run's stop ids (end of text/turn, padding). */
  end: boolean;
  /** Run time (cumulative step times) when this position was committed, null while masked. */
  committedAtS: number | null;
  /** The same in simulated device time (0 when the backend simulates none). */
  committedAtSimulatedS: number | null;
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
    rejectedDraft: null, changedStep: null, changes: 0, end: false, committedAtS: null, committedAtSimulatedS: null };
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

function applyChange(slots: Slot[], start: number, c: TokenView, step: number, wallS: number, simulatedS: number): void {
  const i = c.pos - start;
  // Prompt positions never change; a position past the end means the canvas grew (never for
  // the engine's fixed-length canvases), so extend rather than drop the delta.
  if (i < 0) return;
  while (slots.length <= i) slots.push(maskSlot(start + slots.length));
  const prev = slots[i];
  const masked = c.state === "masked";
  // A rewrite keeps the time of the first commit; re-masking forgets it.
  const firstCommit = prev.state === "masked";
  slots[i] = {
    pos: c.pos,
    token: masked ? null : c.token,
    text: masked ? "" : c.text,
    state: c.state,
    confidence: masked ? null : c.confidence,
    speculative: c.speculative,
    revised: c.revised || (prev.revised && !masked),
    rejectedDraft: masked ? null : c.rejectedDraft ?? null,
    changedStep: step,
    changes: prev.changes + 1,
    end: !masked && c.end === true,
    committedAtS: masked ? null : firstCommit ? wallS : prev.committedAtS,
    committedAtSimulatedS: masked ? null : firstCommit ? simulatedS : prev.committedAtSimulatedS,
  };
}

/** Applies frames in order to a copy of `state` (the input is not mutated). */
export function applyFrames(state: CanvasState, frames: readonly FrameDelta[]): CanvasState {
  if (frames.length === 0) return state;
  const slots = state.slots.slice();
  let { step, block, committed, forwardTokens, simulatedS, wallS } = state;
  for (const f of frames) {
    // A step's commits happen at the end of its forwards, so their time includes the step.
    simulatedS += f.simulatedS ?? 0;
    wallS += f.stepWallS ?? 0;
    for (const c of f.changes) applyChange(slots, state.start, c, f.step, wallS, simulatedS);
    step = f.step;
    block = f.block;
    committed = f.committedTotal;
    forwardTokens = f.forwardTokens;
  }
  return { start: state.start, slots, step, block, committed, forwardTokens, simulatedS, wallS };
}

/** The canvas after the first `count` frames (0 = all masked): what the scrubber shows. */
export function canvasAtStep(promptTokens: number, canvasLength: number, frames: readonly FrameDelta[],
  count: number): CanvasState {
  const n = Math.max(0, Math.min(count, frames.length));
  return applyFrames(emptyCanvas(promptTokens, canvasLength), frames.slice(0, n));
}

/**
 * Index (into `slots`) of the first committed end token: where the answer ends. Everything from
 * there on is the end token and padding, as the engine cuts the answer at its first stop token.
 */
export function endIndex(state: CanvasState): number | null {
  const i = state.slots.findIndex((s) => s.end);
  return i < 0 ? null : i;
}

/** The canvas split for display: the answer positions, then the end token and the padding after it. */
export function splitAtEnd(state: CanvasState): { answer: Slot[]; tail: Slot[] } {
  const i = endIndex(state);
  return i === null ? { answer: state.slots, tail: [] } : { answer: state.slots.slice(0, i), tail: state.slots.slice(i) };
}

/**
 * Answer tokens committed so far, counted as the engine counts a finished answer: the committed
 * positions before the end, plus the end token itself; never the padding after it.
 */
export function answerTokenCount(state: CanvasState): number {
  const { answer, tail } = splitAtEnd(state);
  return answer.filter((s) => s.state !== "masked").length + (tail.length > 0 ? 1 : 0);
}

/** Text of the committed answer tokens, masks and the end/padding left out. */
export function canvasText(state: CanvasState): string {
  return splitAtEnd(state).answer.filter((s) => s.state !== "masked").map((s) => s.text).join("");
}

/**
 * The answer as far as it reads from the start: committed tokens up to the first masked one.
 * A diffusion model commits out of order, so this is what can be read aloud without gaps.
 */
export function readableAnswer(state: CanvasState): string {
  const { answer } = splitAtEnd(state);
  const gap = answer.findIndex((s) => s.state === "masked");
  return (gap < 0 ? answer : answer.slice(0, gap)).map((s) => s.text).join("");
}

/**
 * Time to the first answer token: for a diffusion model the run time until the first position
 * of the answer (before its end) was committed, measured and simulated; null before there is one.
 */
export function firstAnswerToken(state: CanvasState): { wallS: number; simulatedS: number } | null {
  let best: { wallS: number; simulatedS: number } | null = null;
  for (const s of splitAtEnd(state).answer) {
    if (s.state === "masked" || s.committedAtS === null) continue;
    if (best === null || s.committedAtS < best.wallS) best = { wallS: s.committedAtS, simulatedS: s.committedAtSimulatedS ?? 0 };
  }
  return best;
}

/** Answer positions where the target refused the draft model's token (speculative AR decoding). */
export function rejectedDraftCount(state: CanvasState): number {
  return splitAtEnd(state).answer.filter((s) => s.rejectedDraft !== null).length;
}

/** Counts per state of the answer positions (the end and padding left out), for the legend. */
export function stateCounts(state: CanvasState): Record<TokenState, number> {
  const counts: Record<TokenState, number> = { masked: 0, visible: 0, stable: 0 };
  for (const s of splitAtEnd(state).answer) counts[s.state] += 1;
  return counts;
}
