// End-to-end: the built UI in headless Chromium, IPC mocked by replaying recorded step streams.
import { describe, expect, it } from "vitest";
import { canvasAtStep, splitAtEnd, type CanvasState } from "../src/lib/canvas";
import type { GenerateEvent } from "../src/lib/bindings";
import { loadFixtures, type RecordedRun } from "../tests/fixtures";
import { shot, tab, useApp } from "./harness";
import { byBackend, tokensIn } from "./screens";
import { splitFrames } from "./split";

const fixtures = loadFixtures();

/** What the token canvas must show after all frames of a recorded stream. */
function expectedFinal(run: RecordedRun): CanvasState {
  const started = run.events.find((e): e is Extract<GenerateEvent, { kind: "started" }> => e.kind === "started");
  if (!started) throw new Error("fixture has no started event");
  const frames = run.events.flatMap((e) => (e.kind === "frames" ? e.frames : []));
  return canvasAtStep(started.promptTokens, started.canvasLength, frames, frames.length);
}
// The canvas shows the answer positions; the end token and the padding after it fold into one marker.
const slotsOf = (c: CanvasState) => splitAtEnd(c).answer.map((s) => [s.state, s.state === "masked" ? "▒" : s.text]);

const app = useApp({ stepMs: 40, dlTicks: 30 });
const freshPage = app.freshPage;

