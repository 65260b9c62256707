import { afterEach, describe, expect, it } from "vitest";
import { clearMocks, mockIPC } from "@tauri-apps/api/mocks";
import * as api from "../../src/lib/api";
import type { DownloadEvent, GenerateEvent, GenerateRequest } from "../../src/lib/bindings";
import { loadFixtures } from "../fixtures";

type Internals = { runCallback: (id: number, data: unknown) => void };
const internals = () => (window as unknown as { __TAURI_INTERNALS__: Internals }).__TAURI_INTERNALS__;

afterEach(() => clearMocks());

describe("api wrappers", () => {
  it("call snake_case commands with camelCase argument keys", async () => {
    const calls: [string, unknown][] = [];
    mockIPC((cmd, args) => {
      calls.push([cmd, args]);
      return cmd === "list_runs" ? [] : null;
    });
    await api.listRuns(3, 20);
    await api.stopGeneration(7);
    await api.importModel("/m/x.gguf");
    await api.rerunWithPresets("hi", null, [1, 2]);
    await api.exportPerfetto(4, "/tmp/t.json");
    expect(calls).toEqual([
      ["list_runs", { modelId: 3, limit: 20 }],
      ["stop_generation", { runId: 7 }],
      ["import_model", { path: "/m/x.gguf", name: null }],
      ["rerun_with_presets", { prompt: "hi", modelId: null, presetIds: [1, 2] }],
      ["export_perfetto", { runId: 4, path: "/tmp/t.json" }],
    ]);
  });

  it("turn an AppError rejection into ApiError with its message", async () => {
    mockIPC(() => {
      throw { kind: "notFound", message: "no model at /nope" };
    });
    const err = await api.importModel("/nope").catch((e: unknown) => e);
    expect(err).toBeInstanceOf(api.ApiError);
    expect(err).toMatchObject({ kind: "notFound", message: "no model at /nope" });
    expect(api.toApiError("plain")).toMatchObject({ kind: "internal", message: "plain" });
  });

  it("turn a plain string or Error rejection (not an AppError) into an internal ApiError", async () => {
    mockIPC(() => {
      throw "command list_models not found";
    });
    const err = await api.listModels().catch((e: unknown) => e);
    expect(err).toBeInstanceOf(api.ApiError);
    expect(err).toMatchObject({ kind: "internal", message: "command list_models not found" });
    mockIPC(() => {
      throw new Error("ipc down");
    });
    expect(await api.appInfo().catch((e: unknown) => e)).toMatchObject({ kind: "internal", message: "ipc down" });
  });

  it("generate delivers channel events in send order even when they arrive out of order", async () => {
    const fx = loadFixtures()[0].run;
    let seenRequest: GenerateRequest | null = null;
    mockIPC((cmd, args) => {
      if (cmd !== "generate") return null;
      const a = args as { request: GenerateRequest; onEvent: { id: number } };
      seenRequest = a.request;
      const n = fx.events.length;
      // Deliver pairs swapped (1,0,3,2,...) and the end marker first: Channel must reorder.
      internals().runCallback(a.onEvent.id, { end: true, index: n });
      for (let i = 0; i < n; i += 2) {
        if (i + 1 < n) internals().runCallback(a.onEvent.id, { message: fx.events[i + 1], index: i + 1 });
        internals().runCallback(a.onEvent.id, { message: fx.events[i], index: i });
      }
      return fx.detail.summary;
    });
    const got: GenerateEvent[] = [];
    const summary = await api.generate(fx.request, (e) => got.push(e));
    expect(seenRequest).toEqual(fx.request);
    expect(got).toEqual(fx.events);
    expect(summary).toEqual(fx.detail.summary);
  });

  it("startDownload streams progress over its channel and resolves with the id", async () => {
    mockIPC((cmd, args) => {
      if (cmd !== "start_download") return null;
      const a = args as { baseUrl: string; repo: string; revision: string | null; file: string | null; name: string | null; onEvent: { id: number } };
      expect(a).toMatchObject({ baseUrl: "http://h", repo: "o/r", revision: "v2", file: "m.gguf", name: null });
      const evs: DownloadEvent[] = [
        { kind: "progress", downloadId: 9, file: "model.safetensors", bytes: 10, totalBytes: 20, fileBytes: 10, fileTotalBytes: 20 },
        { kind: "paused", downloadId: 9 },
      ];
      evs.forEach((message, index) => internals().runCallback(a.onEvent.id, { message, index }));
      return 9;
    });
    const got: DownloadEvent[] = [];
    expect(await api.startDownload("http://h", "o/r", "v2", "m.gguf", null, (e) => got.push(e))).toBe(9);
    expect(got.map((e) => e.kind)).toEqual(["progress", "paused"]);
  });
});
