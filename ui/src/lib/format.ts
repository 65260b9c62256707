// Human-readable numbers for the UI.

/** 1536 -> "1.5 KiB". */
export function formatBytes(n: number | null | undefined): string {
  if (n === null || n === undefined || !Number.isFinite(n)) return "–";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let v = Math.abs(n);
  let u = 0;
  while (v >= 1024 && u < units.length - 1) {
    v /= 1024;
    u += 1;
  }
  const s = u === 0 ? String(Math.round(v)) : v.toFixed(v < 10 ? 2 : v < 100 ? 1 : 0);
  return `${n < 0 ? "-" : ""}${s} ${units[u]}`;
}

/** Seconds -> "850 µs" / "12.3 ms" / "4.56 s" / "2 min 5 s". */
export function formatDuration(s: number | null | undefined): string {
  if (s === null || s === undefined || !Number.isFinite(s)) return "–";
  const a = Math.abs(s);
  if (a === 0) return "0 s";
  if (a < 1e-3) return `${(s * 1e6).toPrecision(3)} µs`;
  if (a < 1) return `${(s * 1e3).toPrecision(3)} ms`;
  if (a < 60) return `${s.toPrecision(3)} s`;
  const m = Math.floor(a / 60);
  return `${s < 0 ? "-" : ""}${m} min ${Math.round(a - m * 60)} s`;
}

/** Joules -> "3.2 mJ" / "1.25 J". */
export function formatEnergy(j: number | null | undefined): string {
  if (j === null || j === undefined || !Number.isFinite(j)) return "–";
  const a = Math.abs(j);
  if (a === 0) return "0 J";
  if (a < 1e-3) return `${(j * 1e6).toPrecision(3)} µJ`;
  if (a < 1) return `${(j * 1e3).toPrecision(3)} mJ`;
  return `${j.toPrecision(3)} J`;
}

/** 0.934 -> "93%". */
export function formatPercent(x: number | null | undefined): string {
  if (x === null || x === undefined || !Number.isFinite(x)) return "–";
  return `${Math.round(x * 100)}%`;
}

/** A number with at most `digits` significant digits, "–" when missing. */
export function formatNumber(x: number | null | undefined, digits = 3): string {
  if (x === null || x === undefined || !Number.isFinite(x)) return "–";
  return Number(x.toPrecision(digits)).toString();
}

/** Epoch ms -> "2026-12-01 11:54" in local time. */
export function formatDate(ms: number | null | undefined): string {
  if (ms === null || ms === undefined || !Number.isFinite(ms)) return "–";
  const d = new Date(ms);
  const p = (n: number) => String(n).padStart(2, "0");
  return `${d.getFullYear()}-${p(d.getMonth() + 1)}-${p(d.getDate())} ${p(d.getHours())}:${p(d.getMinutes())}`;
}

/** Download progress, "12.0 MiB / 48.0 MiB (25%)" or just bytes when the total is unknown. */
export function formatProgress(bytes: number, total: number | null): string {
  if (total === null || total <= 0) return formatBytes(bytes);
  return `${formatBytes(bytes)} / ${formatBytes(total)} (${formatPercent(bytes / total)})`;
}

/** Tokens over seconds -> "12.3 tok/s"; "–" when either is missing or no time passed. */
export function formatRate(tokens: number | null | undefined, seconds: number | null | undefined): string {
  if (tokens === null || tokens === undefined || seconds === null || seconds === undefined) return "–";
  if (!Number.isFinite(tokens) || !Number.isFinite(seconds) || seconds <= 0) return "–";
  return `${formatNumber(tokens / seconds)} tok/s`;
}
