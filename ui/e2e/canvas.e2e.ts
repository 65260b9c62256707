// End-to-end: the answer canvas and answer messages, with the recorded fixtures replayed by the
// mock backend: padding folded into one end marker, answer-only counts and rates, one answer per
// message tied to its conversation, tokens reachable by keyboard and tap, readable at every confidence.
import { describe, expect, it } from "vitest";
import type { Page } from "playwright-core";
import { answerTokenCount, canvasAtStep, splitAtEnd, type CanvasState } from "../src/lib/canvas";
import type { GenerateEvent } from "../src/lib/bindings";
import { formatRate } from "../src/lib/format";
import { loadFixtures, type RecordedRun } from "../tests/fixtures";
import { shot, tab, useApp } from "./harness";
import { byBackend, tokensIn } from "./screens";
import { splitFrames } from "./split";

const fixtures = loadFixtures();

function finalCanvas(run: RecordedRun): CanvasState {
  return canvasAtStep(run.detail.promptTokens, run.detail.canvasLength, run.detail.frames, run.detail.frames.length);
}
const answerSlots = (c: CanvasState) => splitAtEnd(c).answer.map((s) => [s.state, s.state === "masked" ? "▒" : s.text]);

const app = useApp({ stepMs: 30, dlTicks: 30 });
const freshPage = app.freshPage;

/** Sends a prompt and waits until its answer is a stored message with stats. */
async function ask(p: Page, text: string): Promise<void> {
  const before = await p.getByTestId("run-stats").count();
  await p.getByTestId("prompt").fill(text);
  await p.getByTestId("send").click();
  await expect.poll(() => p.getByTestId("run-stats").count(), { timeout: 30_000 }).toBe(before + 1);
}

/** Contrast ratio of every token's text against what is painted behind it, and its opacity. */
function tokenContrast(p: Page, scope: string): Promise<{ text: string; ratio: number; opacity: number }[]> {
  return p.$$eval(`${scope} [data-testid=token-canvas] .tok`, (els) => {
    type Rgba = [number, number, number, number];
    const probe = document.createElement("canvas").getContext("2d");
    // Any CSS colour (rgb(), color(srgb ...), color-mix results) to RGBA through a 1x1 canvas.
    const parse = (c: string): Rgba => {
      if (!probe) return [0, 0, 0, 0];
      probe.clearRect(0, 0, 1, 1);
      probe.fillStyle = "rgba(0, 0, 0, 0)";
      probe.fillStyle = c;
      probe.fillRect(0, 0, 1, 1);
      const d = probe.getImageData(0, 0, 1, 1).data;
      return [d[0], d[1], d[2], d[3] / 255];
    };
    const over = (top: Rgba, under: Rgba): Rgba => {
      const a = top[3] + under[3] * (1 - top[3]);
      if (a === 0) return [0, 0, 0, 0];
      const mix = (i: number) => (top[i] * top[3] + under[i] * under[3] * (1 - top[3])) / a;
      return [mix(0), mix(1), mix(2), a];
    };
    const background = (el: Element | null): Rgba => {
      const layers: Rgba[] = [];
      for (let e = el; e; e = e.parentElement) layers.push(parse(getComputedStyle(e).backgroundColor));
      layers.push([255, 255, 255, 1]);
      return layers.reduceRight((under, top) => over(top, under));
    };
    const lum = ([r, g, b]: Rgba) => {
      const f = (v: number) => { const s = v / 255; return s <= 0.03928 ? s / 12.92 : ((s + 0.055) / 1.055) ** 2.4; };
      return 0.2126 * f(r) + 0.7152 * f(g) + 0.0722 * f(b);
    };
    return els.map((e) => {
      const bg = background(e);
      const fg = over(parse(getComputedStyle(e).color), bg);
      const [hi, lo] = [lum(fg), lum(bg)].sort((x, y) => y - x);
      let opacity = 1;
      for (let x: Element | null = e; x; x = x.parentElement) opacity *= Number(getComputedStyle(x).opacity);
      return { text: e.textContent ?? "", ratio: (hi + 0.05) / (lo + 0.05), opacity };
    });
  });
}

