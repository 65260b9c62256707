// The real Tauri app (WebKitGTK under Xvfb) driven over WebDriver: the embedded model really
// generates, the real store records the runs, nothing is mocked.
import { execFileSync } from "node:child_process";
import fs from "node:fs";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { By, until, type WebDriver, type WebElement } from "selenium-webdriver";
import { launchApp, type RealApp } from "./driver";

let app: RealApp;
let d: WebDriver;
const shotDir = process.env.UNMASK_APP_SHOT_DIR;

const byTest = (id: string) => By.css(`[data-testid="${id}"]`);
async function el(id: string, ms = 60_000): Promise<WebElement> {
  return d.wait(until.elementLocated(byTest(id)), ms, `no element with data-testid=${id}`);
}
async function all(css: string): Promise<WebElement[]> {
  return d.findElements(By.css(css));
}
async function waitFor(what: string, cond: () => Promise<boolean>, ms = 120_000): Promise<void> {
  await d.wait(async () => {
    try {
      return await cond();
    } catch {
      return false;
    }
  }, ms, what);
}
async function tab(id: string): Promise<void> {
  // On narrow windows the tab bar moves to the bottom; the data-tab attribute stays the same.
  const buttons = await all(`[data-tab="${id}"]`);
  for (const b of buttons) {
    if (await b.isDisplayed()) {
      await b.click();
      return;
    }
  }
  throw new Error(`no visible tab ${id}`);
}
// WebKitWebDriver's own screenshot command can take minutes under Xvfb; the X display is grabbed
// instead (ImageMagick, as the smoke test does), cut to the window when it is smaller than the screen.
async function shot(name: string): Promise<void> {
  if (!shotDir) return;
  fs.mkdirSync(shotDir, { recursive: true });
  const r = await d.manage().window().getRect();
  const crop = ["-crop", `${r.width}x${r.height}+${Math.max(0, r.x)}+${Math.max(0, r.y)}`, "+repage"];
  execFileSync("import", ["-window", "root", ...crop, path.join(shotDir, `${name}.png`)], { timeout: 30_000 });
}
/** How far the page scrolls sideways, px (0 or less: it does not). */
async function sidewaysOverflow(): Promise<number> {
  return (await d.executeScript("return document.documentElement.scrollWidth - window.innerWidth")) as number;
}
const t0 = Date.now();
function progress(what: string): void {
  if (process.env.UNMASK_APP_E2E_VERBOSE) console.error(`[${((Date.now() - t0) / 1000).toFixed(1)} s] ${what}`);
}
async function send(prompt: string): Promise<void> {
  const box = await el("prompt");
  await box.clear();
  await box.sendKeys(prompt);
  const before = (await all("[data-testid=msg-assistant]")).length;
  await (await el("send")).click();
  progress(`sent ${JSON.stringify(prompt)}`);
  // While the run streams the pending answer is the live canvas; it ends as an assistant message
  // with its run stats.
  await waitFor(`an answer to ${JSON.stringify(prompt)}`,
    async () => (await all("[data-testid=msg-assistant]")).length > before && (await all("[data-testid=live]")).length === 0);
  progress("answered");
}

beforeAll(async () => {
  app = await launchApp();
  d = app.driver;
  await el("model-picker", 120_000);
});
afterAll(async () => {
  if (app) {
    if (process.env.UNMASK_APP_E2E_LOG) fs.writeFileSync(process.env.UNMASK_APP_E2E_LOG, app.log());
    await app.close();
  }
});

