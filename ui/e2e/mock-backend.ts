// An in-memory stand-in for src-tauri, installed with `mockIPC` before the built UI loads.
// It replays recorded generate streams (window.__UNMASK_FIXTURES__) through real Tauri Channels,
// so the UI's Channel ordering, batching and rendering run exactly as in the app.
import { mockIPC, mockWindows } from "@tauri-apps/api/mocks";
import type {
  AppInfo, BackendChoice, Conversation, DecodeSettings, DownloadEvent, GenerateEvent, GenerateRequest, Message,
  ModelEntry, Preset, RunDetail, RunSummary, SettingInfo,
} from "../src/lib/bindings";
import { answerTokenCount, canvasAtStep } from "../src/lib/canvas";
import { splitFrames } from "./split";
import type { AppData, RecordedRun } from "../tests/fixtures";

type Chan = { id: number };
type Internals = { runCallback: (id: number, data: unknown) => void };
type NamedRun = { name: string; run: RecordedRun };
declare global {
  interface Window {
    __UNMASK_FIXTURES__: NamedRun[];
    /** The app's settings schema, embedded model entry and devices (see tests/fixtures.ts). */
    __UNMASK_APP_DATA__: AppData;
    /** Commands the UI invoked, for assertions. */
    __UNMASK_CALLS__: { cmd: string; args: unknown }[];
    /** Delay between streamed events, ms. */
    __UNMASK_STEP_MS__: number;
    /** Event indices of a generate stream after which the stream holds until __UNMASK_RELEASE__(). */
    __UNMASK_HOLD_AT__: number[];
    __UNMASK_RELEASE__: () => void;
    /** Re-chunk recorded streams to one frame per `frames` event (same frames, finer batches). */
    __UNMASK_SPLIT_FRAMES__: boolean;
    /** Progress events a download takes to finish. */
    __UNMASK_DL_TICKS__: number;
    /** Sets what the native file/folder picker returns from now on (null: the user cancels). */
    __UNMASK_PICK__: (path: string | null) => void;
  }
}

const fixtures = window.__UNMASK_FIXTURES__ ?? [];
if (fixtures.length === 0) throw new Error("mock backend: no fixtures injected");
window.__UNMASK_CALLS__ = [];
const stepMs = () => window.__UNMASK_STEP_MS__ ?? 40;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
let releases: (() => void)[] = [];
window.__UNMASK_RELEASE__ = () => {
  const rs = releases;
  releases = [];
  rs.forEach((r) => r());
};
const holdAfter = (i: number) =>
  ((window.__UNMASK_HOLD_AT__ ?? []).includes(i) ? new Promise<void>((r) => releases.push(r)) : Promise.resolve());
const now = () => Date.now();

class Sender {
  private index = 0;
  constructor(private readonly ch: Chan) {}
  send(message: unknown) {
    (window as unknown as { __TAURI_INTERNALS__: Internals }).__TAURI_INTERNALS__.runCallback(this.ch.id,
      { message, index: this.index++ });
  }
  end() {
    (window as unknown as { __TAURI_INTERNALS__: Internals }).__TAURI_INTERNALS__.runCallback(this.ch.id,
      { end: true, index: this.index });
  }
}

function appError(kind: string, message: string) {
  return { kind, message };
}
/** As the app names a new conversation: its first non-empty line, at most 48 characters. */
function titleFrom(prompt: string): string {
  const line = prompt.split("\n").find((l) => l.trim() !== "")?.trim() ?? "New chat";
  const chars = [...line];
  return chars.length > 48 ? chars.slice(0, 48).join("") + "…" : line;
}
const blankToNull = (s: string | null) => (s === null || s.trim() === "" ? null : s.trim());
function conversation(id: unknown) {
  const c = conversations.get(id as number);
  if (!c) throw appError("notFound", `conversation ${id} not found`);
  return c;
}

