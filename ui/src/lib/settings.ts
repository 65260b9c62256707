// Turning the settings schema into values and back: parsing what the user typed (never clamping:
// out-of-range input is an error shown next to the field), checks across fields, which settings
// apply to a model, and which differ from the preset in use.
import type { DecodeSettings, SettingInfo, SettingKey } from "./bindings";

type Value = number | boolean | string | null;
type Rec = Record<string, unknown>;

/** Settings filled from the schema's defaults; optional settings start off (null). */
export function defaultSettings(schema: readonly SettingInfo[]): DecodeSettings {
  const out: Rec = {};
  for (const s of schema) out[s.key] = isOptional(s) ? null : s.default;
  return out as DecodeSettings;
}

/** Optional settings are null ("off" / the model's default) unless their switch is on. */
export function isOptional(info: SettingInfo): boolean {
  return info.toggleLabel !== null;
}

/** Whether a setting matters for a model of `kinds` (unknown kinds: show everything). */
export function appliesTo(info: SettingInfo, kinds: readonly string[]): boolean {
  return info.appliesTo === null || kinds.length === 0 || info.appliesTo.some((k) => kinds.includes(k));
}

/** Names of model kinds as a person reads them. */
export const KIND_NAMES: Readonly<Record<string, string>> = {
  diffusion: "diffusion models",
  autoregressive: "autoregressive models",
  llada: "LLaDA models",
  dream: "Dream models",
  moe: "mixture-of-experts models",
};

/** A model's kinds in words: "LLaDA diffusion model", "Dream diffusion model", "mixture-of-experts autoregressive model". */
export function modelKindText(kinds: readonly string[]): string {
  const family = kinds.includes("llada") ? "LLaDA " : kinds.includes("dream") ? "Dream " : "";
  const moe = kinds.includes("moe") ? "mixture-of-experts " : "";
  const how = kinds.includes("diffusion") ? "diffusion " : kinds.includes("autoregressive") ? "autoregressive " : "";
  return `${family}${moe}${how}model`;
}

/** "Dream models", "LLaDA models or mixture-of-experts models". */
export function kindsText(kinds: readonly string[]): string {
  return kinds.map((k) => KIND_NAMES[k] ?? k).join(" or ");
}

/** The result of parsing one field: a value to apply, or why it cannot be applied. */
export type Parsed = { ok: true; value: Value } | { ok: false; error: string };

function fmt(n: number): string {
  return Number.isInteger(n) ? String(n) : String(Number(n.toPrecision(6)));
}

/** The allowed range in words, e.g. "0–2" or "at least 0". */
export function rangeText(info: SettingInfo): string | null {
  if (info.min !== null && info.max !== null) return `${fmt(info.min)}–${fmt(info.max)}`;
  if (info.min !== null) return `at least ${fmt(info.min)}`;
  if (info.max !== null) return `at most ${fmt(info.max)}`;
  return null;
}

/**
 * Parses what the user typed into a setting. Numbers must be numbers inside [min, max] (ints
 * whole); nothing is clamped or rounded. An empty field is an error: optional settings are
 * turned off with their switch, not by emptying them.
 */
export function parseSetting(info: SettingInfo, raw: string | boolean): Parsed {
  if (info.kind === "bool") return { ok: true, value: typeof raw === "boolean" ? raw : raw === "true" };
  const text = String(raw).trim();
  if (info.kind === "choice") {
    if (info.options !== null && !info.options.includes(text)) {
      return { ok: false, error: `Choose one of ${info.options.join(", ")}.` };
    }
    return { ok: true, value: text };
  }
  const range = rangeText(info);
  if (text === "") return { ok: false, error: `Enter a ${info.kind === "int" ? "whole number" : "number"}${range ? ` (${range})` : ""}.` };
  // Number("") is 0 and Number("0x10") is 16: accept only plain decimal notation.
  const v = /^[+-]?(\d+\.?\d*|\.\d+)(e[+-]?\d+)?$/i.test(text) ? Number(text) : NaN;
  if (!Number.isFinite(v)) return { ok: false, error: `"${text}" is not a number.` };
  if (info.kind === "int" && !Number.isInteger(v)) return { ok: false, error: `Enter a whole number, not ${text}.` };
  if ((info.min !== null && v < info.min) || (info.max !== null && v > info.max)) {
    return { ok: false, error: `${fmt(v)} is out of range: allowed ${range}.` };
  }
  return { ok: true, value: v };
}

/** A broken rule across fields: the fields involved (the first one explains it) and why. */
export type CrossFieldError = { fields: string[]; message: string };

/**
 * Rules that involve several fields, as the engine checks them before a run, for a model of
 * `kinds` (rules of settings that do not apply to it are skipped; unknown kinds: all rules).
 */
