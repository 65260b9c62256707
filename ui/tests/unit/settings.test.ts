import { describe, expect, it } from "vitest";
import type { DecodeSettings, SettingInfo } from "../../src/lib/bindings";
import {
  appliesTo, changedKeys, crossFieldErrors, defaultSettings, modelKindText, parseSetting, resolveEdits,
} from "../../src/lib/settings";

const info = (key: string, kind: SettingInfo["kind"], extra: Partial<SettingInfo> = {}): SettingInfo => ({
  key, label: key, explanation: "", kind, min: null, max: null, options: null, default: null, appliesTo: null, toggleLabel: null, ...extra,
});
const D = ["diffusion"];
const schema: SettingInfo[] = [
  info("genLength", "int", { min: 1, max: 4096, default: 32 }),
  info("blockLength", "int", { min: 1, max: 4096, default: 32, appliesTo: D }),
  info("steps", "int", { min: 1, max: 4096, default: 32, appliesTo: D }),
  info("temperature", "float", { min: 0, max: 2, default: 0 }),
  info("remasking", "choice", { options: ["low-confidence", "random"], default: "low-confidence", appliesTo: ["llada"] }),
  info("cache", "choice", { options: ["none", "prefix", "dual"], default: "none", appliesTo: D }),
  info("threshold", "float", { min: 0.01, max: 1, default: 0.9, appliesTo: D, toggleLabel: "Parallel decoding by confidence threshold" }),
  info("algorithm", "choice", { options: ["origin", "entropy"], default: "origin", appliesTo: ["dream"], toggleLabel: "Choose" }),
  info("speculative", "bool", { default: false, appliesTo: D }),
  info("revision", "bool", { default: false, appliesTo: D }),
  info("moe", "choice", { options: ["cpu", "naive"], default: "cpu", appliesTo: ["moe"] }),
  info("cfgScale", "float", { min: 0, max: 10, default: 0, appliesTo: ["llada"] }),
  info("seed", "int", { min: 0, max: 4294967295, default: 0 }),
];
const by = (k: string) => schema.find((s) => s.key === k)!;
const preset: DecodeSettings = { ...defaultSettings(schema) };
const LLADA = ["diffusion", "llada"];

describe("settings: parsing never clamps", () => {
  it("accepts values in range, ints whole", () => {
    expect(parseSetting(by("steps"), "12")).toEqual({ ok: true, value: 12 });
    expect(parseSetting(by("temperature"), " 0.7 ")).toEqual({ ok: true, value: 0.7 });
    expect(parseSetting(by("cache"), "prefix")).toEqual({ ok: true, value: "prefix" });
    expect(parseSetting(by("speculative"), true)).toEqual({ ok: true, value: true });
  });
  it("rejects out-of-range, non-numbers, fractions for ints and empty fields with a message", () => {
    const err = (i: SettingInfo, raw: string) => {
      const p = parseSetting(i, raw);
      if (p.ok) throw new Error(`${raw} accepted as ${p.value}`);
      return p.error;
    };
    expect(err(by("temperature"), "5")).toBe("5 is out of range: allowed 0–2.");
    expect(err(by("steps"), "0")).toContain("allowed 1–4096");
    expect(err(by("steps"), "abc")).toBe('"abc" is not a number.');
    expect(err(by("steps"), "0x10")).toContain("not a number");
    expect(err(by("steps"), "12.5")).toContain("whole number");
    expect(err(by("temperature"), "")).toContain("Enter a number");
    expect(err(by("threshold"), "0")).toContain("allowed 0.01–1");
    expect(err(by("cache"), "fast")).toContain("none, prefix, dual");
  });
});

