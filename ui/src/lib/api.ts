// The only place the UI talks to the Rust side: thin wrappers over `invoke` / `Channel`.
import { Channel, invoke } from "@tauri-apps/api/core";
import type {
  AppError,
  AppInfo,
  BackendChoice,
  Conversation,
  ConversationDetail,
  DecodeSettings,
  DownloadEvent,
  GenerateEvent,
  GenerateRequest,
  ModelEntry,
  Preset,
  RunDetail,
  RunSummary,
  SettingInfo,
} from "./contract";

/** A failed command, carrying the AppError kind; `message` is what the UI shows. */
export class ApiError extends Error {
  readonly kind: string;
  constructor(kind: string, message: string) {
    super(message);
    this.kind = kind;
    this.name = "ApiError";
  }
}

function isAppError(e: unknown): e is AppError {
  return typeof e === "object" && e !== null && typeof (e as AppError).message === "string" &&
    typeof (e as AppError).kind === "string";
}

/** Normalises whatever a rejected invoke carries (AppError object, string, Error) to ApiError. */
export function toApiError(e: unknown): ApiError {
  if (e instanceof ApiError) return e;
  if (isAppError(e)) return new ApiError(e.kind, e.message);
  if (e instanceof Error) return new ApiError("internal", e.message);
  return new ApiError("internal", String(e));
}

async function call<T>(cmd: string, args?: Record<string, unknown>): Promise<T> {
  try {
    return await invoke<T>(cmd, args);
  } catch (e) {
    throw toApiError(e);
  }
}

/** App version, data folder, this machine and the virtual NPU profiles. */
export const appInfo = () => call<AppInfo>("app_info");

/** All models in the store. */
export const listModels = () => call<ModelEntry[]>("list_models");
/** Imports a model directory or GGUF file from disk. */
export const importModel = (path: string, name: string | null = null) =>
  call<ModelEntry>("import_model", { path, name });
/** Deletes a model (files and store rows). */
export const deleteModel = (id: number) => call<null>("delete_model", { id });
/** Runs made with a model. */
export const modelRuns = (id: number) => call<RunSummary[]>("model_runs", { id });

/**
 * Starts a download of `repo` at `revision` (null: main), the whole model or only `file` (one
 * .gguf); events arrive on `onEvent`. Resolves with the download id.
 */
export function startDownload(
  baseUrl: string,
  repo: string,
  revision: string | null,
  file: string | null,
  name: string | null,
  onEvent: (e: DownloadEvent) => void,
): Promise<number> {
  const channel = new Channel<DownloadEvent>();
  channel.onmessage = onEvent;
  return call<number>("start_download", { baseUrl, repo, revision, file, name, onEvent: channel });
}
/** Debug builds under test: the path a file picker should return (UNMASK_E2E_PICK); else null. */
export const testPickedPath = () => call<string | null>("test_picked_path");
/** Pauses a running download. */
export const pauseDownload = (id: number) => call<null>("pause_download", { id });
/** Resumes a paused download. */
export const resumeDownload = (id: number) => call<null>("resume_download", { id });
/** Cancels a download and discards its partial files. */
export const cancelDownload = (id: number) => call<null>("cancel_download", { id });

/** Describes every decoding setting. */
export const settingsSchema = () => call<SettingInfo[]>("settings_schema");
/** Built-in and saved presets. */
export const listPresets = () => call<Preset[]>("list_presets");
/** Saves settings + backend under a name. */
export const savePreset = (name: string, settings: DecodeSettings, backend: BackendChoice) =>
  call<Preset>("save_preset", { name, settings, backend });
/** Deletes a saved preset. */
export const deletePreset = (id: number) => call<null>("delete_preset", { id });

/** Conversations, newest first. */
export const listConversations = () => call<Conversation[]>("list_conversations");
/** One conversation with its messages. */
export const getConversation = (id: number) => call<ConversationDetail>("get_conversation", { id });
/** Deletes a conversation. */
export const deleteConversation = (id: number) => call<null>("delete_conversation", { id });
/** Gives a conversation a new title. */
export const renameConversation = (id: number, title: string) =>
  call<Conversation>("rename_conversation", { id, title });
/** Sets (blank or null: clears) the system prompt of a conversation. */
export const setSystemPrompt = (id: number, systemPrompt: string | null) =>
  call<Conversation>("set_system_prompt", { id, systemPrompt });
/** Conversations whose title or messages contain `query`, newest first. */
export const searchConversations = (query: string) => call<Conversation[]>("search_conversations", { query });

/** Runs a generation; events stream to `onEvent`; resolves with the final summary. */
export function generate(request: GenerateRequest, onEvent: (e: GenerateEvent) => void): Promise<RunSummary> {
  const channel = new Channel<GenerateEvent>();
  channel.onmessage = onEvent;
  return call<RunSummary>("generate", { request, onEvent: channel });
}
/** Asks a running generation to stop before its next step. */
export const stopGeneration = (runId: number) => call<null>("stop_generation", { runId });

/** Recent runs, optionally of one model. */
export const listRuns = (modelId: number | null, limit: number) =>
  call<RunSummary[]>("list_runs", { modelId, limit });
/** One run with frames and timeline. */
export const getRun = (id: number) => call<RunDetail>("get_run", { id });
/** Several runs for the compare view. */
export const compareRuns = (ids: number[]) => call<RunDetail[]>("compare_runs", { ids });
/** Writes a run's Perfetto trace to a path; resolves with the bytes written. */
export const exportPerfetto = (runId: number, path: string) => call<number>("export_perfetto", { runId, path });
/** A run's Perfetto (Chrome trace) JSON, for a browser download. */
export const perfettoJson = (runId: number) => call<string>("perfetto_json", { runId });
/** Runs one prompt once per preset. */
export const rerunWithPresets = (prompt: string, modelId: number | null, presetIds: number[]) =>
  call<RunSummary[]>("rerun_with_presets", { prompt, modelId, presetIds });
