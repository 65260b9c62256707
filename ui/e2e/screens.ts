// Shared by the e2e tests: the recorded run of each backend, the tokens a canvas shows, and each
// screen opened with real content loaded.
import { expect } from "vitest";
import type { Page } from "playwright-core";
import { loadFixtures, type RecordedRun } from "../tests/fixtures";
import { tab } from "./harness";

export type Screen = "chat" | "profiler" | "models" | "compare" | "settings";
export const screens: Screen[] = ["chat", "profiler", "models", "compare", "settings"];

const fixtures = loadFixtures();
export const byBackend = (kind: "cpu" | "vnpu"): RecordedRun =>
  (fixtures.find((f) => f.run.request.backend.kind === kind) ?? fixtures[0]).run;

/** [state, text] of each token in the canvas under `scope`. */
export function tokensIn(page: Page, scope: string): Promise<string[][]> {
  return page.$$eval(`${scope} [data-testid=token-canvas] .tok`, (els) =>
    els.map((e) => [(e as HTMLElement).dataset.state ?? "", e.textContent ?? ""]));
}

/**
 * Lets a test make the next calls of a command fail (`window.__FAIL_COMMAND__[cmd] = message`):
 * wraps the mock backend's invoke, so it must be added after the mock script.
 */
export const failureScript = `(() => {
  window.__FAIL_COMMAND__ = {};
  const inner = window.__TAURI_INTERNALS__.invoke;
  window.__TAURI_INTERNALS__.invoke = (cmd, args, options) => {
    const message = window.__FAIL_COMMAND__[cmd];
    return message ? Promise.reject({ kind: "internal", message }) : inner(cmd, args, options);
  };
})();`;

export const openTab = (p: Page, s: Screen) => tab(p, s);

/** Chat with one finished run and its step replay open. */
export async function finishedChat(p: Page): Promise<void> {
  const run = byBackend("cpu");
  await openTab(p, "chat");
  await p.getByTestId("prompt").fill(run.request.prompt);
  await p.getByTestId("send").click();
  await p.getByTestId("run-stats").waitFor();
  await expect.poll(() => p.getByTestId("msg-assistant").count()).toBe(1);
  await p.getByTestId("msg-assistant").first().getByTestId("show-steps").click();
  await p.getByTestId("replay").first().waitFor();
}

/** Opens a screen with content: the finished run in chat (see finishedChat), the vNPU run in the
 * profiler, an imported model, two runs compared, the settings. */
export async function openScreen(p: Page, s: Screen): Promise<void> {
  await openTab(p, s);
  switch (s) {
    case "chat":
      await p.getByTestId("replay").first().waitFor();
      break;
    case "profiler": {
      const run = byBackend("vnpu");
      await p.getByTestId("run-picker").waitFor();
      const value = await p.locator("[data-testid=run-picker] option", { hasText: run.detail.summary.backend })
        .first().getAttribute("value");
      await p.getByTestId("run-picker").selectOption(value ?? "");
      await expect.poll(() => p.locator("[data-testid=lane]:not([data-empty])").count()).toBe(run.detail.timeline?.lanes.length ?? 0);
      break;
    }
    case "models": {
      const rows = p.getByTestId("model-row");
      await expect.poll(() => rows.count()).toBeGreaterThan(0);
      if ((await rows.count()) < 2) {
        await p.locator("[data-testid=import-advanced] summary").click();
        await p.getByTestId("import-path").fill("/data/models/LLaDA-8B-Instruct-Q4_K.gguf");
        await p.getByTestId("import").click();
        await expect.poll(() => rows.count()).toBe(2);
      }
      break;
    }
    case "compare": {
      const checks = p.getByTestId("run-check");
      await expect.poll(() => checks.count()).toBeGreaterThan(1);
      const labels = await p.locator("[data-testid=run-list] label").allTextContents();
      const vnpu = labels.findIndex((l) => l.includes("vnpu"));
      const cpu = labels.findIndex((l) => !l.includes("vnpu"));
      await checks.nth(vnpu >= 0 ? vnpu : 0).check();
      await checks.nth(cpu >= 0 && cpu !== vnpu ? cpu : 1).check();
      await p.getByTestId("compare").click();
      await expect.poll(() => p.getByTestId("compare-col").count()).toBe(2);
      break;
    }
    case "settings":
      await expect.poll(() => p.getByTestId("setting").count()).toBeGreaterThan(0);
      break;
  }
}
