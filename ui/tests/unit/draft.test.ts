import { describe, expect, it } from "vitest";
import type { ModelEntry, SpeculationSummary } from "../../src/lib/bindings";
import { activeDraft, draftCandidates, speculationText } from "../../src/lib/draft";

function model(id: number, kinds: string[]): ModelEntry {
  return { id, name: `m${id}`, architecture: kinds[0], format: "safetensors", quantisation: "bf16", sizeBytes: 1, sha256: "",
    source: "", path: "", addedMs: 0, usedMs: null, embedded: false, fitsMemory: true, kinds, weightsBytes: 1,
    kvBytesPerToken: 1, activationBytesPerToken: 1, logitsBytesPerRow: 1, contextTokens: 256, runCount: 0,
    defaultSettings: null, moeCalibration: null };
}

const dllm = model(1, ["diffusion", "llada"]);
const target = model(2, ["autoregressive"]);
const draft = model(3, ["autoregressive"]);
const models = [dllm, target, draft];

describe("draft models", () => {
  it("only autoregressive models draft, for an autoregressive model, never for themselves", () => {
    expect(draftCandidates(models, target.id).map((m) => m.id)).toEqual([draft.id]);
    expect(draftCandidates(models, draft.id).map((m) => m.id)).toEqual([target.id]);
    expect(draftCandidates(models, dllm.id)).toEqual([]);
    expect(draftCandidates(models, null)).toEqual([]);
  });

  it("a chosen draft is dropped when the model changes to one it cannot draft for", () => {
    expect(activeDraft(models, target.id, draft.id)).toBe(draft.id);
    expect(activeDraft(models, dllm.id, draft.id)).toBeNull();
    expect(activeDraft(models, draft.id, draft.id)).toBeNull();
    expect(activeDraft(models, target.id, null)).toBeNull();
    expect(activeDraft([dllm, target], target.id, draft.id)).toBeNull(); // deleted meanwhile
  });

  it("says how the drafts fared", () => {
    const sp: SpeculationSummary = { draftModel: "tiny-draft", schedule: "async", drafted: 70, judged: 60, accepted: 41,
      rejected: 19, verifyForwards: 20, draftForwards: 70 };
    expect(speculationText(sp)).toBe("tiny-draft: 41 of 60 drafts accepted (68 %), 19 rejected");
    expect(speculationText({ ...sp, judged: 0, accepted: 0, rejected: 0 })).toBe("tiny-draft: 0 of 0 drafts accepted, 0 rejected");
  });
});
