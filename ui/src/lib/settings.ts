// Turning the settings schema into values and back.
import type { DecodeSettings, SettingInfo } from "./contract";

/** Settings filled from the schema's defaults. */
export function defaultSettings(schema: readonly SettingInfo[]): DecodeSettings {
  const out: Record<string, unknown> = {};
  for (const s of schema) out[s.key] = s.default;
  return out as DecodeSettings;
}

/** Settings that are optional in DecodeSettings (`Option` in Rust): empty means "off / model default". */
export const NULLABLE_SETTINGS: ReadonlySet<string> = new Set(["threshold", "algorithm"]);

/**
 * Parses what the user typed into a setting's value: numbers are clamped to [min, max] and ints
 * rounded; an empty field means "unset" (null) for optional settings and the default otherwise.
 */
export function parseSetting(info: SettingInfo, raw: string | boolean): number | boolean | string | null {
  if (info.kind === "bool") return typeof raw === "boolean" ? raw : raw === "true";
  const empty = typeof raw === "string" && raw.trim() === "";
  if (empty) return NULLABLE_SETTINGS.has(info.key) ? null : info.default;
  if (info.kind === "choice") return String(raw);
  const text = String(raw).trim();
  let v = Number(text);
  if (!Number.isFinite(v)) return info.default;
  if (info.kind === "int") v = Math.round(v);
  if (info.min !== null) v = Math.max(info.min, v);
  if (info.max !== null) v = Math.min(info.max, v);
  return v;
}

/** Keys whose value differs from the default, for the "changed" marker. */
export function changedKeys(schema: readonly SettingInfo[], settings: DecodeSettings): string[] {
  const rec = settings as unknown as Record<string, unknown>;
  return schema.filter((s) => rec[s.key] !== s.default).map((s) => s.key);
}
