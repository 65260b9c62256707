import { describe, expect, it } from "vitest";
import {
  answerTokenCount, applyFrames, canvasAtStep, canvasText, emptyCanvas, firstAnswerToken, readableAnswer, splitAtEnd,
  rejectedDraftCount, stateCounts,
} from "../../src/lib/canvas";
import type { FrameDelta, TokenView } from "../../src/lib/bindings";
import { loadFixtures } from "../fixtures";

const tv = (pos: number, text: string, state: TokenView["state"], extra: Partial<TokenView> = {}): TokenView => ({
  pos, token: 100 + pos, text, state, confidence: 0.8, speculative: false, revised: false, rejectedDraft: null, end: false, ...extra,
});
const frame = (step: number, changes: TokenView[], committedTotal: number): FrameDelta => ({
  step, block: [3, 7], forwardTokens: 7, changes, stepWallS: 0.01, simulatedS: step % 2 ? 0.002 : null, committedTotal,
});

describe("canvas delta application", () => {
  it("starts fully masked over the generated region only", () => {
    const c = emptyCanvas(3, 7);
    expect(c.start).toBe(3);
    expect(c.slots.map((s) => s.pos)).toEqual([3, 4, 5, 6]);
    expect(stateCounts(c)).toEqual({ masked: 4, visible: 0, stable: 0 });
  });

  it("applies changes by absolute position and leaves the input untouched", () => {
    const c0 = emptyCanvas(3, 7);
    const c1 = applyFrames(c0, [frame(0, [tv(4, " b", "visible"), tv(6, " d", "stable")], 2)]);
    expect(c0.slots[1].state).toBe("masked");
    expect(c1.slots[1]).toMatchObject({ text: " b", state: "visible", changedStep: 0, changes: 1 });
    expect(c1.slots[3]).toMatchObject({ text: " d", state: "stable" });
    expect(canvasText(c1)).toBe(" b d");
    expect(c1.committed).toBe(2);
  });

  it("tracks revision, re-masking and speculative drafts", () => {
    let c = emptyCanvas(3, 7);
    c = applyFrames(c, [frame(0, [tv(3, " a", "visible"), tv(5, " x", "visible", { speculative: true })], 1)]);
    expect(c.slots[2].speculative).toBe(true);
    c = applyFrames(c, [frame(1, [tv(5, "", "masked")], 1)]);
    expect(c.slots[2]).toMatchObject({ state: "masked", text: "", confidence: null, changes: 2 });
    c = applyFrames(c, [frame(2, [tv(5, " c", "stable", { revised: true }), tv(3, " a", "stable")], 2)]);
    expect(c.slots[2]).toMatchObject({ state: "stable", revised: true, speculative: false, changes: 3 });
    expect(c.slots[0].revised).toBe(false);
    expect(canvasText(c)).toBe(" a c");
  });

  it("keeps the draft a model refused beside the token it wrote instead", () => {
    let c = emptyCanvas(3, 7);
    c = applyFrames(c, [frame(0, [tv(3, " the", "stable", { speculative: true }), tv(4, " sea", "stable", { rejectedDraft: " sky" })], 2)]);
    expect(c.slots[0]).toMatchObject({ speculative: true, rejectedDraft: null });
    expect(c.slots[1]).toMatchObject({ text: " sea", rejectedDraft: " sky" });
    expect(rejectedDraftCount(c)).toBe(1);
    expect(canvasText(c)).toBe(" the sea");
    // A frame recorded before the field existed reads as no refusal.
    const old = { ...tv(5, ".", "stable") } as Partial<TokenView>;
    delete old.rejectedDraft;
    c = applyFrames(c, [frame(1, [old as TokenView], 3)]);
    expect(c.slots[2].rejectedDraft).toBeNull();
    // Past the end of the answer nothing counts.
    c = applyFrames(c, [frame(2, [tv(5, "<eot>", "stable", { end: true, rejectedDraft: "!" })], 3)]);
    expect(rejectedDraftCount(c)).toBe(1);
  });

  it("ignores prompt positions and grows for positions past the end", () => {
    const c = applyFrames(emptyCanvas(3, 5), [frame(0, [tv(1, "p", "stable"), tv(6, " z", "stable")], 1)]);
    expect(c.slots.map((s) => s.pos)).toEqual([3, 4, 5, 6]);
    expect(c.slots[3].text).toBe(" z");
  });

  it("accumulates measured and simulated time over batches", () => {
    const frames = [frame(0, [], 0), frame(1, [], 0), frame(2, [], 0)];
    const once = applyFrames(emptyCanvas(3, 7), frames);
    const split = applyFrames(applyFrames(emptyCanvas(3, 7), frames.slice(0, 1)), frames.slice(1));
    expect(once.wallS).toBeCloseTo(0.03);
    expect(once.simulatedS).toBeCloseTo(0.002);
    expect(split).toEqual(once);
  });

  it("folds the end token and the padding after it out of the answer, its counts and its text", () => {
    // Positions 3..9: " a" " b" ▒ <eot> <pad> ▒ <pad>; the answer ends at the first end token.
    let c = emptyCanvas(3, 10);
    const eot = { end: true, confidence: 1 };
    c = applyFrames(c, [frame(0, [tv(6, "<eot>", "stable", eot), tv(7, "<pad>", "stable", eot), tv(9, "<pad>", "stable", eot)], 3)]);
    // Padding first, answer still masked: nothing of the answer is committed yet.
    expect(answerTokenCount(c)).toBe(1);
    expect(stateCounts(c)).toEqual({ masked: 3, visible: 0, stable: 0 });
    expect(firstAnswerToken(c)).toBeNull();
    c = applyFrames(c, [frame(1, [tv(3, " a", "stable"), tv(4, " b", "visible")], 5)]);
    const { answer, tail } = splitAtEnd(c);
    expect(answer.map((s) => s.pos)).toEqual([3, 4, 5]);
    expect(tail.map((s) => s.pos)).toEqual([6, 7, 8, 9]);
    expect(answerTokenCount(c)).toBe(3);
    expect(stateCounts(c)).toEqual({ masked: 1, visible: 1, stable: 1 });
    expect(canvasText(c)).toBe(" a b");
    expect(readableAnswer(c)).toBe(" a b");
    // No end token: every position belongs to the answer.
    expect(splitAtEnd(applyFrames(emptyCanvas(3, 5), [frame(0, [tv(3, "x", "stable")], 1)])).tail).toEqual([]);
  });

  it("reads the answer aloud only up to the first gap", () => {
    const c = applyFrames(emptyCanvas(3, 7), [frame(0, [tv(3, "A", "stable"), tv(5, "C", "stable")], 2)]);
    expect(readableAnswer(c)).toBe("A");
    expect(canvasText(c)).toBe("AC");
  });

  it("times the first answer token from the cumulative step times, measured and simulated", () => {
    // Step 0 commits only padding, step 1 the first answer token, step 2 rewrites it (time kept).
    const frames = [
      frame(0, [tv(6, "<eot>", "stable", { end: true })], 1),
      frame(1, [tv(4, " b", "stable")], 2),
      frame(2, [tv(4, " B", "stable", { revised: true }), tv(3, " a", "stable")], 3),
    ];
    const c = canvasAtStep(3, 7, frames, 3);
    const first = firstAnswerToken(c);
    expect(first?.wallS).toBeCloseTo(0.02);
    expect(first?.simulatedS).toBeCloseTo(0.002);
    expect(c.slots[1].committedAtS).toBeCloseTo(0.02);
    expect(c.slots[0].committedAtS).toBeCloseTo(0.03);
    // Re-masking forgets the commit time.
    const remasked = applyFrames(c, [frame(3, [tv(4, "", "masked")], 2)]);
    expect(remasked.slots[1].committedAtS).toBeNull();
  });

  it("canvasAtStep clamps to the frames there are", () => {
    const frames = [frame(0, [tv(3, " a", "stable")], 1), frame(1, [tv(4, " b", "stable")], 2)];
    expect(canvasText(canvasAtStep(3, 7, frames, 0))).toBe("");
    expect(canvasText(canvasAtStep(3, 7, frames, 1))).toBe(" a");
    expect(canvasText(canvasAtStep(3, 7, frames, 99))).toBe(" a b");
    expect(canvasAtStep(3, 7, frames, -4).step).toBeNull();
  });
});

