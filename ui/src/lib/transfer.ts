// Download speed and time left from progress events: an exponentially smoothed rate, so one
// slow or bursty interval does not make the estimate jump.
import { formatBytes } from "./format";

/** Smoothing time constant: older rate samples lose weight with exp(-dt / TAU). */
export const RATE_TAU_S = 3;

/** Where a transfer's rate estimate stands. */
export type RateState = {
  /** Bytes and time (ms) of the last sample; null time after a pause (the next sample restarts the clock). */
  bytes: number;
  atMs: number | null;
  /** Smoothed bytes per second; null until two samples are apart in time. */
  bytesPerS: number | null;
};

/** A fresh estimate starting at `bytes`. */
export function startRate(bytes = 0): RateState {
  return { bytes, atMs: null, bytesPerS: null };
}

/** The estimate after a progress sample of `bytes` done at `atMs`. */
export function nextRate(prev: RateState, bytes: number, atMs: number): RateState {
  if (prev.atMs === null || bytes < prev.bytes) return { bytes, atMs, bytesPerS: prev.bytesPerS };
  const dt = (atMs - prev.atMs) / 1000;
  if (dt <= 0) return { ...prev, bytes };
  const sample = (bytes - prev.bytes) / dt;
  if (prev.bytesPerS === null) return { bytes, atMs, bytesPerS: sample };
  const keep = Math.exp(-dt / RATE_TAU_S);
  return { bytes, atMs, bytesPerS: keep * prev.bytesPerS + (1 - keep) * sample };
}

/** After a pause: keep the rate, but do not count the paused time as a slow interval. */
export function pauseRate(s: RateState): RateState {
  return { ...s, atMs: null };
}

/** Seconds left for `remaining` bytes at the smoothed rate; null when unknown. */
export function etaSeconds(s: RateState, remaining: number | null): number | null {
  if (remaining === null || s.bytesPerS === null || s.bytesPerS <= 0) return null;
  return Math.max(0, remaining) / s.bytesPerS;
}

/** "12.3 MiB/s" (binary units, like the sizes around it). */
export function formatRate(bytesPerS: number | null): string {
  return bytesPerS === null ? "—" : `${formatBytes(bytesPerS)}/s`;
}

/** "45 s", "3 min 20 s", "1 h 05 min"; "—" when unknown. */
export function formatEta(seconds: number | null): string {
  if (seconds === null || !Number.isFinite(seconds)) return "—";
  const s = Math.round(seconds);
  if (s < 60) return `${s} s`;
  if (s < 3600) return `${Math.floor(s / 60)} min ${String(s % 60).padStart(2, "0")} s`;
  return `${Math.floor(s / 3600)} h ${String(Math.floor((s % 3600) / 60)).padStart(2, "0")} min`;
}
