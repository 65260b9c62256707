// Draft models for speculative decoding of an autoregressive model: which models can draft for
// the chosen one, and which draft a run actually uses.
import type { ModelEntry, SpeculationSummary } from "./bindings";

/** The model kind that can be a target or a draft. */
export const AUTOREGRESSIVE = "autoregressive";

/**
 * Models that can draft for `targetId`: the other autoregressive models (the app checks, when a
 * run starts, that the two share a vocabulary, and says so if they do not). None for a dLLM.
 */
export function draftCandidates(models: ModelEntry[], targetId: number | null): ModelEntry[] {
  const target = models.find((m) => m.id === targetId);
  if (!target || !target.kinds.includes(AUTOREGRESSIVE)) return [];
  return models.filter((m) => m.id !== target.id && m.kinds.includes(AUTOREGRESSIVE));
}

/** The draft a run uses: the chosen one while it can still draft for the chosen model, else none. */
export function activeDraft(models: ModelEntry[], targetId: number | null, draftId: number | null): number | null {
  return draftId !== null && draftCandidates(models, targetId).some((m) => m.id === draftId) ? draftId : null;
}

/** "tiny-draft: 41 of 60 drafts accepted (68 %)" for a run's stats line. */
export function speculationText(sp: SpeculationSummary): string {
  const rate = sp.judged > 0 ? ` (${Math.round((100 * sp.accepted) / sp.judged)} %)` : "";
  return `${sp.draftModel}: ${sp.accepted} of ${sp.judged} drafts accepted${rate}, ${sp.rejected} rejected`;
}
