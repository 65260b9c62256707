// End-to-end: the settings form and the model manager as people use them, at desktop size and on
// a phone (built UI, headless Chromium, mocked IPC).
import { describe, expect, it } from "vitest";
import type { Page } from "playwright-core";
import { PHONE, pageOverflow, shot, tab, useApp } from "./harness";

const app = useApp({ stepMs: 10, dlTicks: 40 });
const freshPage = app.freshPage;

const calls = (p: Page, cmd: string) =>
  p.evaluate((c) => window.__UNMASK_CALLS__.filter((x) => x.cmd === c).map((x) => x.args), cmd);
const setting = (p: Page, key: string) => p.locator(`[data-testid=setting][data-key=${key}]`);

/** Visible buttons, text inputs and selects under `scope` smaller than 44 px in height. */
function smallTargets(p: Page, scope: string): Promise<string[]> {
  return p.$$eval(`${scope} button, ${scope} select, ${scope} input:not([type=checkbox]):not([type=radio]), ${scope} summary`, (els) =>
    els.filter((e) => (e as HTMLElement).offsetParent !== null && !e.closest("details:not([open]) > :not(summary)"))
      .map((e) => [e, e.getBoundingClientRect()] as const)
      .filter(([, r]) => r.height > 0 && r.height < 44 && !(r.width === 0))
      .map(([e, r]) => `${e.tagName.toLowerCase()} "${(e.textContent ?? "").trim().slice(0, 20)}" ${Math.round(r.height)}px`));
}
/** Inputs and selects under `scope` without a label (a <label>, aria-label or aria-labelledby). */
function unlabelled(p: Page, scope: string): Promise<string[]> {
  return p.$$eval(`${scope} input, ${scope} select, ${scope} textarea`, (els) =>
    els.filter((e) => (e as HTMLInputElement).labels?.length === 0 && !e.getAttribute("aria-label") && !e.getAttribute("aria-labelledby"))
      .map((e) => e.outerHTML.slice(0, 80)));
}

describe("settings form", () => {
  it("first open: nothing is marked changed; the threshold is an explicit switch that starts at 0.9", async () => {
    const p = await freshPage();
    await tab(p, "settings");
    await expect.poll(() => p.getByTestId("setting").count()).toBeGreaterThan(5);
    expect(await p.locator("[data-testid=setting][data-changed=true]").count()).toBe(0);
    // Off is said in words, not by a grey placeholder.
    expect(await p.getByTestId("toggle-threshold").isChecked()).toBe(false);
    expect(await p.getByTestId("off-threshold").textContent()).toContain("off");
    expect(await p.locator("#set-threshold").count()).toBe(0);
    expect(await setting(p, "threshold").textContent()).toContain("Parallel decoding by confidence threshold");
    await p.getByTestId("toggle-threshold").check();
    expect(await p.locator("#set-threshold").inputValue()).toBe("0.9");
    expect(await setting(p, "threshold").getAttribute("data-changed")).toBe("true");
    await p.getByTestId("toggle-threshold").uncheck();
    expect(await setting(p, "threshold").getAttribute("data-changed")).toBe("false");
    expect(await unlabelled(p, "[data-testid=settings-form]")).toEqual([]);
    expect(await unlabelled(p, ".settings")).toEqual([]);
    expect(app.errors()).toEqual([]);
  });

  it("shows only the settings that apply to the selected model, and says which are hidden", async () => {
    const p = await freshPage();
    await tab(p, "settings");
    // The embedded model is a LLaDA model: CFG yes; Dream's position selection and MoE execution no.
    await setting(p, "cfgScale").waitFor();
    expect(await setting(p, "algorithm").count()).toBe(0);
    expect(await setting(p, "moe").count()).toBe(0);
    const note = await p.getByTestId("hidden-settings").textContent();
    expect(note).toContain("Dream position selection (Dream models)");
    expect(note).toContain("Mixture-of-experts execution (mixture-of-experts models)");

    // A Dream model: its algorithm appears, LLaDA's remasking and CFG go.
    await tab(p, "models");
    await p.evaluate(() => window.__UNMASK_PICK__("/data/models/Dream-v0-Instruct-7B"));
    await p.getByTestId("pick-folder").click();
    await expect.poll(() => p.getByTestId("model-row").count()).toBe(2);
    await tab(p, "settings");
    const picker = p.getByTestId("settings-form").getByTestId("model-picker");
    const dream = await picker.locator("option", { hasText: "Dream-v0-Instruct-7B" }).getAttribute("value");
    await picker.selectOption(dream!);
    await setting(p, "algorithm").waitFor();
    expect(await setting(p, "cfgScale").count()).toBe(0);
    expect(await setting(p, "remasking").count()).toBe(0);
    expect(await p.getByTestId("applies-note").textContent()).toContain("Dream diffusion model");
    expect(app.errors()).toEqual([]);
  });

  it("invalid input is shown next to the field and not applied; valid values are", async () => {
    const p = await freshPage();
    await tab(p, "settings");
    const temp = p.locator("#set-temperature");
    await temp.fill("5");
    await expect.poll(() => temp.getAttribute("aria-invalid")).toBe("true");
    expect(await temp.getAttribute("aria-describedby")).toContain("err-temperature");
    expect(await p.locator("#err-temperature").textContent()).toBe("5 is out of range: allowed 0–2.");
    expect(await temp.inputValue()).toBe("5"); // kept as typed, never clamped
    await temp.fill("abc");
    await expect.poll(() => p.locator("#err-temperature").textContent()).toBe('"abc" is not a number.');
    expect(await p.getByTestId("settings-invalid").textContent()).toContain("1 field is not valid");
    await shot(p, "settings-invalid");

    // Answer length must be a multiple of the block length (4 in the model's defaults).
    const gen = p.locator("#set-genLength");
    await gen.fill("50");
    await expect.poll(() => p.locator("#err-genLength").textContent()).toBe("Answer length 50 must be a multiple of the block length 4.");
    expect(await gen.getAttribute("aria-invalid")).toBe("true");

    // A valid value elsewhere applies; fixing a field clears its message.
    await p.locator("#set-seed").fill("7");
    await temp.fill("0.5");
    await expect.poll(() => temp.getAttribute("aria-invalid")).toBe("false");
    expect(await p.locator("#err-temperature").count()).toBe(0);

    // What a run is sent: the valid edits, the last valid answer length.
    await tab(p, "chat");
    await p.getByTestId("prompt").fill("What is 347+586?");
    await p.getByTestId("send").click();
    await expect.poll(async () => (await calls(p, "generate")).length).toBe(1);
    const [req] = (await calls(p, "generate")) as { request: { settings: Record<string, unknown> } }[];
    // (32 tokens in blocks of 4: the embedded model's own defaults.)
    expect(req.request.settings).toMatchObject({ temperature: 0.5, seed: 7, genLength: 32, blockLength: 4 });

    // Back in the form, the invalid answer length is still shown as typed, with its message.
    await tab(p, "settings");
    await expect.poll(() => p.locator("#err-genLength").count()).toBe(1);
    expect(app.errors()).toEqual([]);
  });

  it("fits a 360 px phone: no sideways scrolling, 44 px targets, every input labelled", async () => {
    const p = await freshPage({ width: 360, height: 780 });
    await tab(p, "settings");
    await p.getByTestId("setting").first().waitFor();
    expect(await pageOverflow(p)).toBeLessThanOrEqual(0);
    expect(await smallTargets(p, ".settings")).toEqual([]);
    expect(await unlabelled(p, ".settings")).toEqual([]);
    await shot(p, "settings-phone");
    expect(app.errors()).toEqual([]);
  });
});