const isVnpu = (r: RecordedRun) => r.request.backend.kind === "vnpu";
function fixtureFor(backend: BackendChoice, settings: DecodeSettings): RecordedRun {
  const same = fixtures.filter((f) => isVnpu(f.run) === (backend.kind === "vnpu"));
  const pool = same.length ? same : fixtures;
  return (pool.find((f) => f.run.request.settings.speculative === settings.speculative) ?? pool[0]).run;
}

const base = fixtures[0].run.request.settings;
// The settings schema, the embedded model's entry and the devices are the app's own, recorded by
// src-tauri next to the fixtures (tests/fixtures/app-data.json).
const appData = window.__UNMASK_APP_DATA__;
if (!appData) throw new Error("mock backend: no app data injected");
const schema: SettingInfo[] = appData.schema;

let nextId = 100;
const info: AppInfo = { version: "0.1.0-e2e", dataDir: "/home/user/.local/share/dev.unmask.app", cpu: "Mock CPU", threads: 2,
  memoryBytes: 8 * 1024 ** 3, availableMemoryBytes: 5 * 1024 ** 3, defaultModelId: 1, devices: appData.devices };
const models: ModelEntry[] = [{ ...appData.models[0], id: 1, path: "models/tiny-llada", source: "embedded", addedMs: now() - 86_400_000,
  usedMs: null, runCount: 0, fitsMemory: true }];
/** Path that the native file picker "returns" (null: the user cancels). */
let pickedPath: string | null = null;
window.__UNMASK_PICK__ = (p) => { pickedPath = p; };
const specFx = fixtures.find((f) => f.run.request.settings.speculative)?.run ?? fixtures[0].run;
const presets: Preset[] = [
  { id: 1, name: "Reference (CPU)", settings: { ...base, speculative: false, revision: false }, backend: { kind: "cpu", device: null }, builtin: true },
  { id: 2, name: "Speculative + revision (sm8750)", settings: { ...specFx.request.settings, speculative: true, revision: true }, backend: { kind: "vnpu", device: "sm8750" }, builtin: true },
];
const conversations = new Map<number, { c: Conversation; messages: Message[] }>();
const runs = new Map<number, RunDetail>();
const running = new Map<number, { stop: boolean }>();
/** Model each run was made with. */
const runModel = new Map<number, number>();

function recordRun(fx: RecordedRun, id: number, prompt: string, settings: DecodeSettings, status: RunSummary["status"],
  frames: number): RunDetail {
  const kept = fx.detail.frames.slice(0, frames);
  // A stopped replay counts the answer of the frames it got, as the app does for a cancelled run.
  const answerTokens = status === "completed" ? fx.detail.summary.answerTokens
    : answerTokenCount(canvasAtStep(fx.detail.promptTokens, fx.detail.canvasLength, kept, kept.length));
  const summary: RunSummary = { ...fx.detail.summary, id, prompt, settings, status, startedMs: now(),
    steps: status === "completed" ? fx.detail.summary.steps : frames, answerTokens };
  const detail: RunDetail = { ...fx.detail, summary, frames: kept };
  runs.set(id, detail);
  const m = models.find((x) => x.name === summary.modelName) ?? models[0];
  runModel.set(id, m.id);
  m.runCount += 1;
  m.usedMs = now();
  return detail;
}

