// App-wide state shared by the screens: what was loaded from the backend and the current choices.
import * as api from "./api";
import type { AppInfo, BackendChoice, DecodeSettings, ModelEntry, Preset, SettingInfo } from "./bindings";
import { defaultSettings } from "./settings";

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
  backend: { kind: "cpu", device: null } as BackendChoice,
  modelId: null as number | null,
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
    resetSettings();
    app.modelId = info.defaultModelId ?? models[0]?.id ?? null;
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

/**
 * Starting settings: the first built-in preset (the reference decoder) when there is one, since a
 * schema default can be a suggested value (e.g. a threshold) rather than the engine's "unset".
 */
export function resetSettings(): void {
  const reference = app.presets.find((p) => p.builtin);
  if (reference) applyPreset(reference);
  else {
    app.settings = defaultSettings(app.schema);
    app.presetId = null;
  }
}

/** Makes a preset's settings and backend the current ones. */
export function applyPreset(p: Preset): void {
  app.presetId = p.id;
  app.settings = structuredClone($state.snapshot(p.settings)) as DecodeSettings;
  app.backend = { ...p.backend };
}

/** Opens the profiler on a run. */
export function openProfile(runId: number): void {
  app.profileRunId = runId;
  selectTab("profiler");
}
