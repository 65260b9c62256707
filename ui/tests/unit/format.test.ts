import { describe, expect, it } from "vitest";
import { formatBytes, formatDuration, formatEnergy, formatNumber, formatPercent, formatProgress, formatRate } from "../../src/lib/format";

describe("formatting", () => {
  it("bytes", () => {
    expect(formatBytes(0)).toBe("0 B");
    expect(formatBytes(1536)).toBe("1.50 KiB");
    expect(formatBytes(17.8 * 1024 * 1024)).toBe("17.8 MiB");
    expect(formatBytes(8 * 1024 ** 3)).toBe("8.00 GiB");
    expect(formatBytes(null)).toBe("–");
  });
  it("rates", () => {
    expect(formatRate(7, 0.5)).toBe("14 tok/s");
    expect(formatRate(7, 0)).toBe("–");
    expect(formatRate(null, 1)).toBe("–");
    expect(formatRate(3, null)).toBe("–");
  });
  it("durations", () => {
    expect(formatDuration(0)).toBe("0 s");
    expect(formatDuration(0.00085)).toBe("850 µs");
    expect(formatDuration(0.0123)).toBe("12.3 ms");
    expect(formatDuration(4.561)).toBe("4.56 s");
    expect(formatDuration(125)).toBe("2 min 5 s");
    expect(formatDuration(Number.NaN)).toBe("–");
  });
  it("energy, percent, numbers, progress", () => {
    expect(formatEnergy(0.0032)).toBe("3.20 mJ");
    expect(formatEnergy(1.25)).toBe("1.25 J");
    expect(formatEnergy(null)).toBe("–");
    expect(formatPercent(0.934)).toBe("93%");
    expect(formatNumber(2.34567)).toBe("2.35");
    expect(formatNumber(undefined)).toBe("–");
    expect(formatProgress(1024, 4096)).toBe("1.00 KiB / 4.00 KiB (25%)");
    expect(formatProgress(1024, null)).toBe("1.00 KiB");
  });
});
