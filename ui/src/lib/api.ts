// The only place the UI talks to the Rust side: a thin layer over the tauri-specta generated
// `commands` (bindings.ts), which turns their `{ status, data | error }` results into values and
// thrown ApiErrors, and callbacks into Channels.
import { Channel } from "@tauri-apps/api/core";
import {
  commands,
  type AppError,
  type AppErrorKind,
  type BackendChoice,
  type DecodeSettings,
  type DownloadEvent,
  type GenerateEvent,
  type GenerateRequest,
  type RunSummary,
} from "./bindings";

/** A failed command, carrying the AppError kind; `message` is what the UI shows. */
export class ApiError extends Error {
  readonly kind: AppErrorKind;
  constructor(kind: AppErrorKind, message: string) {
    super(message);
    this.kind = kind;
    this.name = "ApiError";
  }
}

function isAppError(e: unknown): e is AppError {
  return typeof e === "object" && e !== null && typeof (e as AppError).message === "string" &&
    typeof (e as AppError).kind === "string";
}

/** Normalises whatever a failed command carries (AppError object, string, Error) to ApiError. */
export function toApiError(e: unknown): ApiError {
  if (e instanceof ApiError) return e;
  if (isAppError(e)) return new ApiError(e.kind, e.message);
  if (e instanceof Error) return new ApiError("internal", e.message);
  return new ApiError("internal", String(e));
}

type Result<T> = { status: "ok"; data: T } | { status: "error"; error: unknown };

/** The value of a generated command, or its error thrown as ApiError. The generated wrapper
 * rethrows Error instances (IPC failures) and types any other rejection as AppError, although
 * Tauri itself can reject with a plain string (an unknown command), so both pass toApiError. */
async function unwrap<T>(result: Promise<Result<T>>): Promise<T> {
  let r: Result<T>;
  try {
    r = await result;
  } catch (e) {
    throw toApiError(e);
  }
  if (r.status === "error") throw toApiError(r.error);
  return r.data;
}

function channel<T>(onEvent: (e: T) => void): Channel<T> {
  const ch = new Channel<T>();
  ch.onmessage = onEvent;
  return ch;
}

/** App version, data folder, this machine and the virtual NPU profiles. */
export const appInfo = () => unwrap(commands.appInfo());

/** All models in the store. */
export const listModels = () => unwrap(commands.listModels());
/** Imports a model directory or GGUF file from disk. */
export const importModel = (path: string, name: string | null = null) => unwrap(commands.importModel(path, name));
/** Deletes a model (files and store rows). */
export const deleteModel = (id: number) => unwrap(commands.deleteModel(id));
/** Runs made with a model. */
export const modelRuns = (id: number) => unwrap(commands.modelRuns(id));

/**
 * Starts a download of `repo` at `revision` (null: main), the whole model or only `file` (one
 * .gguf); events arrive on `onEvent`. Resolves with the download id.
 */
export const startDownload = (
  baseUrl: string,
  repo: string,
  revision: string | null,
  file: string | null,
  name: string | null,
  onEvent: (e: DownloadEvent) => void,
): Promise<number> => unwrap(commands.startDownload(baseUrl, repo, revision, file, name, channel(onEvent)));
/** Debug builds under test: the path a file picker should return (UNMASK_E2E_PICK); else null. */
export const testPickedPath = () => unwrap(commands.testPickedPath());
/** Pauses a running download. */
export const pauseDownload = (id: number) => unwrap(commands.pauseDownload(id));
/** Resumes a paused download. */
export const resumeDownload = (id: number) => unwrap(commands.resumeDownload(id));
/** Cancels a download and discards its partial files. */
export const cancelDownload = (id: number) => unwrap(commands.cancelDownload(id));

/** Describes every decoding setting. */
export const settingsSchema = () => unwrap(commands.settingsSchema());
/** Built-in and saved presets. */
export const listPresets = () => unwrap(commands.listPresets());
/** Saves settings + backend under a name. */
export const savePreset = (name: string, settings: DecodeSettings, backend: BackendChoice) =>
  unwrap(commands.savePreset(name, settings, backend));
/** Deletes a saved preset. */
export const deletePreset = (id: number) => unwrap(commands.deletePreset(id));

/** Conversations, newest first. */
export const listConversations = () => unwrap(commands.listConversations());
/** One conversation with its messages. */
export const getConversation = (id: number) => unwrap(commands.getConversation(id));
/** Deletes a conversation. */
export const deleteConversation = (id: number) => unwrap(commands.deleteConversation(id));
/** Gives a conversation a new title. */
export const renameConversation = (id: number, title: string) => unwrap(commands.renameConversation(id, title));
/** Sets (blank or null: clears) the system prompt of a conversation. */
export const setSystemPrompt = (id: number, systemPrompt: string | null) =>
  unwrap(commands.setSystemPrompt(id, systemPrompt));
/** Conversations whose title or messages contain `query`, newest first. */
export const searchConversations = (query: string) => unwrap(commands.searchConversations(query));

/** Runs a generation; events stream to `onEvent`; resolves with the final summary. */
export const generate = (request: GenerateRequest, onEvent: (e: GenerateEvent) => void): Promise<RunSummary> =>
  unwrap(commands.generate(request, channel(onEvent)));
/** Asks a running generation to stop before its next step. */
export const stopGeneration = (runId: number) => unwrap(commands.stopGeneration(runId));

/** Recent runs, optionally of one model. */
export const listRuns = (modelId: number | null, limit: number) => unwrap(commands.listRuns(modelId, limit));
/** One run with frames and timeline. */
export const getRun = (id: number) => unwrap(commands.getRun(id));
/** Several runs for the compare view. */
export const compareRuns = (ids: number[]) => unwrap(commands.compareRuns(ids));
/** Writes a run's Perfetto trace to a path; resolves with the bytes written. */
export const exportPerfetto = (runId: number, path: string) => unwrap(commands.exportPerfetto(runId, path));
/** A run's Perfetto (Chrome trace) JSON, for a browser download. */
export const perfettoJson = (runId: number) => unwrap(commands.perfettoJson(runId));
/** Runs one prompt once per preset. */
export const rerunWithPresets = (prompt: string, modelId: number | null, presetIds: number[]) =>
  unwrap(commands.rerunWithPresets(prompt, modelId, presetIds));
