// Types of the app IPC contract v1 (docs/app-contract.md), written to equal what tauri-specta
// generates into `bindings.ts`; `npm run check` compares the two whenever bindings.ts exists
// (scripts/check-bindings.mjs). The UI still treats a null float (serde's NaN) as missing.

/** Life-cycle state of one canvas position. */
export type TokenState = "masked" | "visible" | "stable";
/** One position as the engine reports it in a frame. */
export type TokenView = {
  pos: number;
  token: number;
  text: string;
  state: TokenState;
  confidence: number;
  speculative: boolean;
  revised: boolean;
  /** One of the run's stop ids: the answer ends at the first such position, padding follows. */
  end: boolean;
};
/** One denoising step: only the positions that changed (deltas), like the engine's StepFrame. */
export type FrameDelta = {
  step: number;
  block: [number, number];
  forwardTokens: number;
  changes: TokenView[];
  stepWallS: number;
  simulatedS: number | null;
  committedTotal: number;
};
/** Which backend runs a generation; `device` names a virtual NPU profile. */
export type BackendChoice = { kind: "cpu" | "vnpu"; device: string | null };
/** Every decoding parameter the engine exposes. */
export type DecodeSettings = {
  genLength: number;
  blockLength: number;
  steps: number;
  temperature: number;
  remasking: "lowConfidence" | "random";
  cache: "none" | "prefix" | "dual";
  threshold: number | null;
  algorithm: string | null;
  speculative: boolean;
  revision: boolean;
  cfgScale: number;
  seed: number;
  /** Missing in settings saved before it existed (the engine then runs "cpu"). */
  moe?: "cpu" | "naive" | "staticTiers";
};
/** Schema entry describing one setting for the settings form. */
export type SettingInfo = {
  key: keyof DecodeSettings | string;
  label: string;
  explanation: string;
  kind: "int" | "float" | "bool" | "choice";
  min: number | null;
  max: number | null;
  options: string[] | null;
  /** The value when on; for an optional setting the value it starts at when turned on. */
  default: number | boolean | string | null;
  /** Model kinds (ModelEntry.kinds) it applies to; null = every model. */
  appliesTo: string[] | null;
  /** Optional settings (null = off / the model's default): label of the switch that turns it on. */
  toggleLabel: string | null;
};
/** A model in the store. */
export type ModelEntry = {
  id: number;
  name: string;
  architecture: string;
  format: string;
  quantisation: string;
  sizeBytes: number;
  sha256: string;
  source: string;
  path: string;
  addedMs: number;
  usedMs: number | null;
  embedded: boolean;
  /** Weights + working memory at the default settings fit the available memory (the UI recomputes it). */
  fitsMemory: boolean;
  /** "diffusion" | "autoregressive", "llada" | "dream", "moe". */
  kinds: string[];
  /** Bytes of the weight files. */
  weightsBytes: number;
  /** K/V cache bytes per context token, as the engine stores K/V; 0 when unknown. */
  kvBytesPerToken: number;
  /** One forward's activations per forwarded token. */
  activationBytesPerToken: number;
  /** One logits row; a diffusion run holds one per answer token, an autoregressive run one. */
  logitsBytesPerRow: number;
  /** Context length in tokens (prompt + answer). */
  contextTokens: number;
  runCount: number;
  moeCalibration: string | null;
};
/** Named decoding settings plus backend. */
export type Preset = {
  id: number;
  name: string;
  settings: DecodeSettings;
  backend: BackendChoice;
  builtin: boolean;
};
/** One chat message. */
export type Message = {
  id: number;
  role: "user" | "assistant";
  content: string;
  runId: number | null;
  createdMs: number;
};
/** A conversation in the list. */
export type Conversation = {
  id: number;
  title: string;
  modelId: number | null;
  updatedMs: number;
  /** The chat template's system turn for this conversation; null when it has none. */
  systemPrompt: string | null;
};
/** A conversation with its messages. */
export type ConversationDetail = { conversation: Conversation; messages: Message[] };
/** Status of a run. */
export type RunStatus = "running" | "completed" | "cancelled" | "failed" | "interrupted";
/** Headline numbers of a run. */
export type RunSummary = {
  id: number;
  modelName: string;
  backend: string;
  prompt: string;
  output: string;
  status: RunStatus;
  settings: DecodeSettings;
  startedMs: number;
  wallS: number | null;
  forwards: number | null;
  tokensPerForward: number | null;
  simulatedS: number | null;
  energyJ: number | null;
  steps: number;
  /** Answer tokens up to and including the first stop token (never the padding after it). */
  answerTokens: number | null;
};
/** A profiler lane. */
export type LaneView = { id: string; label: string; kind: "npu" | "cpu" | "dma" };
/** A slice on a lane. */
export type EventView = { lane: string; name: string; startS: number; durS: number; simulated: boolean };
/** A counter track; points are [t_s, value]. */
export type CounterView = { name: string; unit: string; points: [number, number][] };
/** A run's profile. */
export type TimelineView = {
  lanes: LaneView[];
  events: EventView[];
  counters: CounterView[];
  energyJ: number | null;
  peakResidentBytes: number | null;
  simulated: boolean;
};
/** Everything recorded about one run. */
export type RunDetail = {
  summary: RunSummary;
  promptTokens: number;
  canvasLength: number;
  frames: FrameDelta[];
  timeline: TimelineView | null;
};
/** Input of `generate`; `replaceFromMessageId` drives regenerate/edit. */
export type GenerateRequest = {
  conversationId: number | null;
  modelId: number | null;
  prompt: string;
  settings: DecodeSettings;
  backend: BackendChoice;
  replaceFromMessageId: number | null;
  /** Saved as the conversation's system prompt before this turn (blank clears it); null keeps it. */
  systemPrompt: string | null;
};
/** Streamed over the `generate` channel. */
export type GenerateEvent =
  | { kind: "started"; runId: number; conversationId: number; promptTokens: number; canvasLength: number }
  | { kind: "frames"; frames: FrameDelta[] }
  | { kind: "finished"; summary: RunSummary }
  | { kind: "failed"; message: string };
/** Streamed over the `start_download` channel. */
export type DownloadEvent =
  | { kind: "progress"; downloadId: number; file: string; bytes: number; totalBytes: number | null;
      fileBytes: number; fileTotalBytes: number | null }
  | { kind: "paused"; downloadId: number }
  | { kind: "resumed"; downloadId: number }
  | { kind: "finished"; downloadId: number; model: ModelEntry }
  | { kind: "failed"; downloadId: number; message: string }
  | { kind: "cancelled"; downloadId: number };
/** About the running app and this machine. */
export type AppInfo = {
  version: string;
  dataDir: string;
  cpu: string;
  threads: number;
  memoryBytes: number;
  /** Memory available now (Linux MemAvailable); 0 when unknown. */
  availableMemoryBytes: number;
  defaultModelId: number | null;
  devices: string[];
};
/** Error shape of every command. */
export type AppError = { kind: string; message: string };
/** A recorded generation: what the e2e mock replays and unit tests check against. */
export type RecordedRun = { request: GenerateRequest; events: GenerateEvent[]; detail: RunDetail };