describe("answer canvas and messages (built, headless chromium, recorded fixtures)", () => {
  it("shows the answer tokens and one end marker instead of the padding, live, in the message and in compare", async () => {
    const p = await freshPage();
    const run = byBackend("cpu");
    const final = finalCanvas(run);
    const { answer, tail } = splitAtEnd(final);
    // The recording is an answer followed by padding: the case the canvas must fold.
    expect(tail.length).toBeGreaterThan(1);
    expect(answer.length).toBeLessThan(final.slots.length);

    // Live: hold the stream at its last frame, before `finished`.
    const events = run.events;
    const lastFrames = events.map((e) => e.kind).lastIndexOf("frames");
    await p.evaluate((at) => { window.__UNMASK_HOLD_AT__ = [at]; }, lastFrames);
    await p.getByTestId("prompt").fill(run.request.prompt);
    await p.getByTestId("send").click();
    await expect.poll(() => tokensIn(p, "[data-testid=live]")).toEqual(answerSlots(final));
    const live = p.getByTestId("live");
    expect(await live.getByTestId("end-marker").count()).toBe(1);
    expect(await live.getByTestId("end-marker").getAttribute("data-padding")).toBe(String(tail.length - 1));
    expect(await live.getByTestId("end-marker").textContent()).toContain(`${tail.length - 1} padding`);
    // Counts are the answer's: the legend's committed states add up to the answer, not the canvas.
    const legend = await live.getByTestId("legend").textContent();
    expect(legend).toContain(`stable (${answer.filter((s) => s.state === "stable").length})`);
    const tokens = answerTokenCount(final);
    expect(tokens).toBe(run.detail.summary.answerTokens);
    expect(await p.getByTestId("live-stats").textContent()).toContain(`${tokens} answer tokens`);
    expect(await p.getByTestId("live-stats").textContent()).toMatch(/first token .+ measured/);
    await shot(p, "canvas-live");
    // The marker unfolds the padding positions and folds them again.
    await live.getByTestId("end-marker").click();
    expect(await live.locator("[data-testid=token-canvas] .tok").count()).toBe(final.slots.length);
    expect(await live.getByTestId("end-marker").getAttribute("aria-expanded")).toBe("true");
    await live.getByTestId("end-marker").click();
    expect(await live.locator("[data-testid=token-canvas] .tok").count()).toBe(answer.length);
    await p.evaluate(() => { window.__UNMASK_HOLD_AT__ = []; window.__UNMASK_RELEASE__(); });

    // Finished: one answer (the message), no separate "last run" box; its canvas folds out of it.
    await p.getByTestId("run-stats").waitFor();
    expect(await p.getByTestId("live").count()).toBe(0);
    expect(await p.getByTestId("msg-assistant").count()).toBe(1);
    expect(await p.getByText("Last run").count()).toBe(0);
    expect(await p.getByTestId("replay").count()).toBe(0);
    const msg = p.getByTestId("msg-assistant").first();
    expect(await msg.getByTestId("token-canvas").count()).toBe(0);
    await msg.getByTestId("show-steps").click();
    expect(await tokensIn(p, "[data-testid=msg-assistant]")).toEqual(answerSlots(final));
    expect(await msg.getByTestId("end-marker").count()).toBe(1);

    // Compare shares the canvas: the same fold there.
    await tab(p, "compare");
    const checks = p.getByTestId("run-check");
    await expect.poll(() => checks.count()).toBeGreaterThanOrEqual(2);
    await checks.nth(0).check();
    await checks.nth(1).check();
    await p.getByTestId("compare").click();
    await expect.poll(() => p.getByTestId("compare-col").count()).toBe(2);
    const markers = await p.locator("[data-testid=compare-col] [data-testid=end-marker]").count();
    expect(markers).toBe(2);
    for (const col of await p.getByTestId("compare-col").all()) {
      const padding = Number(await col.getByTestId("end-marker").getAttribute("data-padding"));
      const shown = await col.locator("[data-testid=token-canvas] .tok").count();
      expect(shown + padding + 1).toBe(final.slots.length);
    }
    expect(app.errors()).toEqual([]);
  });

  it("rates count answer tokens only, measured and simulated, each labelled, with time to first token", async () => {
    const p = await freshPage();
    for (const kind of ["cpu", "vnpu"] as const) {
      const run = byBackend(kind);
      if (kind === "vnpu") {
        await p.getByTestId("backend-picker").selectOption("vnpu");
        await p.getByTestId("device-picker").selectOption(run.request.backend.device ?? "sm8750");
        if (run.request.settings.speculative) await p.getByTestId("preset-picker").selectOption({ label: "Speculative + revision (sm8750)" });
      }
      await ask(p, run.request.prompt);
      const s = run.detail.summary;
      const stats = p.getByTestId("run-stats").last();
      expect(s.answerTokens).not.toBeNull();
      expect(await stats.getByTestId("answer-tokens").textContent()).toBe(`${s.answerTokens} answer tokens`);
      // tokens/s = answer tokens / time: the padding positions are not counted.
      expect(await stats.getByTestId("tps").textContent()).toBe(`${formatRate(s.answerTokens, s.wallS)} measured`);
      expect(formatRate(s.answerTokens, s.wallS)).not.toBe(formatRate(run.detail.canvasLength - run.detail.promptTokens, s.wallS));
      expect(await stats.getByTestId("ttft").textContent()).toMatch(/^first token .+ measured$/);
      if (s.simulatedS !== null) {
        expect(await stats.getByTestId("tps-sim").textContent()).toBe(`${formatRate(s.answerTokens, s.simulatedS)} simulated`);
        expect(await stats.getByTestId("ttft-sim").textContent()).toMatch(/^first token .+ simulated$/);
      } else {
        expect(await stats.getByTestId("tps-sim").count()).toBe(0);
      }
    }
    expect(app.errors()).toEqual([]);
  });

  it("a conversation switch never shows another conversation's live run, nor jumps back when it ends", async () => {
    const p = await freshPage();
    const run = byBackend("cpu");
    await ask(p, "First conversation");
    await p.getByTestId("new-chat").click();

    // Second conversation: hold its stream after a middle frame.
    await p.evaluate(() => { window.__UNMASK_SPLIT_FRAMES__ = true; });
    const events: GenerateEvent[] = splitFrames(run.events);
    const framesAt = events.flatMap((e, i) => (e.kind === "frames" ? [i] : []));
    await p.evaluate((at) => { window.__UNMASK_HOLD_AT__ = [at]; }, framesAt[Math.floor(framesAt.length / 2)]);
    await p.getByTestId("prompt").fill("Second conversation");
    await p.getByTestId("send").click();
    await p.getByTestId("live").waitFor();
    await expect.poll(() => p.locator("[data-testid=conversations] li button.link").count()).toBe(2);

    // Open the first one while the second runs: its own messages, no live canvas, no Stop.
    await p.locator("[data-testid=conversations] li button.link", { hasText: "First conversation" }).click();
    await expect.poll(() => p.getByTestId("msg-user").first().textContent()).toContain("First conversation");
    expect(await p.getByTestId("live").count()).toBe(0);
    expect(await p.getByTestId("stop").count()).toBe(0);
    expect(await p.getByTestId("msg-pending").count()).toBe(0);
    expect(await p.getByTestId("messages").textContent()).not.toContain("Second conversation");
    await shot(p, "canvas-other-conversation");

    // The run ends while the first conversation is open: the view stays there.
    await p.evaluate(() => { window.__UNMASK_HOLD_AT__ = []; window.__UNMASK_RELEASE__(); });
    await expect.poll(() => p.evaluate(() => window.__UNMASK_CALLS__.filter((c) => c.cmd === "list_models").length))
      .toBeGreaterThan(2);
    expect(await p.getByTestId("messages").textContent()).not.toContain("Second conversation");
    expect(await p.getByTestId("msg-assistant").count()).toBe(1);

    // The second conversation has its finished answer as a message.
    await p.locator("[data-testid=conversations] li button.link", { hasText: "Second conversation" }).click();
    await expect.poll(() => p.getByTestId("msg-user").first().textContent()).toContain("Second conversation");
    await expect.poll(() => p.getByTestId("run-stats").count()).toBe(1);
    expect(await p.getByTestId("live").count()).toBe(0);
    expect(app.errors()).toEqual([]);
  });

  it("tokens are focusable, arrow keys move, a tap shows the token's confidence; the answer is announced", async () => {
    const p = await freshPage();
    const run = byBackend("vnpu");
    const final = finalCanvas(run);
    const { answer } = splitAtEnd(final);
    await p.setViewportSize({ width: 390, height: 844 });
    await p.getByTestId("backend-picker").selectOption("vnpu");
    await ask(p, run.request.prompt);
    // The screen reader hears the committed answer once it is done (not each token span).
    expect(await p.getByTestId("live-announce").getAttribute("aria-live")).toBe("polite");
    await expect.poll(() => p.getByTestId("live-announce").textContent()).toContain("Answer:");
    await p.getByTestId("show-steps").click();
    const toks = p.locator("[data-testid=replay] [data-testid=token-canvas] .tok");
    await expect.poll(() => toks.count()).toBe(answer.length);
    // Roving tabindex: one tab stop in the canvas.
    const tabbable = await p.$$eval("[data-testid=replay] [data-testid=token-canvas] .tok",
      (els) => els.filter((e) => (e as HTMLElement).tabIndex === 0).length);
    expect(tabbable).toBe(1);

    // Tap (a real touch sequence) on the second token: its detail line names text, state and confidence.
    const second = toks.nth(1);
    await second.scrollIntoViewIfNeeded();
    const box = await second.boundingBox();
    if (!box) throw new Error("token has no box");
    const cdp = await p.context().newCDPSession(p);
    await cdp.send("Emulation.setTouchEmulationEnabled", { enabled: true, maxTouchPoints: 1 });
    const at = { x: box.x + box.width / 2, y: box.y + box.height / 2 };
    await cdp.send("Input.dispatchTouchEvent", { type: "touchStart", touchPoints: [at] });
    await cdp.send("Input.dispatchTouchEvent", { type: "touchEnd", touchPoints: [] });
    const slot = answer[1];
    const detail = p.getByTestId("replay").getByTestId("token-detail");
    await expect.poll(() => detail.textContent()).toContain(`confidence ${Math.round((slot.confidence ?? 0) * 100)}%`);
    expect(await detail.textContent()).toContain(JSON.stringify(slot.text));
    expect(await second.getAttribute("aria-selected")).toBe("true");
    await shot(p, "canvas-token-detail-phone");
    await cdp.send("Emulation.setTouchEmulationEnabled", { enabled: false });

    // Keyboard: focus the first token, ArrowRight moves focus and the detail with it.
    await toks.first().focus();
    await expect.poll(() => detail.textContent()).toContain(JSON.stringify(answer[0].text));
    await p.keyboard.press("ArrowRight");
    expect(await p.evaluate(() => (document.activeElement as HTMLElement | null)?.dataset.pos)).toBe(String(answer[1].pos));
    await p.keyboard.press("End");
    expect(await p.evaluate(() => (document.activeElement as HTMLElement | null)?.dataset.pos)).toBe(String(answer[answer.length - 1].pos));
    // Each token's accessible name carries its confidence.
    expect(await toks.first().getAttribute("aria-label")).toMatch(/confidence \d+%/);
    expect(await p.getByText("hover for details").count()).toBe(0);
    const overflow = await p.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
    expect(overflow).toBeLessThanOrEqual(0);
    expect(app.errors()).toEqual([]);
  });

  it("answer text stays readable at every confidence (no fading, contrast >= 4.5:1) in dark and light", async () => {
    const p = await freshPage();
    const run = byBackend("vnpu");
    await p.getByTestId("backend-picker").selectOption("vnpu");
    await ask(p, run.request.prompt);
    await p.getByTestId("show-steps").click();
    await p.getByTestId("end-marker").click();
    const confidences = splitAtEnd(finalCanvas(run)).answer.map((s) => s.confidence ?? 1);
    // The recording has low-confidence answer tokens: the case that used to fade.
    expect(Math.min(...confidences)).toBeLessThan(0.3);
    for (const scheme of ["dark", "light"] as const) {
      await p.emulateMedia({ colorScheme: scheme });
      const scrub = p.getByTestId("scrubber");
      // Every step of the replay: masked, may-change, stable, speculative, revised, end and padding.
      const total = run.detail.frames.length;
      for (const at of [0, Math.floor(total / 3), Math.floor((2 * total) / 3), total]) {
        await scrub.fill(String(at));
        for (const t of await tokenContrast(p, "[data-testid=replay]")) {
          expect(t.opacity, `${scheme} step ${at} ${JSON.stringify(t.text)}`).toBe(1);
          expect(t.ratio, `${scheme} step ${at} ${JSON.stringify(t.text)}`).toBeGreaterThanOrEqual(4.5);
        }
      }
      await shot(p, `canvas-replay-${scheme}`);
    }
    await p.emulateMedia({ colorScheme: null });
    expect(app.errors()).toEqual([]);
  });

  it("composer: a labelled prompt box, Send disabled while empty, keyboard hint only with a fine pointer", async () => {
    const p = await freshPage();
    const box = p.getByLabel("Message", { exact: true });
    expect(await box.getAttribute("data-testid")).toBe("prompt");
    expect(await p.getByTestId("send").isDisabled()).toBe(true);
    await box.fill("   ");
    expect(await p.getByTestId("send").isDisabled()).toBe(true);
    await box.fill("Hi");
    expect(await p.getByTestId("send").isDisabled()).toBe(false);
    const fine = await p.evaluate(() => matchMedia("(pointer: fine)").matches);
    expect(await p.getByTestId("prompt-hint").count()).toBe(fine ? 1 : 0);

    // A touch device (coarse pointer): no Shift+Enter hint anywhere.
    const cdp = await p.context().newCDPSession(p);
    await cdp.send("Emulation.setTouchEmulationEnabled", { enabled: true, maxTouchPoints: 5 });
    await cdp.send("Emulation.setEmitTouchEventsForMouse", { enabled: true, configuration: "mobile" });
    await p.setViewportSize({ width: 390, height: 844 });
    await p.reload();
    await p.getByTestId("model-picker").waitFor();
    expect(await p.evaluate(() => matchMedia("(pointer: fine)").matches)).toBe(false);
    expect(await p.getByTestId("prompt-hint").count()).toBe(0);
    expect(await p.locator("body").textContent()).not.toContain("Shift+Enter");
    expect(await p.getByLabel("Message", { exact: true }).count()).toBe(1);
    await shot(p, "composer-phone");
    await cdp.send("Emulation.setEmitTouchEventsForMouse", { enabled: false });
    await cdp.send("Emulation.setTouchEmulationEnabled", { enabled: false });
    expect(app.errors()).toEqual([]);
  });
});
