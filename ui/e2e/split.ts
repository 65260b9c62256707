import type { GenerateEvent } from "../src/lib/bindings";

/** The same stream with each frame in its own `frames` event (same frames, finer batches). */
export function splitFrames(events: readonly GenerateEvent[]): GenerateEvent[] {
  return events.flatMap((e): GenerateEvent[] =>
    e.kind === "frames" ? e.frames.map((f) => ({ kind: "frames", frames: [f] })) : [e]);
}
