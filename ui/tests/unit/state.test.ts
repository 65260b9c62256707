import { afterEach, describe, expect, it } from "vitest";
import { clearMocks, mockIPC } from "@tauri-apps/api/mocks";
import { app, loadAll, resetSettings } from "../../src/lib/state.svelte";
import type { AppInfo, Preset, SettingInfo } from "../../src/lib/bindings";
import { loadFixtures } from "../fixtures";

const settings = loadFixtures()[0].run.request.settings;
const info: AppInfo = { version: "t", dataDir: "/d", cpu: "c", threads: 2, memoryBytes: 1, availableMemoryBytes: 1, defaultModelId: 7, devices: ["sm8750"] };
const schema: SettingInfo[] = [
  { key: "steps", label: "Steps", explanation: "e", kind: "int", min: 1, max: 99, options: null, default: 3, appliesTo: null, toggleLabel: null },
  { key: "threshold", label: "T", explanation: "e", kind: "float", min: 0, max: 1, options: null, default: 0.9, appliesTo: null, toggleLabel: null },
];
const reference: Preset = { id: 5, name: "Reference", settings: { ...settings, threshold: null }, backend: { kind: "cpu", device: null }, builtin: true };

function backend(presets: Preset[]) {
  mockIPC((cmd) => {
    switch (cmd) {
      case "app_info": return info;
      case "list_models": return [];
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
  it("starts from the built-in reference preset, not the schema's suggested values", async () => {
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