describe("model manager", () => {
  it("imports with the native file and folder pickers; cancelling imports nothing", async () => {
    const p = await freshPage();
    await tab(p, "models");
    const rows = p.getByTestId("model-row");
    await expect.poll(() => rows.count()).toBe(1);
    // The typed path is an advanced fallback, folded away.
    expect(await p.getByTestId("import-path").isVisible()).toBe(false);

    await p.evaluate(() => window.__UNMASK_PICK__(null));
    await p.getByTestId("pick-file").click();
    await expect.poll(async () => (await calls(p, "plugin:dialog|open")).length).toBe(1);
    expect(await rows.count()).toBe(1);

    await p.evaluate(() => window.__UNMASK_PICK__("/data/models/LLaDA-8B-Instruct-Q4_K.gguf"));
    await p.getByTestId("pick-file").click();
    await expect.poll(() => rows.count()).toBe(2);
    expect(await p.getByTestId("import-note").textContent()).toContain("Imported LLaDA-8B-Instruct-Q4_K (gguf");
    await p.evaluate(() => window.__UNMASK_PICK__("/data/models/LLaDA-MoE-7B-A1B-Instruct"));
    await p.getByTestId("pick-folder").click();
    await expect.poll(() => rows.count()).toBe(3);
    const opens = (await calls(p, "plugin:dialog|open")) as { options: { directory: boolean; filters?: { extensions: string[] }[] } }[];
    expect(opens[1].options).toMatchObject({ directory: false, filters: [{ extensions: ["gguf"] }] });
    expect(opens[2].options).toMatchObject({ directory: true });
    expect(await rows.nth(2).getByTestId("moe-calibration").count()).toBe(1);
    expect(app.errors()).toEqual([]);
  });

  it("memory fit: weights + K/V, activations and logits at the current answer length vs available memory, with the breakdown", async () => {
    const p = await freshPage();
    await tab(p, "models");
    await p.evaluate(() => window.__UNMASK_PICK__("/data/models/LLaDA-8B-Instruct-Q4_K.gguf"));
    await p.getByTestId("pick-file").click();
    const fit = p.getByTestId("model-fit");
    await expect.poll(() => fit.count()).toBe(2);
    expect(await p.getByTestId("memory-note").textContent()).toContain("5.00 GiB available now of 8.00 GiB");
    // tiny-llada: 8.5 MiB of weights; 256 tokens of context = 224 prompt + its default 32-token answer.
    expect(await fit.nth(0).getAttribute("data-fits")).toBe("true");
    expect(await fit.nth(0).textContent()).toContain("of 5.00 GiB available");
    expect(await fit.nth(0).getByTestId("fit-breakdown").textContent()).toContain("for 256 tokens (224 prompt + 32 answer");
    // 8B in Q4_K: 4.3 GiB of weights + 1 MiB of K/V per token: over the 5 GiB available, though below the 8 GiB total.
    expect(await fit.nth(1).getAttribute("data-fits")).toBe("false");
    const before = await fit.nth(1).getByTestId("fit-breakdown").textContent();
    expect(before).toContain("1.03 GiB for 1056 tokens (1024 prompt + 32 answer");
    // The logits: one row of the 126464-token vocabulary (x 20 bytes) per answer token.
    expect(before).toContain("logits 77.2 MiB (32 rows of 2.41 MiB)");
    expect(before).toContain("activations 264 MiB");
    expect(await fit.nth(1).textContent()).toContain("too big");

    // A longer answer in the settings needs more K/V.
    await tab(p, "settings");
    await p.locator("#set-genLength").fill("128");
    await tab(p, "models");
    await expect.poll(() => p.getByTestId("fit-breakdown").nth(1).textContent()).toContain("1152 tokens (1024 prompt + 128 answer");
    expect(await p.getByTestId("fit-breakdown").nth(1).textContent()).toContain("(128 rows of 2.41 MiB)");
    expect(app.errors()).toEqual([]);
  });

  it("downloads a revision or one GGUF file, with speed and time left; the base URL is advanced", async () => {
    const p = await freshPage();
    await tab(p, "models");
    expect(await p.getByTestId("dl-base").isVisible()).toBe(false);
    expect(await p.getByTestId("dl-revision").inputValue()).toBe("main");
    await p.getByTestId("dl-repo").fill("GSAI-ML/LLaDA-8B-Instruct");
    await p.getByTestId("dl-revision").fill("v1.0");
    await p.getByTestId("dl-one").check();
    await p.getByTestId("dl-file").fill("llada-8b.bin");
    await p.getByTestId("download").click();
    expect(await p.locator("#dl-file-err").textContent()).toBe("The file must be a .gguf.");
    expect(await p.getByTestId("dl-file").getAttribute("aria-invalid")).toBe("true");
    expect(await calls(p, "start_download")).toEqual([]);

    await p.getByTestId("dl-file").fill("llada-8b-Q4_K.gguf");
    await p.getByTestId("download").click();
    await expect.poll(async () => (await calls(p, "start_download")).length).toBe(1);
    const [args] = (await calls(p, "start_download")) as Record<string, unknown>[];
    expect(args).toMatchObject({ baseUrl: "https://huggingface.co", repo: "GSAI-ML/LLaDA-8B-Instruct", revision: "v1.0", file: "llada-8b-Q4_K.gguf" });
    const row = p.getByTestId("download-row").first();
    await expect.poll(() => row.getByTestId("dl-speed").textContent()).toMatch(/^[\d.]+ (B|KiB|MiB|GiB)\/s$/);
    await expect.poll(() => row.getByTestId("dl-eta").textContent()).toMatch(/^\d+ s left$|^\d+ min \d+ s left$/);
    await shot(p, "models-download");
    await row.getByTestId("dl-pause").click();
    await expect.poll(() => row.getAttribute("data-status")).toBe("paused");
    await row.getByTestId("dl-resume").click();
    await expect.poll(() => row.getAttribute("data-status")).toBe("finished");
    expect(await row.textContent()).toContain("added llada-8b-Q4_K");
    expect(app.errors()).toEqual([]);
  });

  it("on a 390 px phone: models as cards, no sideways scrolling, 44 px targets, labelled inputs", async () => {
    const p = await freshPage(PHONE);
    await tab(p, "models");
    await p.evaluate(() => window.__UNMASK_PICK__("/data/models/LLaDA-8B-Instruct-Q4_K.gguf"));
    await p.getByTestId("pick-file").click();
    await expect.poll(() => p.getByTestId("model-row").count()).toBe(2);
    await p.getByTestId("dl-repo").fill("GSAI-ML/LLaDA-8B-Instruct");
    await p.getByTestId("download").click();
    await p.getByTestId("download-row").first().waitFor();
    expect(await p.getByTestId("model-row").first().evaluate((e) => getComputedStyle(e).display)).toBe("grid");
    const table = await p.getByTestId("model-table").boundingBox();
    expect(table!.width).toBeLessThanOrEqual(PHONE.width);
    expect(await pageOverflow(p)).toBeLessThanOrEqual(0);
    expect(await smallTargets(p, ".models")).toEqual([]);
    expect(await unlabelled(p, ".models")).toEqual([]);
    await p.evaluate(() => window.scrollTo(0, 0));
    await shot(p, "models-phone");
    await p.getByTestId("model-row").first().getByTestId("model-runs").click();
    await p.getByTestId("model-run-table").waitFor();
    expect(await pageOverflow(p)).toBeLessThanOrEqual(0);
    expect(app.errors()).toEqual([]);
  });
});
