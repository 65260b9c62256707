import { describe, expect, it } from "vitest";
import { memoryEstimate, MEMORY_OVERHEAD_BYTES, PROMPT_BUDGET_TOKENS } from "../../src/lib/memory";
import { etaSeconds, formatEta, formatRate, nextRate, pauseRate, startRate } from "../../src/lib/transfer";

const MiB = 1024 * 1024;
const GiB = 1024 * MiB;

describe("download speed and time left", () => {
  it("needs two samples, then follows a steady rate exactly", () => {
    let s = nextRate(startRate(), 0, 0);
    expect(s.bytesPerS).toBeNull();
    expect(etaSeconds(s, 100)).toBeNull();
    for (let t = 1; t <= 5; t++) s = nextRate(s, t * 10 * MiB, t * 1000);
    expect(s.bytesPerS).toBeCloseTo(10 * MiB);
    expect(etaSeconds(s, 100 * MiB)).toBeCloseTo(10);
    expect(formatRate(s.bytesPerS)).toBe("10.0 MiB/s");
  });
  it("smooths a burst instead of jumping to it", () => {
    let s = nextRate(nextRate(startRate(), 0, 0), 10 * MiB, 1000);
    s = nextRate(s, 110 * MiB, 1250); // 400 MiB/s for 250 ms
    expect(s.bytesPerS!).toBeGreaterThan(10 * MiB);
    expect(s.bytesPerS!).toBeLessThan(50 * MiB);
  });
  it("does not count paused time as a slow interval", () => {
    let s = nextRate(nextRate(startRate(), 0, 0), 10 * MiB, 1000);
    s = pauseRate(s);
    s = nextRate(s, 10 * MiB, 60_000); // resumed a minute later: restarts the clock
    s = nextRate(s, 20 * MiB, 61_000);
    expect(s.bytesPerS).toBeCloseTo(10 * MiB);
  });
  it("formats times left", () => {
    expect(formatEta(null)).toBe("—");
    expect(formatEta(42.4)).toBe("42 s");
    expect(formatEta(200)).toBe("3 min 20 s");
    expect(formatEta(3900)).toBe("1 h 05 min");
  });
});

describe("memory fit", () => {
  // LLaDA-8B in Q4_K: 4.3 GiB of weights, 1 MiB of f32 K/V per token, 4096 tokens of context,
  // a 126464-token vocabulary (logits row: 126464 x 20 bytes).
  const model = { weightsBytes: 4.3 * GiB, kvBytesPerToken: MiB, activationBytesPerToken: 192 * 1024,
    logitsBytesPerRow: 126_464 * 20, contextTokens: 4096, kinds: ["diffusion", "llada"] };
  it("is weights + K/V, activations and logits for prompt budget + answer + the app, against available memory", () => {
    const e = memoryEstimate(model, { genLength: 256 }, 8 * GiB);
    expect(e.promptTokens).toBe(PROMPT_BUDGET_TOKENS);
    expect(e.answerTokens).toBe(256);
    expect(e.kvBytes).toBe((PROMPT_BUDGET_TOKENS + 256) * MiB);
    expect(e.activationBytes).toBe(1280 * 192 * 1024);
    expect(e.logitsRows).toBe(256);
    expect(e.logitsBytes).toBe(256 * 126_464 * 20);
    expect(e.neededBytes).toBe(4.3 * GiB + 1280 * MiB + 240 * MiB + 256 * 126_464 * 20 + MEMORY_OVERHEAD_BYTES);
    expect(e.fits).toBe(true);
    // Weights, K/V, activations and the app (6.03 GiB) would fit 6.2 GiB; with the logits rows (~618 MiB) they do not.
    expect(memoryEstimate(model, { genLength: 256 }, 6.2 * GiB).fits).toBe(false);
    expect(memoryEstimate(model, { genLength: 256 }, 5 * GiB).fits).toBe(false);
  });
  it("an autoregressive model holds one logits row", () => {
    const ar = memoryEstimate({ ...model, kinds: ["autoregressive"] }, { genLength: 256 }, 8 * GiB);
    expect(ar.logitsRows).toBe(1);
    expect(ar.logitsBytes).toBe(126_464 * 20);
  });
  it("a longer answer needs more K/V; the prompt budget shrinks to fit the context", () => {
    const short = memoryEstimate(model, { genLength: 64 }, 8 * GiB);
    const long = memoryEstimate(model, { genLength: 3584 }, 8 * GiB);
    expect(long.kvBytes).toBeGreaterThan(short.kvBytes);
    expect(long.promptTokens).toBe(512);
    expect(long.promptTokens + long.answerTokens).toBe(4096);
  });
  it("says unknown rather than yes when the device or the config does not tell", () => {
    expect(memoryEstimate(model, { genLength: 256 }, 0).fits).toBeNull();
    expect(memoryEstimate(model, { genLength: 256 }, null).availableBytes).toBeNull();
    expect(memoryEstimate({ ...model, kvBytesPerToken: 0 }, { genLength: 256 }, 8 * GiB).fits).toBeNull();
  });
});