export function crossFieldErrors(settings: DecodeSettings, kinds: readonly string[] = []): CrossFieldError[] {
  const out: CrossFieldError[] = [];
  const known = kinds.length > 0;
  if (known && !kinds.includes("diffusion")) return out;
  const { genLength: gen, blockLength: block, steps } = settings;
  if (block > 0 && gen % block !== 0) {
    out.push({ fields: ["genLength", "blockLength"], message: `Answer length ${gen} must be a multiple of the block length ${block}.` });
  } else if (settings.threshold === null && block > 0) {
    const blocks = gen / block;
    if (steps % blocks !== 0) {
      out.push({ fields: ["steps", "genLength", "blockLength"],
        message: `Steps ${steps} must be a multiple of the ${blocks} blocks (answer length ${gen} / block length ${block}).` });
    } else if (steps > gen) {
      out.push({ fields: ["steps", "genLength"], message: `Steps ${steps} exceed the ${gen} answer tokens (a step commits at least one token).` });
    }
  }
  if ((!known || kinds.includes("llada")) && settings.cfgScale > 0 && settings.cache !== "none") {
    out.push({ fields: ["cfgScale", "cache"], message: "Guidance (CFG) cannot be combined with a KV cache: set the cache to none or the guidance to 0." });
  }
  return out;
}

/** What the form shows and applies after an edit. */
export type Resolved = {
  /** Settings to apply (null: keep the applied ones). */
  settings: DecodeSettings | null;
  /** Messages by field. */
  errors: Record<string, string>;
  /** Typed values not applied: the form keeps showing them so they can be corrected. */
  pending: Record<string, string | boolean>;
};

/**
 * Combines the applied settings with the fields the user has typed (`drafts`, raw text by key).
 * A field that parses applies unless a rule across fields fails; a broken rule is reported on
 * the edited fields it involves. Fields in error keep the text the user typed, and the applied
 * settings keep their last valid values, so nothing invalid is ever sent.
 */
export function resolveEdits(
  schema: readonly SettingInfo[],
  applied: DecodeSettings,
  drafts: Readonly<Record<string, string | boolean>>,
  kinds: readonly string[] = [],
): Resolved {
  const errors: Record<string, string> = {};
  const candidate: Rec = { ...(applied as unknown as Rec) };
  for (const [key, raw] of Object.entries(drafts)) {
    const info = schema.find((s) => s.key === key);
    if (!info) continue;
    const p = parseSetting(info, raw);
    if (p.ok) candidate[key] = p.value;
    else errors[key] = p.error;
  }
  const cross = crossFieldErrors(candidate as DecodeSettings, kinds);
  for (const rule of cross) {
    const edited = rule.fields.filter((f) => f in drafts);
    for (const f of edited.length > 0 ? edited : rule.fields.slice(0, 1)) errors[f] ??= rule.message;
  }
  // Apply what is fine on its own, if the result passes every rule; otherwise nothing.
  const next: Rec = { ...(applied as unknown as Rec) };
  for (const key of Object.keys(drafts)) if (!(key in errors)) next[key] = candidate[key];
  const valid = crossFieldErrors(next as DecodeSettings, kinds).length === 0;
  const pending: Record<string, string | boolean> = {};
  for (const [key, raw] of Object.entries(drafts)) if (!valid || key in errors) pending[key] = raw;
  return { settings: valid && !sameSettings(next, applied) ? (next as DecodeSettings) : null, errors, pending };
}

function sameSettings(a: unknown, b: unknown): boolean {
  const x = a as Rec;
  const y = b as Rec;
  return Object.keys({ ...x, ...y }).every((k) => x[k] === y[k]);
}

/**
 * Keys whose value differs from `reference` (the preset in use, else the reference preset), for
 * the "changed" marker; nothing is changed before the user changes it.
 */
export function changedKeys(schema: readonly SettingInfo[], settings: DecodeSettings, reference: DecodeSettings | null): string[] {
  if (reference === null) return [];
  const rec = settings as unknown as Rec;
  const ref = reference as unknown as Rec;
  // A field missing from an older preset has its default (optional ones: off).
  const norm = (s: SettingInfo, v: unknown) => (v === undefined ? (isOptional(s) ? null : s.default) : v);
  return schema.filter((s) => norm(s, rec[s.key]) !== norm(s, ref[s.key])).map((s) => s.key);
}

/** `base` with the `chosen` settings taken from `settings` (the model's defaults under the user's choices). */
export function withChoices(base: DecodeSettings, settings: DecodeSettings, chosen: readonly SettingKey[]): DecodeSettings {
  const out = { ...base } as Rec;
  for (const k of chosen) out[k] = (settings as unknown as Rec)[k];
  return out as DecodeSettings;
}

/** Settings whose value differs between two settings (what an edit changed). */
export function differingKeys(a: DecodeSettings, b: DecodeSettings): SettingKey[] {
  const x = a as unknown as Rec;
  const y = b as unknown as Rec;
  return Object.keys({ ...x, ...y }).filter((k) => x[k] !== y[k]) as SettingKey[];
}