async function generate(request: GenerateRequest, sender: Sender): Promise<RunSummary> {
  const fx = fixtureFor(request.backend, request.settings);
  const runId = nextId++;
  let conv = request.conversationId !== null ? conversations.get(request.conversationId) : undefined;
  if (!conv) {
    const id = nextId++;
    conv = { c: { id, title: titleFrom(request.prompt), modelId: request.modelId, updatedMs: now(), systemPrompt: null },
      messages: [] };
    conversations.set(id, conv);
  }
  // As the app: a given system prompt is saved with the conversation (blank clears it).
  if (request.systemPrompt != null) conv.c.systemPrompt = blankToNull(request.systemPrompt);
  if (request.replaceFromMessageId !== null) {
    const i = conv.messages.findIndex((m) => m.id === request.replaceFromMessageId);
    if (i >= 0) conv.messages.splice(i);
  }
  conv.messages.push({ id: nextId++, role: "user", content: request.prompt, runId: null, createdMs: now() });
  const flag = { stop: false };
  running.set(runId, flag);
  let framesSent = 0;
  let status: RunSummary["status"] = "completed";
  const events = window.__UNMASK_SPLIT_FRAMES__ ? splitFrames(fx.events) : fx.events;
  for (const [i, ev] of events.entries()) {
    if (flag.stop) {
      status = "cancelled";
      break;
    }
    let out: GenerateEvent = ev;
    if (ev.kind === "started") out = { ...ev, runId, conversationId: conv.c.id };
    if (ev.kind === "finished") break;
    if (ev.kind === "frames") framesSent += ev.frames.length;
    sender.send(out);
    await holdAfter(i);
    await sleep(stepMs());
  }
  const detail = recordRun(fx, runId, request.prompt, request.settings, status, framesSent);
  sender.send({ kind: "finished", summary: detail.summary } satisfies GenerateEvent);
  sender.end();
  running.delete(runId);
  conv.messages.push({ id: nextId++, role: "assistant", content: detail.summary.output, runId, createdMs: now() });
  conv.c.updatedMs = now();
  return detail.summary;
}

type Dl = { id: number; sender: Sender; bytes: number; total: number; paused: boolean; timer: ReturnType<typeof setInterval> | null;
  repo: string; name: string | null; revision: string; file: string | null };
const downloads = new Map<number, Dl>();
function tickDownload(d: Dl) {
  d.bytes = Math.min(d.total, d.bytes + d.total / (window.__UNMASK_DL_TICKS__ ?? 10));
  d.sender.send({ kind: "progress", downloadId: d.id, file: d.file ?? "model.safetensors", bytes: d.bytes, totalBytes: d.total,
    fileBytes: d.bytes, fileTotalBytes: d.total } satisfies DownloadEvent);
  if (d.bytes >= d.total) {
    stopTimer(d);
    const model: ModelEntry = { ...models[0], id: nextId++, name: d.name ?? (d.file?.replace(/\.gguf$/, "") ?? d.repo.split("/").pop() ?? d.repo),
      source: `hf:https://huggingface.co/${d.repo}@${d.revision}`, format: d.file ? "gguf" : "safetensors",
      embedded: false, sizeBytes: d.total, weightsBytes: d.total, path: `models/${d.repo}`, addedMs: now(), runCount: 0 };
    models.push(model);
    d.sender.send({ kind: "finished", downloadId: d.id, model } satisfies DownloadEvent);
    d.sender.end();
    downloads.delete(d.id);
  }
}
function stopTimer(d: Dl) {
  if (d.timer !== null) clearInterval(d.timer);
  d.timer = null;
}
function dl(id: number): Dl {
  const d = downloads.get(id);
  if (!d) throw appError("notFound", `no download ${id}`);
  return d;
}

function perfetto(runId: number): string {
  const d = runs.get(runId);
  if (!d) throw appError("notFound", `no run ${runId}`);
  const lanes = d.timeline?.lanes ?? [];
  const traceEvents = [
    ...lanes.map((l, i) => ({ ph: "M", name: "thread_name", pid: 1, tid: i + 1, args: { name: l.label } })),
    ...(d.timeline?.events ?? []).map((e) => ({ ph: "X", name: e.name, pid: 1, tid: lanes.findIndex((l) => l.id === e.lane) + 1,
      ts: (e.startS ?? 0) * 1e6, dur: (e.durS ?? 0) * 1e6, args: { simulated: e.simulated } })),
  ];
  return JSON.stringify({ traceEvents });
}

