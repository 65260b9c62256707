// App-wide state shared by the screens: what was loaded from the backend and the current choices.
import * as api from "./api";
import type { AppInfo, BackendChoice, DecodeSettings, ModelEntry, Preset, SettingInfo, SettingKey } from "./bindings";
import { defaultSettings, differingKeys, withChoices } from "./settings";

/** Screens of the app. */
export type Tab = "chat" | "profiler" | "models" | "compare" | "settings";

/** Shared, reactive app state. */
export const app = $state({
  tab: "chat" as Tab,
  info: null as AppInfo | null,
  models: [] as ModelEntry[],
  presets: [] as Preset[],
  schema: [] as SettingInfo[],
  settings: null as DecodeSettings | null,
  /**
   * The settings the user chose; the others are the model's defaults and follow the model. Null:
   * every setting is a choice (a preset was applied as it is).
   */
  overridden: [] as SettingKey[] | null,
  backend: { kind: "cpu", device: null } as BackendChoice,
  modelId: null as number | null,
  /** Draft model for speculative decoding (autoregressive models only; see lib/draft.ts). */
  draftModelId: null as number | null,
  presetId: null as number | null,
  /** Run shown in the profiler. */
  profileRunId: null as number | null,
  error: null as string | null,
  /**
   * Screen an error from showError belongs to, with its message so that a message assigned to `error`
   * directly is not routed by a stale entry; such an error belongs to the open screen.
   */
  errorScreen: null as { tab: Tab; message: string } | null,
  loaded: false,
});

/** Shows an error banner with the command's message on the screen where it happened (by default the open one). */
export function showError(e: unknown, tab: Tab = app.tab): void {
  const message = api.toApiError(e).message;
  app.error = message;
  app.errorScreen = { tab, message };
}

/** Removes the error banner. */
export function dismissError(): void {
  app.error = null;
  app.errorScreen = null;
}

/** The error to show on a screen, if it belongs there. */
export function errorOn(tab: Tab): string | null {
  if (app.error === null) return null;
  const owner = app.errorScreen?.message === app.error ? app.errorScreen.tab : app.tab;
  return owner === tab ? app.error : null;
}

/** Opens a screen; leaving the screen an error belongs to clears that error. */
export function selectTab(tab: Tab): void {
  if (tab === app.tab) return;
  if (errorOn(app.tab) !== null) dismissError();
  app.tab = tab;
}

/** Loads everything the screens need at start. */
export async function loadAll(): Promise<void> {
  try {
    const [info, models, presets, schema] = await Promise.all([
      api.appInfo(),
      api.listModels(),
      api.listPresets(),
      api.settingsSchema(),
    ]);
    app.info = info;
    app.models = models;
    app.presets = presets;
    app.schema = schema;
    app.modelId = info.defaultModelId ?? models[0]?.id ?? null;
    resetSettings();
    app.loaded = true;
  } catch (e) {
    showError(e);
  }
}

/** Reloads the model list (after import, download, delete, runs). */
export async function refreshModels(): Promise<void> {
  try {
    app.models = await api.listModels();
  } catch (e) {
    showError(e);
  }
}

/** Reloads the presets. */
export async function refreshPresets(): Promise<void> {
  try {
    app.presets = await api.listPresets();
  } catch (e) {
    showError(e);
  }
}

/** The model runs use now. */
export function currentModel(): ModelEntry | null {
  return app.models.find((m) => m.id === app.modelId) ?? null;
}

/**
 * Starting settings: the model's own defaults (its generation_config.json over the engine's), none
 * of them a choice, so a run sends no overrides. A model whose defaults could not be read starts
 * from the reference preset, else the schema's defaults.
 */
export function resetSettings(): void {
  const shipped = currentModel()?.defaultSettings ?? null;
  const reference = app.presets.find((p) => p.builtin);
  if (shipped) {
    app.settings = structuredClone($state.snapshot(shipped)) as DecodeSettings;
    app.overridden = [];
    app.presetId = null;
  } else if (reference) applyPreset(reference);
  else {
    app.settings = defaultSettings(app.schema);
    app.overridden = null;
    app.presetId = null;
  }
}

/** Switches the model; settings the user did not choose follow the new model's defaults. */
export function selectModel(id: number): void {
  app.modelId = id;
  const shipped = currentModel()?.defaultSettings ?? null;
  if (shipped && app.settings && app.overridden !== null) {
    app.settings = withChoices(structuredClone($state.snapshot(shipped)) as DecodeSettings, $state.snapshot(app.settings) as DecodeSettings, app.overridden);
  }
}

/** The canvas geometry: one decision, checked together by the form, so chosen together. */
const GEOMETRY: readonly SettingKey[] = ["genLength", "blockLength", "steps"];

/**
 * Records an edit of the settings (from the applied ones to `next`) in the user's choices: the
 * settings it changed become choices (one of the geometry makes all three choices, so what the form
 * shows is what runs); a setting back at the model's default is no longer one.
 */
export function recordEdit(next: DecodeSettings): void {
  const shipped = currentModel()?.defaultSettings ?? null;
  if (app.overridden === null || app.settings === null || shipped === null) return;
  let edited = differingKeys(app.settings, next);
  if (edited.some((k) => GEOMETRY.includes(k))) edited = [...edited, ...GEOMETRY];
  const chosen = new Set([...app.overridden, ...edited]);
  const atDefault = (k: SettingKey) => (next as unknown as Record<string, unknown>)[k] === (shipped as unknown as Record<string, unknown>)[k];
  for (const k of chosen) if (!GEOMETRY.includes(k) && atDefault(k)) chosen.delete(k);
  if (GEOMETRY.every(atDefault)) for (const k of GEOMETRY) chosen.delete(k);
  app.overridden = [...chosen];
}

/** Makes a preset's settings and backend the current ones. */
export function applyPreset(p: Preset): void {
  app.presetId = p.id;
  app.settings = structuredClone($state.snapshot(p.settings)) as DecodeSettings;
  app.overridden = null;
  app.backend = { ...p.backend };
}

/** Opens the profiler on a run. */
export function openProfile(runId: number): void {
  app.profileRunId = runId;
  selectTab("profiler");
}