describe("unmask ui (built, headless chromium, mocked IPC)", () => {
  it("chat round-trip: live canvas from masks to the recorded final text, then regenerate, edit and stop", async () => {
    const p = await freshPage();
    const run = byBackend("cpu");
    const final = expectedFinal(run);
    // One frame per event (a fast model can finish within one 60 Hz batch); hold the stream after
    // `started` and after a middle frame, to check the canvas at both points.
    await p.evaluate(() => { window.__UNMASK_SPLIT_FRAMES__ = true; });
    const events = splitFrames(run.events);
    const framesAt = events.flatMap((e, i) => (e.kind === "frames" ? [i] : []));
    const mid = framesAt.length >= 3 ? framesAt[Math.floor(framesAt.length / 2) - 1] : null;
    const startedAt = events.findIndex((e) => e.kind === "started");
    await p.evaluate((at) => { window.__UNMASK_HOLD_AT__ = at; }, mid === null ? [startedAt] : [startedAt, mid]);
    await p.getByTestId("prompt").fill(run.request.prompt);
    await p.getByTestId("send").click();
    await p.getByTestId("stop").waitFor();
    await p.waitForFunction((n) => document.querySelectorAll("[data-testid=live] [data-testid=token-canvas] .tok.masked").length === n, final.slots.length);
    await p.evaluate(() => window.__UNMASK_RELEASE__());
    if (mid !== null) {
      const started = events[startedAt] as Extract<GenerateEvent, { kind: "started" }>;
      const sofar = events.slice(0, mid + 1).flatMap((e) => (e.kind === "frames" ? e.frames : []));
      const partial = canvasAtStep(started.promptTokens, started.canvasLength, sofar, sofar.length);
      await expect.poll(() => tokensIn(p, "[data-testid=live]")).toEqual(slotsOf(partial));
      await shot(p, "live");
      // Switching screens mid-run must not lose the stream (the chat stays mounted).
      await tab(p, "models");
      await p.getByTestId("model-table").waitFor();
      await p.evaluate(() => window.__UNMASK_RELEASE__());
      await tab(p, "chat");
    }
    await p.evaluate(() => { window.__UNMASK_HOLD_AT__ = []; });
    await p.getByTestId("run-stats").waitFor();
    // The pending answer became the stored message: no live canvas left beside it.
    expect(await p.getByTestId("live").count()).toBe(0);
    const assistant = p.getByTestId("msg-assistant");
    await expect.poll(() => assistant.first().textContent()).toContain(run.detail.summary.output);
    expect(await p.getByTestId("msg-user").first().textContent()).toContain(run.request.prompt);
    expect(await p.locator("[data-testid=conversations] li").count()).toBe(1);
    await shot(p, "chat");

    // Step replay of the finished run: step 0 is all masks, the last step is the final canvas.
    await p.getByTestId("show-steps").first().click();
    const replay = p.getByTestId("msg-assistant").first().getByTestId("replay");
    await replay.waitFor();
    const total = run.detail.frames.length;
    expect(await tokensIn(p, "[data-testid=replay]")).toEqual(slotsOf(final));
    await replay.getByTestId("scrubber").fill("0");
    await expect.poll(() => replay.getByTestId("scrub-label").textContent()).toBe(`step 0 / ${total}`);
    expect((await tokensIn(p, "[data-testid=replay]")).every(([s]) => s === "masked")).toBe(true);
    const half = Math.max(1, Math.floor(total / 2));
    await replay.getByTestId("scrubber").fill(String(half));
    await expect.poll(() => replay.getByTestId("scrub-label").textContent()).toBe(`step ${half} / ${total}`);
    const atMid = canvasAtStep(run.detail.promptTokens, run.detail.canvasLength, run.detail.frames, half);
    expect(await tokensIn(p, "[data-testid=replay]")).toEqual(slotsOf(atMid));
    await shot(p, "replay");
    await replay.getByTestId("scrubber").fill(String(total));
    await expect.poll(() => tokensIn(p, "[data-testid=replay]")).toEqual(slotsOf(final));

    // Regenerate replaces the answer (same prompt), edit replaces prompt and answer.
    await p.getByTestId("regenerate").first().click();
    await expect.poll(() => p.evaluate(() => window.__UNMASK_CALLS__.filter((c) => c.cmd === "generate").length)).toBe(2);
    await expect.poll(() => p.getByTestId("msg-assistant").count()).toBe(1);
    await p.getByTestId("edit").first().click();
    await p.getByTestId("edit-text").fill("What is 2+2?");
    await p.getByTestId("edit-save").click();
    await expect.poll(() => p.getByTestId("msg-user").first().textContent()).toContain("What is 2+2?");
    await expect.poll(() => p.getByTestId("msg-assistant").count()).toBe(1);
    const gens = await p.evaluate(() => window.__UNMASK_CALLS__.filter((c) => c.cmd === "generate")
      .map((c) => (c.args as { request: { replaceFromMessageId: number | null; prompt: string } }).request));
    expect(gens.map((g) => g.prompt)).toEqual([run.request.prompt, run.request.prompt, "What is 2+2?"]);
    expect(gens[0].replaceFromMessageId).toBeNull();
    expect(gens[1].replaceFromMessageId).not.toBeNull();

    // Stop while held: the run ends cancelled.
    await p.evaluate((at) => { window.__UNMASK_HOLD_AT__ = [at]; }, startedAt);
    await p.getByTestId("prompt").fill("Stop me");
    await p.getByTestId("send").click();
    await p.getByTestId("stop").click();
    await expect.poll(() => p.evaluate(() => window.__UNMASK_CALLS__.some((c) => c.cmd === "stop_generation"))).toBe(true);
    await p.evaluate(() => { window.__UNMASK_HOLD_AT__ = []; window.__UNMASK_RELEASE__(); });
    await expect.poll(() => p.getByTestId("run-stats").last().textContent()).toContain("cancelled");

    // Copy gives feedback; deleting the conversation empties the list and the view.
    await p.getByTestId("msg-assistant").first().getByTestId("copy").click();
    await expect.poll(() => p.getByTestId("msg-assistant").first().getByTestId("copy").textContent()).toBe("Copied");
    await p.getByTestId("conversation-actions").click();
    await p.getByTestId("delete-conversation").click();
    await p.getByTestId("confirm-delete-conversation").click();
    await expect.poll(() => p.locator("[data-testid=conversations] li button.link").count()).toBe(0);
    expect(await p.getByTestId("msg-user").count()).toBe(0);
    expect(app.errors()).toEqual([]);
  });

  it("live view on the virtual NPU reaches the recorded final canvas with speculative/revised marks", async () => {
    const p = await freshPage();
    const run = byBackend("vnpu");
    const final = expectedFinal(run);
    await p.getByTestId("backend-picker").selectOption("vnpu");
    await p.getByTestId("device-picker").selectOption(run.request.backend.device ?? "sm8750");
    if (run.request.settings.speculative) await p.getByTestId("preset-picker").selectOption({ label: "Speculative + revision (sm8750)" });
    await p.getByTestId("prompt").fill(run.request.prompt);
    await p.getByTestId("send").click();
    await p.getByTestId("run-stats").waitFor();
    await p.getByTestId("show-steps").click();
    await p.getByTestId("replay").waitFor();
    expect(await tokensIn(p, "[data-testid=replay]")).toEqual(slotsOf(final));
    const answer = splitAtEnd(final).answer;
    expect(await p.locator("[data-testid=replay] [data-testid=token-canvas] .tok.rev").count()).toBe(answer.filter((s) => s.revised).length);
    expect(await p.locator("[data-testid=replay] [data-testid=token-canvas] .tok.spec").count()).toBe(answer.filter((s) => s.speculative).length);
    if (run.detail.summary.simulatedS !== null) expect(await p.getByTestId("run-stats").textContent()).toContain("simulated");
    const req = await p.evaluate(() => (window.__UNMASK_CALLS__.find((c) => c.cmd === "generate")?.args as { request: unknown }).request);
    expect(req).toMatchObject({ backend: { kind: "vnpu", device: run.request.backend.device ?? "sm8750" } });
    await shot(p, "live-vnpu");
    // Phone-sized window: one column, the canvas still fully shown.
    await p.setViewportSize({ width: 390, height: 844 });
    expect(await tokensIn(p, "[data-testid=replay]")).toEqual(slotsOf(final));
    const overflow = await p.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
    expect(overflow).toBeLessThanOrEqual(0);
    await shot(p, "mobile");
    await p.setViewportSize({ width: 1280, height: 800 });
    expect(app.errors()).toEqual([]);
  });

  it("profiler renders NPU/CPU/DMA lanes, zooms, and exports Perfetto JSON", async () => {
    const p = await freshPage();
    const run = byBackend("vnpu");
    const tl = run.detail.timeline;
    if (!tl) throw new Error("vnpu fixture has no timeline");
    await tab(p, "profiler");
    await p.getByTestId("run-picker").waitFor();
    const label = await p.locator("[data-testid=run-picker] option", { hasText: run.detail.summary.backend }).first().getAttribute("value");
    await p.getByTestId("run-picker").selectOption(label ?? "");
    // Lanes the run has (a simulated run also shows empty NPU/CPU/DMA lanes, marked data-empty).
    await expect.poll(() => p.locator("[data-testid=lane]:not([data-empty])").count()).toBe(tl.lanes.length);
    const kinds = await p.$$eval("[data-testid=lane]:not([data-empty])", (els) => els.map((e) => e.getAttribute("data-lane-kind")));
    expect(kinds).toEqual(tl.lanes.map((l) => l.kind));
    expect(await p.getByTestId("slice").count()).toBe(tl.events.filter((e) => tl.lanes.some((l) => l.id === e.lane)).length);
    expect(await p.getByTestId("time-kind").textContent()).toContain(tl.simulated ? "simulated" : "measured");
    expect(await p.getByTestId("counter").count()).toBe(tl.counters.length);
    expect(await p.locator("[data-testid=step-table] tbody tr").count()).toBe(run.detail.frames.length);
    await shot(p, "profiler");

    const before = await p.getByTestId("view-range").textContent();
    await p.getByTestId("zoom-in").click();
    await p.getByTestId("zoom-in").click();
    await expect.poll(() => p.getByTestId("view-range").textContent()).not.toBe(before);
    expect(await p.getByTestId("slice").count()).toBeLessThanOrEqual(tl.events.length);
    await p.getByTestId("zoom-reset").click();
    await expect.poll(() => p.getByTestId("view-range").textContent()).toBe(before);
    // Wheel zooms around the pointer; dragging the zoomed view pans it.
    const box = await p.locator("[data-testid=timeline] svg").boundingBox();
    if (!box) throw new Error("timeline has no box");
    await p.mouse.move(box.x + box.width * 0.6, box.y + box.height / 2);
    await p.mouse.wheel(0, -400);
    await expect.poll(() => p.getByTestId("view-range").textContent()).not.toBe(before);
    const zoomed = await p.getByTestId("view-range").textContent();
    await p.mouse.down();
    await p.mouse.move(box.x + box.width * 0.3, box.y + box.height / 2, { steps: 5 });
    await p.mouse.up();
    await expect.poll(() => p.getByTestId("view-range").textContent()).not.toBe(zoomed);
    await p.getByTestId("zoom-reset").click();

    const [download] = await Promise.all([p.waitForEvent("download"), p.getByTestId("export-perfetto").click()]);
    expect(download.suggestedFilename()).toMatch(/^unmask-run-\d+\.perfetto\.json$/);
    const file = await download.path();
    const { readFileSync } = await import("node:fs");
    const trace = JSON.parse(readFileSync(file, "utf8")) as { traceEvents: unknown[] };
    expect(trace.traceEvents.length).toBeGreaterThan(0);
    await p.getByTestId("export-path").fill("/tmp/trace.json");
    await p.getByTestId("export-to-path").click();
    await expect.poll(() => p.getByTestId("exported").textContent()).toContain("/tmp/trace.json");
    const exp = await p.evaluate(() => window.__UNMASK_CALLS__.find((c) => c.cmd === "export_perfetto")?.args);
    expect(exp).toMatchObject({ path: "/tmp/trace.json" });
    expect(app.errors()).toEqual([]);
  });

  it("model manager: import, failing import, download with pause/resume, delete with confirm, runs", async () => {
    const p = await freshPage();
    await tab(p, "models");
    const rows = p.getByTestId("model-row");
    await expect.poll(() => rows.count()).toBe(1);
    // The typed path is the advanced fallback beside the file picker.
    await p.locator("[data-testid=import-advanced] summary").click();
    await p.getByTestId("import-path").fill("/data/models/LLaDA-8B-Instruct-Q4_K.gguf");
    await p.getByTestId("import").click();
    await expect.poll(() => rows.count()).toBe(2);
    expect(await p.getByTestId("import-note").textContent()).toContain("LLaDA-8B-Instruct-Q4_K");
    expect(await rows.nth(1).textContent()).toContain("gguf");
    expect(await rows.nth(1).textContent()).toContain("Q4_K");
    await p.getByTestId("import-path").fill("/data/missing-model");
    await p.getByTestId("import").click();
    await expect.poll(() => p.getByRole("alert").textContent()).toContain("no model at /data/missing-model");

    await p.getByTestId("dl-repo").fill("GSAI-ML/LLaDA-8B-Instruct");
    await p.getByTestId("download").click();
    const dl = p.getByTestId("download-row");
    // Pause once some bytes have arrived, so resume has something to continue from.
    await expect.poll(() => dl.first().locator("progress").getAttribute("value")).not.toBeNull();
    await p.getByTestId("dl-pause").click();
    await expect.poll(() => dl.first().getAttribute("data-status")).toBe("paused");
    await shot(p, "models");
    await p.getByTestId("dl-resume").click();
    await expect.poll(() => dl.first().getAttribute("data-status"), { timeout: 60_000 }).toBe("finished");
    await expect.poll(() => rows.count()).toBe(3);
    await p.getByTestId("dl-repo").fill("Dream-org/Dream-v0-Instruct-7B");
    await p.getByTestId("download").click();
    await dl.nth(1).getByTestId("dl-cancel").click();
    await expect.poll(() => dl.nth(1).getAttribute("data-status")).toBe("cancelled");
    expect(await rows.count()).toBe(3);

    await rows.nth(1).getByTestId("delete-model").click();
    await rows.nth(1).getByTestId("confirm-delete").click();
    await expect.poll(() => rows.count()).toBe(2);
    expect(await rows.first().getByTestId("delete-model").isDisabled()).toBe(true);
    await rows.first().getByTestId("model-runs").click();
    await expect.poll(() => p.locator("[data-testid=model-run-table] tbody tr").count()).toBe(fixtures.length);
  });

  it("model manager: a MoE model shows its stored calibration", async () => {
    const p = await freshPage();
    await tab(p, "models");
    const rows = p.getByTestId("model-row");
    await expect.poll(() => rows.count()).toBe(1);
    expect(await rows.first().getByTestId("moe-calibration").count()).toBe(0);
    await p.locator("[data-testid=import-advanced] summary").click();
    await p.getByTestId("import-path").fill("/data/models/LLaDA-MoE-7B-A1B-Instruct-Q4_K.gguf");
    await p.getByTestId("import").click();
    await expect.poll(() => rows.count()).toBe(2);
    await expect.poll(() => rows.nth(1).getByTestId("moe-calibration").textContent()).toContain("240 prompts");
  });

  it("compare: two recorded runs side by side, then re-run a prompt with two presets", async () => {
    const p = await freshPage();
    await tab(p, "compare");
    const checks = p.getByTestId("run-check");
    await expect.poll(() => checks.count()).toBe(fixtures.length);
    await checks.nth(0).check();
    await checks.nth(1).check();
    await p.getByTestId("compare").click();
    const cols = p.getByTestId("compare-col");
    await expect.poll(() => cols.count()).toBe(2);
    const outputs = await p.getByTestId("compare-output").allTextContents();
    expect(outputs.sort()).toEqual(fixtures.slice(0, 2).map((f) => f.run.detail.summary.output).sort());
    expect(await p.locator("[data-testid=compare-timelines] [data-testid=timeline]").count())
      .toBe(fixtures.slice(0, 2).filter((f) => f.run.detail.timeline).length);
    await shot(p, "compare");

    await p.getByTestId("preset-check").nth(0).check();
    await p.getByTestId("preset-check").nth(1).check();
    await p.getByTestId("rerun").click();
    await expect.poll(() => p.evaluate(() => window.__UNMASK_CALLS__.some((c) => c.cmd === "rerun_with_presets"))).toBe(true);
    await expect.poll(() => checks.count()).toBe(fixtures.length + 2);
    await expect.poll(() => cols.count()).toBe(2);
    const heads = await p.locator("[data-testid=compare-col] h4").allTextContents();
    expect(heads.some((h) => h.includes("vnpu"))).toBe(true);
    expect(app.errors()).toEqual([]);
  });

  it("settings: every schema entry has a field with its explanation; save and delete a preset", async () => {
    const p = await freshPage();
    await tab(p, "settings");
    const settings = p.getByTestId("setting");
    // The embedded LLaDA model: the Dream-only and MoE-only settings are not shown.
    await expect.poll(() => settings.count()).toBe(11);
    const explanations = await p.$$eval("[data-testid=setting] p.help", (els) => els.map((e) => e.textContent ?? ""));
    expect(explanations).toHaveLength(11);
    expect(explanations.every((t) => /\w{3,}.*Default /.test(t))).toBe(true);
    // 32 tokens in blocks of 4: 16 steps = two per block, two tokens each.
    await p.locator("#set-steps").fill("16");
    await p.locator("#set-steps").dispatchEvent("change");
    await p.getByTestId("preset-name").fill("fast 16 steps");
    await p.getByTestId("save-preset").click();
    await expect.poll(() => p.getByTestId("preset-list").textContent()).toContain("fast 16 steps");
    const saved = await p.evaluate(() => window.__UNMASK_CALLS__.find((c) => c.cmd === "save_preset")?.args);
    expect(saved).toMatchObject({ name: "fast 16 steps", settings: { steps: 16 } });
    await shot(p, "settings");
    await p.getByTestId("delete-preset").click();
    await expect.poll(() => p.getByTestId("preset-list").textContent()).not.toContain("fast 4 steps");
    expect(app.errors()).toEqual([]);
  });

  it("settings start from the model's own defaults; a run sends only what the user changed", async () => {
    const p = await freshPage();
    const shipped = (await p.evaluate(() => window.__UNMASK_APP_DATA__?.models[0].defaultSettings)) as Record<string, unknown> | null;
    expect(shipped).not.toBeNull();
    await tab(p, "settings");
    expect(await p.locator("[data-testid=settings-form] [data-testid=preset-picker] option:checked").textContent()).toBe("Model defaults");
    expect(await p.locator("#set-genLength").inputValue()).toBe(String(shipped!.genLength));
    expect(await p.getByTestId("settings-base").textContent()).toContain("own defaults");
    const lastRequest = () => p.evaluate(() =>
      (window.__UNMASK_CALLS__.filter((c) => c.cmd === "generate").at(-1)?.args as { request: Record<string, unknown> }).request);
    const generated = () => p.evaluate(() => window.__UNMASK_CALLS__.filter((c) => c.cmd === "generate").length);
    const send = async (prompt: string) => {
      const before = await generated();
      await tab(p, "chat");
      await p.getByTestId("prompt").fill(prompt);
      await p.getByTestId("send").click();
      await expect.poll(generated).toBe(before + 1);
      await expect.poll(() => p.getByTestId("stop").count()).toBe(0);
    };
    // Nothing changed: no choices sent, the model's generation_config.json decides.
    await send("first");
    expect(await lastRequest()).toMatchObject({ overridden: [], settings: { genLength: shipped!.genLength } });
    // One field changed: only that one is a choice, and it is marked.
    await tab(p, "settings");
    await p.locator("#set-seed").fill("7");
    await expect.poll(() => p.locator("[data-testid=setting][data-key=seed]").getAttribute("data-changed")).toBe("true");
    expect(await p.locator("[data-testid=setting][data-changed=true]").count()).toBe(1);
    await send("second");
    expect(await lastRequest()).toMatchObject({ overridden: ["seed"], settings: { seed: 7 } });
    // A preset is applied as it is: every setting is a choice.
    await p.getByTestId("preset-picker").selectOption({ label: "Reference (CPU)" });
    await send("third");
    expect((await lastRequest()).overridden).toBeNull();
    // Back to the model's defaults.
    await tab(p, "settings");
    await p.getByTestId("reset-settings").click();
    expect(await p.locator("[data-testid=settings-form] [data-testid=preset-picker] option:checked").textContent()).toBe("Model defaults");
    expect(await p.locator("#set-seed").inputValue()).toBe(String(shipped!.seed));
    expect(app.errors()).toEqual([]);
  });

  it("an autoregressive model can take a draft model; a dLLM cannot, and the choice is not sent for it", async () => {
    const p = await freshPage();
    await tab(p, "models");
    const rows = p.getByTestId("model-row");
    await expect.poll(() => rows.count()).toBe(1);
    for (const path of ["/data/models/SmolLM2-135M-Instruct", "/data/models/SmolLM2-draft"]) {
      await p.evaluate((x) => window.__UNMASK_PICK__(x), path);
      await p.getByTestId("pick-folder").click();
    }
    await expect.poll(() => rows.count()).toBe(3);
    await tab(p, "chat");
    const draftPicker = p.getByTestId("draft-picker");
    // The embedded dLLM is selected: nothing to draft for it.
    expect(await draftPicker.count()).toBe(0);
    const ids = await p.getByTestId("model-picker").locator("option").evaluateAll((os) => os.map((o) => [o.textContent ?? "", (o as HTMLOptionElement).value]));
    const idOf = (name: string) => ids.find(([t]) => t.startsWith(name))?.[1] ?? "";
    await p.getByTestId("model-picker").selectOption(idOf("SmolLM2-135M-Instruct"));
    await expect.poll(() => draftPicker.count()).toBe(1);
    const offered = await draftPicker.locator("option").allTextContents();
    expect(offered.length).toBe(2);
    expect(offered[0]).toBe("None");
    expect(offered[1]).toMatch(/^SmolLM2-draft/);
    await draftPicker.selectOption(idOf("SmolLM2-draft"));
    const lastRequest = () => p.evaluate(() =>
      (window.__UNMASK_CALLS__.filter((c) => c.cmd === "generate").at(-1)?.args as { request: Record<string, unknown> }).request);
    const generated = () => p.evaluate(() => window.__UNMASK_CALLS__.filter((c) => c.cmd === "generate").length);
    const send = async (prompt: string) => {
      const before = await generated();
      await p.getByTestId("prompt").fill(prompt);
      await p.getByTestId("send").click();
      await expect.poll(generated).toBe(before + 1);
      await expect.poll(() => p.getByTestId("stop").count()).toBe(0);
    };
    await send("with a draft");
    expect(await lastRequest()).toMatchObject({ modelId: Number(idOf("SmolLM2-135M-Instruct")), draftModelId: Number(idOf("SmolLM2-draft")) });
    await shot(p, "chat-draft-picker");
    // Back to the dLLM: no draft picker, and none sent.
    await p.getByTestId("model-picker").selectOption(idOf("tiny-llada"));
    await expect.poll(() => draftPicker.count()).toBe(0);
    await send("without");
    expect((await lastRequest()).draftModelId).toBeNull();
    expect(app.errors()).toEqual([]);
  });
});
