// Whether a model fits this device: weights + K/V cache at the chosen context (prompt budget +
// answer length) + an allowance for the app, against the memory available now.
import type { DecodeSettings, ModelEntry } from "./contract";

/** Room for the app itself and one forward's activations (src-tauri's MEMORY_OVERHEAD). */
export const MEMORY_OVERHEAD_BYTES = 256 * 1024 * 1024;
/** Prompt tokens (the conversation so far) reserved beside the answer (src-tauri's PROMPT_BUDGET_TOKENS). */
export const PROMPT_BUDGET_TOKENS = 1024;

/** The estimate with its parts, for "needs ~X of Y available" and its breakdown. */
export type MemoryEstimate = {
  weightsBytes: number;
  kvBytes: number;
  overheadBytes: number;
  neededBytes: number;
  promptTokens: number;
  answerTokens: number;
  /** Memory available now; null when the device does not say. */
  availableBytes: number | null;
  /** null when unknown (no available-memory figure or no model config). */
  fits: boolean | null;
};

type Sized = Pick<ModelEntry, "weightsBytes" | "kvBytesPerToken" | "contextTokens">;

/**
 * The estimate for `model` with `settings` (null: the model alone). The prompt budget shrinks
 * when the model's context is shorter than budget + answer.
 */
export function memoryEstimate(model: Sized, settings: Pick<DecodeSettings, "genLength"> | null, availableBytes: number | null): MemoryEstimate {
  const answerTokens = settings?.genLength ?? 0;
  const room = model.contextTokens > 0 ? Math.max(0, model.contextTokens - answerTokens) : PROMPT_BUDGET_TOKENS;
  const promptTokens = Math.min(PROMPT_BUDGET_TOKENS, room);
  const kvBytes = model.kvBytesPerToken * (promptTokens + answerTokens);
  const neededBytes = model.weightsBytes + kvBytes + MEMORY_OVERHEAD_BYTES;
  const known = availableBytes !== null && availableBytes > 0 && model.kvBytesPerToken > 0;
  return {
    weightsBytes: model.weightsBytes,
    kvBytes,
    overheadBytes: MEMORY_OVERHEAD_BYTES,
    neededBytes,
    promptTokens,
    answerTokens,
    availableBytes: availableBytes !== null && availableBytes > 0 ? availableBytes : null,
    fits: known ? neededBytes <= (availableBytes as number) : null,
  };
}
