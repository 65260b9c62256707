import { describe, expect, it } from "vitest";
import { applyFrames, canvasAtStep, canvasText, emptyCanvas, stateCounts } from "../../src/lib/canvas";
import type { FrameDelta, TokenView } from "../../src/lib/contract";
import { loadFixtures } from "../fixtures";

const tv = (pos: number, text: string, state: TokenView["state"], extra: Partial<TokenView> = {}): TokenView => ({
  pos, token: 100 + pos, text, state, confidence: 0.8, speculative: false, revised: false, ...extra,
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
    if (run.detail.summary.status === "completed") {
      expect(counts.visible + counts.stable).toBe(last.committedTotal);
    }
    expect(live.slots.length).toBe(run.detail.canvasLength - run.detail.promptTokens);
  });
});