describe("the real app window (tauri-driver + WebKitWebDriver)", () => {
  it("chat: a message is denoised live by the embedded model and recorded", async () => {
    await send("What is 2+3?");
    const answer = await (await all("[data-testid=msg-assistant]"))[0].getText();
    expect(answer.length).toBeGreaterThan(0);
    expect((await all("[data-testid=conversations] li")).length).toBeGreaterThanOrEqual(1);
    await shot("real-chat");
  });

  it("profiler: the run's lanes and steps are shown", async () => {
    await (await el("profile")).click();
    progress("profiler opened");
    await el("timeline");
    await waitFor("profiler lanes", async () => (await all("[data-testid=lane]")).length > 0);
    await waitFor("step rows", async () => (await all("[data-testid=step-table] tbody tr")).length > 0);
    await shot("real-profiler");
  });

  it("compare: two runs side by side", async () => {
    await tab("chat");
    await send("Reverse: cat dog");
    await tab("compare");
    await waitFor("two runs to pick", async () => (await all("[data-testid=run-check]")).length >= 2);
    const checks = await all("[data-testid=run-check]");
    await checks[0].click();
    await checks[1].click();
    await (await el("compare")).click();
    await waitFor("two compared columns", async () => (await all("[data-testid=compare-col]")).length === 2);
    await shot("real-compare");
  });

  it("models: import a model folder by path", async () => {
    const dir = process.env.UNMASK_IMPORT_MODEL;
    if (!dir) throw new Error("UNMASK_IMPORT_MODEL is not set: run through scripts/app-e2e.sh");
    await tab("models");
    const before = (await all("[data-testid=model-row]")).length;
    // The typed path is the fallback beside the native file picker (which WebDriver cannot drive).
    await (await d.findElement(By.css("[data-testid=import-advanced] summary"))).click();
    await (await el("import-path")).sendKeys(dir);
    await (await el("import")).click();
    await waitFor("the imported model in the table", async () => (await all("[data-testid=model-row]")).length === before + 1);
    await shot("real-models");
  });

  it("chat: a link in a message opens in the system browser, and the app window stays", async () => {
    await tab("chat");
    const url = "https://example.org/unmask-link-check?from=app-e2e";
    await send(`Where is this from? [the page](${url})`);
    const links = await all("[data-testid=msg-user] a[href]");
    expect(links.length).toBeGreaterThanOrEqual(1);
    const link = links[links.length - 1];
    expect(await link.getAttribute("target")).toBe("_blank");
    const appUrl = await d.getCurrentUrl();
    await link.click();
    await waitFor("the link handed to the system browser", async () => app.openedUrls().includes(url), 30_000);
    expect(await d.getCurrentUrl()).toBe(appUrl);
    expect((await d.getAllWindowHandles()).length).toBe(1);
  });

  it("phone size: the real window at 390x844 shows every screen without sideways scrolling", async () => {
    await tab("settings");
    await el("setting");
    await shot("real-settings");
    await d.manage().window().setRect({ x: 0, y: 0, width: 390, height: 844 });
    await waitFor("the window at phone width",
      async () => ((await d.executeScript("return window.innerWidth")) as number) <= 390, 30_000);
    for (const screen of ["chat", "profiler", "compare", "models", "settings"]) {
      await tab(screen);
      // Layout settles within a frame or two; wait for the tab to be the selected one.
      await waitFor(`${screen} selected`, async () => {
        for (const b of await all(`[data-tab="${screen}"]`)) {
          if ((await b.isDisplayed()) && (await b.getAttribute("aria-current")) === "page") return true;
        }
        return false;
      }, 30_000);
      expect(await sidewaysOverflow(), `${screen} scrolls sideways`).toBeLessThanOrEqual(0);
      await shot(`real-phone-${screen}`);
    }
    await d.manage().window().setRect({ width: 1280, height: 820 });
  });

  it("chat: deleting a conversation removes it", async () => {
    await tab("chat");
    const count = async () => (await all("[data-testid=conversation-actions]")).length;
    const before = await count();
    expect(before).toBeGreaterThanOrEqual(1);
    await (await all("[data-testid=conversation-actions]"))[0].click();
    await (await el("delete-conversation")).click();
    await (await el("confirm-delete-conversation")).click();
    await waitFor("one conversation fewer", async () => (await count()) === before - 1);
  });
});
