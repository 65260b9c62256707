// Coalesces frames arriving from the channel into one canvas update per animation frame.
import type { FrameDelta } from "./bindings";

/** Schedules a callback for the next paint; `requestAnimationFrame` in the browser. */
export type Scheduler = (cb: () => void) => void;

/**
 * Queues frames and hands them to `apply` at most once per scheduled tick, so a burst of steps
 * costs one re-render. `flush()` delivers what is pending right away (used on `finished`, so the
 * last frame is never lost).
 */
export class FrameBatcher {
  private pending: FrameDelta[] = [];
  private scheduled = false;
  private readonly apply: (frames: FrameDelta[]) => void;
  private readonly schedule: Scheduler;

  constructor(apply: (frames: FrameDelta[]) => void, schedule: Scheduler = defaultScheduler) {
    this.apply = apply;
    this.schedule = schedule;
  }

  /** Adds frames; schedules a tick if none is pending. */
  push(frames: readonly FrameDelta[]): void {
    if (frames.length === 0) return;
    this.pending.push(...frames);
    if (!this.scheduled) {
      this.scheduled = true;
      this.schedule(() => this.tick());
    }
  }

  /** Frames waiting for the next tick. */
  get pendingCount(): number {
    return this.pending.length;
  }

  /** Applies everything pending now. */
  flush(): void {
    if (this.pending.length === 0) return;
    const batch = this.pending;
    this.pending = [];
    this.apply(batch);
  }

  private tick(): void {
    this.scheduled = false;
    this.flush();
  }
}

function defaultScheduler(cb: () => void): void {
  if (typeof requestAnimationFrame === "function") requestAnimationFrame(() => cb());
  else setTimeout(cb, 16);
}

/** Scrubber position logic: clamps and steps through `0..=total` frames. */
export class Scrubber {
  private pos: number;
  readonly total: number;
  constructor(total: number, pos = total) {
    this.total = Math.max(0, total);
    this.pos = clamp(pos, 0, this.total);
  }
  /** Frames applied at the current position. */
  get position(): number {
    return this.pos;
  }
  /** Moves to `p` (clamped); returns the new position. */
  seek(p: number): number {
    this.pos = clamp(Math.round(p), 0, this.total);
    return this.pos;
  }
  /** Moves by `d` frames (clamped). */
  stepBy(d: number): number {
    return this.seek(this.pos + d);
  }
  /** True at the last frame. */
  get atEnd(): boolean {
    return this.pos >= this.total;
  }
}

function clamp(v: number, lo: number, hi: number): number {
  return Math.min(hi, Math.max(lo, v));
}