describe.each(loadFixtures())("recorded stream $name", ({ run }) => {
  const started = run.events.find((e) => e.kind === "started");
  const streamed = run.events.flatMap((e) => (e.kind === "frames" ? e.frames : []));

  it("streams exactly the frames the run detail stores, in step order", () => {
    expect(started).toBeDefined();
    expect(streamed.map((f) => f.step)).toEqual(run.detail.frames.map((f) => f.step));
    expect(streamed).toEqual(run.detail.frames);
  });

  it("ends with every committed position shown and committedTotal matching", () => {
    if (started?.kind !== "started") throw new Error("no started event");
    const live = applyFrames(emptyCanvas(started.promptTokens, started.canvasLength), streamed);
    const replay = canvasAtStep(run.detail.promptTokens, run.detail.canvasLength, run.detail.frames,
      run.detail.frames.length);
    expect(live).toEqual(replay);
    const last = run.detail.frames[run.detail.frames.length - 1];
    const counts = stateCounts(live);
    const { answer, tail } = splitAtEnd(live);
    if (run.detail.summary.status === "completed") {
      // Every committed position is either answer or the end token and padding folded after it.
      expect(counts.visible + counts.stable + tail.filter((s) => s.state !== "masked").length).toBe(last.committedTotal);
    }
    expect(answer.length + tail.length).toBe(run.detail.canvasLength - run.detail.promptTokens);
  });

  it("marks the padding, and counts answer tokens as the engine's summary does", () => {
    const final = canvasAtStep(run.detail.promptTokens, run.detail.canvasLength, run.detail.frames,
      run.detail.frames.length);
    const { answer, tail } = splitAtEnd(final);
    expect(tail.length).toBeGreaterThan(1);
    expect(answer.every((s) => s.state !== "masked" && !s.end)).toBe(true);
    expect(answerTokenCount(final)).toBe(run.detail.summary.answerTokens);
    expect(canvasText(final).trim()).toBe(run.detail.summary.output);
    expect(firstAnswerToken(final)).not.toBeNull();
  });
});
