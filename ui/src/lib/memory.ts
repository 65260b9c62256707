// Whether a model fits this device: weights + the run's working memory at the chosen context
// (prompt budget + answer length: K/V cache, one forward's activations, logits rows) + an allowance
// for the app, against the memory available now. The rates come from the engine
// (`WorkingSetRates`, the same figures its request check uses), so app and engine agree.
import type { DecodeSettings, ModelEntry } from "./bindings";

/** Room for the app itself (src-tauri's MEMORY_OVERHEAD). */
export const MEMORY_OVERHEAD_BYTES = 256 * 1024 * 1024;
/** Prompt tokens (the conversation so far) reserved beside the answer (src-tauri's PROMPT_BUDGET_TOKENS). */
export const PROMPT_BUDGET_TOKENS = 1024;

/** The estimate with its parts, for "needs ~X of Y available" and its breakdown. */
export type MemoryEstimate = {
  weightsBytes: number;
  kvBytes: number;
  activationBytes: number;
  logitsBytes: number;
  /** Logits rows held at once: one per answer token (diffusion) or one (autoregressive). */
  logitsRows: number;
  overheadBytes: number;
  neededBytes: number;
  promptTokens: number;
  answerTokens: number;
  /** Memory available now; null when the device does not say. */
  availableBytes: number | null;
  /** null when unknown (no available-memory figure or no model config). */
  fits: boolean | null;
};

type Sized = Pick<ModelEntry, "weightsBytes" | "kvBytesPerToken" | "activationBytesPerToken" | "logitsBytesPerRow" | "contextTokens" | "kinds">;

/**
 * The estimate for `model` with `settings` (null: the model alone). The prompt budget shrinks
 * when the model's context is shorter than budget + answer.
 */
export function memoryEstimate(model: Sized, settings: Pick<DecodeSettings, "genLength"> | null, availableBytes: number | null): MemoryEstimate {
  const answerTokens = settings?.genLength ?? 0;
  const room = model.contextTokens > 0 ? Math.max(0, model.contextTokens - answerTokens) : PROMPT_BUDGET_TOKENS;
  const promptTokens = Math.min(PROMPT_BUDGET_TOKENS, room);
  const tokens = promptTokens + answerTokens;
  const kvBytes = model.kvBytesPerToken * tokens;
  // Worst case: a step forwards the whole canvas.
  const activationBytes = model.activationBytesPerToken * tokens;
  const logitsRows = model.kinds.includes("autoregressive") ? 1 : answerTokens;
  const logitsBytes = model.logitsBytesPerRow * logitsRows;
  const neededBytes = model.weightsBytes + kvBytes + activationBytes + logitsBytes + MEMORY_OVERHEAD_BYTES;
  const known = availableBytes !== null && availableBytes > 0 && model.kvBytesPerToken > 0;
  return {
    weightsBytes: model.weightsBytes,
    kvBytes,
    activationBytes,
    logitsBytes,
    logitsRows,
    overheadBytes: MEMORY_OVERHEAD_BYTES,
    neededBytes,
    promptTokens,
    answerTokens,
    availableBytes: availableBytes !== null && availableBytes > 0 ? availableBytes : null,
    fits: known ? neededBytes <= (availableBytes as number) : null,
  };
}