describe("settings: rules across fields", () => {
  it("answer length must be a multiple of the block length", () => {
    const e = crossFieldErrors({ ...preset, genLength: 50, blockLength: 32 }, LLADA);
    expect(e).toEqual([{ fields: ["genLength", "blockLength"], message: "Answer length 50 must be a multiple of the block length 32." }]);
  });
  it("steps must divide into the blocks and not exceed the answer, unless a threshold decides", () => {
    expect(crossFieldErrors({ ...preset, genLength: 64, blockLength: 32, steps: 3 }, LLADA)[0].fields[0]).toBe("steps");
    expect(crossFieldErrors({ ...preset, steps: 64 }, LLADA)[0].message).toContain("exceed the 32 answer tokens");
    expect(crossFieldErrors({ ...preset, steps: 64, threshold: 0.9 }, LLADA)).toEqual([]);
  });
  it("CFG and a KV cache exclude each other on LLaDA; autoregressive models skip diffusion rules", () => {
    expect(crossFieldErrors({ ...preset, cfgScale: 1, cache: "prefix" }, LLADA)[0].fields).toEqual(["cfgScale", "cache"]);
    expect(crossFieldErrors({ ...preset, cfgScale: 1, cache: "prefix" }, ["diffusion", "dream"])).toEqual([]);
    expect(crossFieldErrors({ ...preset, genLength: 50 }, ["autoregressive"])).toEqual([]);
  });
});

describe("settings: resolving edits", () => {
  it("applies a valid edit and keeps nothing pending", () => {
    const r = resolveEdits(schema, preset, { temperature: "0.5" }, LLADA);
    expect(r.settings).toMatchObject({ temperature: 0.5 });
    expect(r.errors).toEqual({});
    expect(r.pending).toEqual({});
  });
  it("keeps an out-of-range value typed, with its message, and applies nothing", () => {
    const r = resolveEdits(schema, preset, { temperature: "5" }, LLADA);
    expect(r.settings).toBeNull();
    expect(r.errors.temperature).toContain("out of range");
    expect(r.pending).toEqual({ temperature: "5" });
  });
  it("applies valid fields beside an invalid one", () => {
    const r = resolveEdits(schema, preset, { temperature: "abc", seed: "7" }, LLADA);
    expect(r.settings).toMatchObject({ seed: 7, temperature: preset.temperature });
    expect(Object.keys(r.errors)).toEqual(["temperature"]);
    expect(r.pending).toEqual({ temperature: "abc" });
  });
  it("reports a broken rule on the edited field and applies it once the other field fixes it", () => {
    const first = resolveEdits(schema, preset, { genLength: "48" }, LLADA);
    expect(first.settings).toBeNull();
    expect(first.errors.genLength).toBe("Answer length 48 must be a multiple of the block length 32.");
    expect(first.pending).toEqual({ genLength: "48" });
    const second = resolveEdits(schema, preset, { ...first.pending, blockLength: "16", steps: "48" }, LLADA);
    expect(second.errors).toEqual({});
    expect(second.settings).toMatchObject({ genLength: 48, blockLength: 16, steps: 48 });
    expect(second.pending).toEqual({});
  });
});

describe("settings: which apply, which changed", () => {
  it("shows Dream options only for Dream, CFG only for LLaDA, MoE execution only for MoE models", () => {
    const shown = (kinds: string[]) => schema.filter((s) => appliesTo(s, kinds)).map((s) => s.key);
    expect(shown(LLADA)).not.toContain("algorithm");
    expect(shown(LLADA)).toContain("cfgScale");
    expect(shown(LLADA)).not.toContain("moe");
    expect(shown(["diffusion", "dream"])).toContain("algorithm");
    expect(shown(["diffusion", "dream"])).not.toContain("cfgScale");
    expect(shown(["diffusion", "llada", "moe"])).toContain("moe");
    expect(shown(["autoregressive"])).toEqual(["genLength", "temperature", "seed"]);
    expect(shown([])).toHaveLength(schema.length);
    expect(modelKindText(["diffusion", "llada", "moe"])).toBe("LLaDA mixture-of-experts diffusion model");
  });
  it("optional settings start off; nothing is changed against the preset in use on first open", () => {
    const s = defaultSettings(schema);
    expect(s.threshold).toBeNull();
    expect(s.algorithm).toBeNull();
    expect(changedKeys(schema, s, s)).toEqual([]);
    expect(changedKeys(schema, { ...s, threshold: 0.9, steps: 8 }, s)).toEqual(["steps", "threshold"]);
    expect(changedKeys(schema, s, null)).toEqual([]);
    // A preset saved before a setting existed reads as that setting's default.
    const { moe: _moe, ...old } = s;
    expect(changedKeys(schema, { ...s, moe: "cpu" }, old as DecodeSettings)).toEqual([]);
  });
});
