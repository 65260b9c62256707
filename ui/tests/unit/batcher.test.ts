import { describe, expect, it } from "vitest";
import { FrameBatcher, Scrubber } from "../../src/lib/batcher";
import type { FrameDelta } from "../../src/lib/bindings";

const f = (step: number): FrameDelta => ({ step, block: [0, 4], forwardTokens: 4, changes: [], stepWallS: 0,
  simulatedS: null, committedTotal: step });

function fakeScheduler() {
  const queue: (() => void)[] = [];
  return { schedule: (cb: () => void) => queue.push(cb), run: () => queue.splice(0).forEach((cb) => cb()), queue };
}

describe("FrameBatcher", () => {
  it("coalesces pushes between ticks into one apply, in order", () => {
    const s = fakeScheduler();
    const applied: number[][] = [];
    const b = new FrameBatcher((fr) => applied.push(fr.map((x) => x.step)), s.schedule);
    b.push([f(0), f(1)]);
    b.push([f(2)]);
    expect(s.queue.length).toBe(1);
    expect(applied).toEqual([]);
    s.run();
    expect(applied).toEqual([[0, 1, 2]]);
    b.push([f(3)]);
    expect(s.queue.length).toBe(1);
    s.run();
    expect(applied).toEqual([[0, 1, 2], [3]]);
  });

  it("flush delivers pending frames at once and the later tick is a no-op", () => {
    const s = fakeScheduler();
    const applied: number[][] = [];
    const b = new FrameBatcher((fr) => applied.push(fr.map((x) => x.step)), s.schedule);
    b.push([f(0)]);
    b.flush();
    expect(applied).toEqual([[0]]);
    expect(b.pendingCount).toBe(0);
    s.run();
    expect(applied).toEqual([[0]]);
  });

  it("ignores empty pushes", () => {
    const s = fakeScheduler();
    const b = new FrameBatcher(() => {
      throw new Error("must not apply");
    }, s.schedule);
    b.push([]);
    expect(s.queue.length).toBe(0);
  });
});

describe("Scrubber", () => {
  it("clamps seek and step to 0..total", () => {
    const s = new Scrubber(5);
    expect(s.position).toBe(5);
    expect(s.atEnd).toBe(true);
    expect(s.seek(-3)).toBe(0);
    expect(s.stepBy(2)).toBe(2);
    expect(s.seek(2.6)).toBe(3);
    expect(s.stepBy(10)).toBe(5);
    expect(new Scrubber(0).seek(1)).toBe(0);
  });
});
