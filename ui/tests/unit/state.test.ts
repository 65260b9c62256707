import { afterEach, describe, expect, it } from "vitest";
import { clearMocks, mockIPC } from "@tauri-apps/api/mocks";
import { app, applyPreset, loadAll, recordEdit, resetSettings, selectModel } from "../../src/lib/state.svelte";
import type { AppInfo, DecodeSettings, ModelEntry, Preset, SettingInfo } from "../../src/lib/bindings";
import { loadFixtures } from "../fixtures";

const settings = loadFixtures()[0].run.request.settings;
const info: AppInfo = { version: "t", dataDir: "/d", cpu: "c", threads: 2, memoryBytes: 1, availableMemoryBytes: 1, defaultModelId: 7, devices: ["sm8750"] };
const schema: SettingInfo[] = [
  { key: "steps", label: "Steps", explanation: "e", kind: "int", min: 1, max: 99, options: null, default: 3, appliesTo: null, toggleLabel: null },
  { key: "threshold", label: "T", explanation: "e", kind: "float", min: 0, max: 1, options: null, default: 0.9, appliesTo: null, toggleLabel: null },
];
const reference: Preset = { id: 5, name: "Reference", settings: { ...settings, threshold: null }, backend: { kind: "cpu", device: null }, builtin: true };

function backend(presets: Preset[], models: ModelEntry[] = []) {
  mockIPC((cmd) => {
    switch (cmd) {
      case "app_info": return info;
      case "list_models": return models;
      case "list_presets": return presets;
      case "settings_schema": return schema;
      default: throw { kind: "unknown", message: `unexpected ${cmd}` };
    }
  });
}

afterEach(() => {
  clearMocks();
  app.error = null;
});

describe("app state loading", () => {
  it("without the model's own defaults, starts from the built-in reference preset, not the schema's suggested values", async () => {
    backend([reference]);
    await loadAll();
    expect(app.loaded).toBe(true);
    expect(app.modelId).toBe(7);
    expect(app.presetId).toBe(5);
    expect(app.settings?.threshold).toBeNull();
    expect(app.settings?.steps).toBe(settings.steps);
    if (app.settings) app.settings.steps = 1;
    resetSettings();
    expect(app.settings?.steps).toBe(settings.steps);
  });

  it("falls back to schema defaults without presets and shows a failing command's message", async () => {
    backend([]);
    await loadAll();
    expect(app.presetId).toBeNull();
    expect(app.settings).toMatchObject({ steps: 3, threshold: 0.9 });
    mockIPC(() => {
      throw { kind: "store", message: "database is locked" };
    });
    await loadAll();
    expect(app.error).toBe("database is locked");
  });
});

function model(id: number, defaultSettings: DecodeSettings | null): ModelEntry {
  return { id, name: `m${id}`, architecture: "llada", format: "safetensors", quantisation: "f32", sizeBytes: 1, sha256: "", source: "",
    path: "", addedMs: 0, usedMs: null, embedded: id === 7, fitsMemory: true, kinds: ["diffusion", "llada"], weightsBytes: 1,
    kvBytesPerToken: 1, activationBytesPerToken: 1, logitsBytesPerRow: 1, contextTokens: 256, runCount: 0, defaultSettings, moeCalibration: null };
}

describe("settings from the model's own defaults", () => {
  const shipped: DecodeSettings = { ...settings, genLength: 16, blockLength: 16, steps: 16, seed: 0, threshold: null };
  const other: DecodeSettings = { ...shipped, genLength: 64, blockLength: 32, steps: 64, temperature: 0.7 };

  it("start there with nothing chosen; edits become choices, a value back at the default is none", async () => {
    backend([reference], [model(7, shipped), model(8, other)]);
    await loadAll();
    expect(app.presetId).toBeNull();
    expect(app.overridden).toEqual([]);
    expect(app.settings).toEqual(shipped);
    recordEdit({ ...app.settings!, seed: 5 });
    app.settings = { ...app.settings!, seed: 5 };
    expect(app.overridden).toEqual(["seed"]);
    // One of the geometry is all three: what the form shows is what runs.
    recordEdit({ ...app.settings!, steps: 8 });
    app.settings = { ...app.settings!, steps: 8 };
    expect([...app.overridden!].sort()).toEqual(["blockLength", "genLength", "seed", "steps"]);
    // Another model: what was not chosen follows its defaults, the choices stay.
    selectModel(8);
    expect(app.settings).toMatchObject({ temperature: 0.7, seed: 5, steps: 8, genLength: 16 });
    recordEdit({ ...app.settings!, seed: 0 });
    expect(app.overridden).not.toContain("seed");
    // A preset is applied as it is: every setting a choice; reset goes back to the model's defaults.
    applyPreset(reference);
    expect(app.overridden).toBeNull();
    resetSettings();
    expect(app.overridden).toEqual([]);
    expect(app.settings).toEqual(other);
  });
});