async function handle(cmd: string, a: Record<string, unknown>): Promise<unknown> {
  switch (cmd) {
    case "app_info": return info;
    case "list_models": return models.map((m) => ({ ...m }));
    case "import_model": {
      const path = String(a.path);
      if (!path.startsWith("/")) throw appError("invalidInput", `not an absolute path: ${path}`);
      if (path.includes("missing")) throw appError("notFound", `no model at ${path}`);
      const gguf = path.endsWith(".gguf");
      // A MoE model imported here comes with a stored calibration, as after `unmask moe calibrate`.
      const moe = path.includes("MoE");
      const dream = path.includes("Dream");
      // SmolLM2 (and its draft) are autoregressive: what the draft-model picker offers.
      const ar = path.includes("SmolLM2");
      const kinds = ar ? ["autoregressive"] : dream ? ["diffusion", "dream"] : moe ? ["diffusion", "llada", "moe"] : ["diffusion", "llada"];
      const sizeBytes = gguf ? 4_600_000_000 : 16_000_000_000;
      const m: ModelEntry = { id: nextId++, name: (a.name as string | null) ?? path.split("/").filter(Boolean).pop()!.replace(/\.gguf$/, ""),
        architecture: dream ? "dream" : moe ? "llada_moe" : "llada", format: gguf ? "gguf" : "safetensors", quantisation: gguf ? "Q4_K" : "bf16",
        sizeBytes, sha256: "cd".repeat(32), source: path, path, addedMs: now(),
        usedMs: null, embedded: false, fitsMemory: false, runCount: 0, defaultSettings: null,
        moeCalibration: moe ? "240 prompts · 16 layers x 64 experts (top-8) · busiest expert 3.1x its fair share" : null,
        // 8B-class: 32 layers x 2 x (32 kv heads x 128) x 4 bytes = 1 MiB per token; activations of
        // hidden 4096 / FFN 12288 are 256 KiB per token; a logits row is the vocabulary x 20 bytes.
        kinds, weightsBytes: sizeBytes - 20_000_000, kvBytesPerToken: moe ? 262_144 : 1_048_576,
        activationBytesPerToken: moe ? 65_536 : 262_144, logitsBytesPerRow: (dream ? 152_064 : 126_464) * 20, contextTokens: 4096 };
      models.push(m);
      return m;
    }
    case "delete_model": {
      const i = models.findIndex((m) => m.id === a.id);
      if (i < 0) throw appError("notFound", `no model ${a.id}`);
      models.splice(i, 1);
      return null;
    }
    case "model_runs": {
      return [...runs.values()].filter((r) => runModel.get(r.summary.id) === a.id).map((r) => r.summary).reverse();
    }
    case "start_download": {
      const id = nextId++;
      const file = (a.file as string | null) ?? null;
      if (file !== null && !file.endsWith(".gguf")) throw appError("invalid", `\`${file}\`: a single file must be a .gguf`);
      const d: Dl = { id, sender: new Sender(a.onEvent as Chan), bytes: 0, total: 48 * 1024 * 1024, paused: false, timer: null,
        repo: String(a.repo), name: (a.name as string | null) ?? null, revision: (a.revision as string | null) ?? "main", file };
      downloads.set(id, d);
      d.timer = setInterval(() => tickDownload(d), 150);
      return id;
    }
    case "pause_download": { const d = dl(a.id as number); stopTimer(d); d.sender.send({ kind: "paused", downloadId: d.id }); return null; }
    case "resume_download": { const d = dl(a.id as number); d.sender.send({ kind: "resumed", downloadId: d.id }); d.timer = setInterval(() => tickDownload(d), 150); return null; }
    case "cancel_download": { const d = dl(a.id as number); stopTimer(d); d.sender.send({ kind: "cancelled", downloadId: d.id }); d.sender.end(); downloads.delete(d.id); return null; }
    case "settings_schema": return schema;
    case "test_picked_path": return null;
    // @tauri-apps/plugin-dialog's open(): what the user picked in the native dialog.
    case "plugin:dialog|open": return pickedPath;
    case "list_presets": return presets.map((p) => structuredClone(p));
    case "save_preset": {
      const p: Preset = { id: nextId++, name: String(a.name), settings: a.settings as DecodeSettings, backend: a.backend as BackendChoice, builtin: false };
      presets.push(p);
      return p;
    }
    case "delete_preset": {
      const i = presets.findIndex((p) => p.id === a.id);
      if (i < 0 || presets[i].builtin) throw appError("invalidInput", "built-in presets cannot be deleted");
      presets.splice(i, 1);
      return null;
    }
    case "list_conversations": return [...conversations.values()].map((x) => x.c).sort((x, y) => y.updatedMs - x.updatedMs);
    case "get_conversation": {
      const c = conversations.get(a.id as number);
      if (!c) throw appError("notFound", `no conversation ${a.id}`);
      return { conversation: c.c, messages: c.messages.map((m) => ({ ...m })) };
    }
    case "delete_conversation": conversations.delete(a.id as number); return null;
    case "rename_conversation": {
      const title = String(a.title).split(/\s+/).filter(Boolean).join(" ");
      if (title === "") throw appError("invalid", "a conversation title cannot be empty");
      const c = conversation(a.id);
      c.c = { ...c.c, title, updatedMs: now() };
      return { ...c.c };
    }
    case "set_system_prompt": {
      const c = conversation(a.id);
      c.c = { ...c.c, systemPrompt: blankToNull(a.systemPrompt as string | null), updatedMs: now() };
      return { ...c.c };
    }
    case "search_conversations": {
      // The store's rule: title or any message contains the text, ASCII case-insensitive.
      const q = String(a.query).trim().toLowerCase();
      return [...conversations.values()]
        .filter((x) => q === "" || x.c.title.toLowerCase().includes(q) || x.messages.some((m) => m.content.toLowerCase().includes(q)))
        .map((x) => x.c).sort((x, y) => y.updatedMs - x.updatedMs);
    }
    case "generate": return generate(a.request as GenerateRequest, new Sender(a.onEvent as Chan));
    case "stop_generation": { const f = running.get(a.runId as number); if (f) f.stop = true; return null; }
    case "list_runs": return [...runs.values()].map((r) => r.summary).reverse().slice(0, a.limit as number);
    case "get_run": { const r = runs.get(a.id as number); if (!r) throw appError("notFound", `no run ${a.id}`); return r; }
    case "compare_runs": return (a.ids as number[]).map((id) => { const r = runs.get(id); if (!r) throw appError("notFound", `no run ${id}`); return r; });
    case "perfetto_json": return perfetto(a.runId as number);
    case "export_perfetto": return perfetto(a.runId as number).length;
    case "rerun_with_presets": {
      const out: RunSummary[] = [];
      for (const pid of a.presetIds as number[]) {
        const p = presets.find((x) => x.id === pid);
        if (!p) throw appError("notFound", `no preset ${pid}`);
        const fx = fixtureFor(p.backend, p.settings);
        out.push(recordRun(fx, nextId++, String(a.prompt), p.settings, "completed", fx.detail.frames.length).summary);
      }
      return out;
    }
    default:
      throw appError("unknownCommand", `mock backend has no command ${cmd}`);
  }
}

// Seed two finished runs so the profiler and compare screens have data on first open.
for (const f of fixtures) {
  recordRun(f.run, nextId++, f.run.request.prompt, f.run.request.settings, "completed", f.run.detail.frames.length);
}

mockWindows("main");
mockIPC((cmd, args) => {
  window.__UNMASK_CALLS__.push({ cmd, args });
  return handle(cmd, (args ?? {}) as Record<string, unknown>);
});
