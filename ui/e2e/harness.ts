// E2E harness: serves the built UI, bundles the mock backend and opens Debian's Chromium; one
// `useApp` per test file sets all of that up and hands out fresh pages.
import fs from "node:fs";
import http from "node:http";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { build } from "esbuild";
import { chromium, type BrowserContext, type Page } from "playwright-core";
import { afterAll, beforeAll } from "vitest";
import { loadAppData, loadFixtures } from "../tests/fixtures";

const uiRoot = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..");
export const distDir = path.join(uiRoot, "dist");
/** Where screenshots go: test-results/ by default; `npm run screenshots` refreshes docs/screenshots/. */
export const screenshotDir = path.resolve(uiRoot, process.env.UNMASK_SCREENSHOT_DIR ?? "test-results/screenshots");

const types: Record<string, string> = { ".html": "text/html", ".js": "text/javascript", ".css": "text/css",
  ".json": "application/json", ".svg": "image/svg+xml", ".png": "image/png", ".ico": "image/x-icon" };

/** A static file server over dist/ (SPA fallback to index.html) on a free loopback port. */
export async function serveDist(): Promise<{ url: string; close: () => Promise<void> }> {
  if (!fs.existsSync(path.join(distDir, "index.html"))) {
    throw new Error(`no built UI in ${distDir}: run \`npm run build\` first`);
  }
  const server = http.createServer((req, res) => {
    const rel = decodeURIComponent(new URL(req.url ?? "/", "http://x").pathname);
    let file = path.normalize(path.join(distDir, rel));
    if (!file.startsWith(distDir) || !fs.existsSync(file) || fs.statSync(file).isDirectory()) {
      file = path.join(distDir, "index.html");
    }
    res.writeHead(200, { "content-type": types[path.extname(file)] ?? "application/octet-stream" });
    fs.createReadStream(file).pipe(res);
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  const addr = server.address();
  if (addr === null || typeof addr === "string") throw new Error("server has no port");
  return { url: `http://127.0.0.1:${addr.port}/`, close: () => new Promise((r) => server.close(() => r())) };
}

/** The mock backend as one script, prefixed with the recorded fixtures. */
export async function mockScript(opts: { stepMs: number; dlTicks: number }): Promise<string> {
  const out = await build({
    entryPoints: [path.join(uiRoot, "e2e", "mock-backend.ts")],
    bundle: true,
    format: "iife",
    target: "es2020",
    write: false,
    logLevel: "silent",
  });
  const fixtures = loadFixtures().map((f) => ({ name: f.name, run: f.run }));
  return `window.__UNMASK_FIXTURES__ = ${JSON.stringify(fixtures)};\n` +
    `window.__UNMASK_APP_DATA__ = ${JSON.stringify(loadAppData())};\n` +
    `window.__UNMASK_STEP_MS__ = ${opts.stepMs}; window.__UNMASK_DL_TICKS__ = ${opts.dlTicks};\n` +
    out.outputFiles[0].text;
}

/** Chromium from Debian (`apt-get install chromium`), or $CHROMIUM. */
export function chromiumPath(): string {
  const p = process.env.CHROMIUM ?? "/usr/bin/chromium";
  if (!fs.existsSync(p)) throw new Error(`Chromium not found at ${p}: apt-get install -y chromium (or set CHROMIUM)`);
  return p;
}

/** A headless Chromium with a fresh profile, the mock installed before any page script runs. */
export async function launch(script: string): Promise<{ context: BrowserContext; close: () => Promise<void> }> {
  const userDataDir = fs.mkdtempSync(path.join(os.tmpdir(), "unmask-e2e-"));
  const context = await chromium.launchPersistentContext(userDataDir, {
    executablePath: chromiumPath(),
    headless: true,
    args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
      "--disable-background-networking", "--disable-component-update", "--disable-sync"],
    viewport: { width: 1280, height: 800 },
    deviceScaleFactor: 1,
    acceptDownloads: true,
    timeout: 120_000,
  });
  context.setDefaultTimeout(60_000);
  await context.addInitScript({ content: script });
  return {
    context,
    close: async () => {
      await context.close();
      fs.rmSync(userDataDir, { recursive: true, force: true });
    },
  };
}

/** Saves a screenshot of the page as NAME.png in screenshotDir. */
export async function shot(page: Page, name: string): Promise<void> {
  fs.mkdirSync(screenshotDir, { recursive: true });
  await page.screenshot({ path: path.join(screenshotDir, `${name}.png`) });
}

/** Fails the test on any uncaught page error or console error. */
export function collectErrors(page: Page): string[] {
  const errors: string[] = [];
  page.on("pageerror", (e) => errors.push(String(e)));
  page.on("console", (m) => {
    if (m.type() === "error") errors.push(m.text());
  });
  return errors;
}

export type Viewport = { width: number; height: number };
export const DESKTOP: Viewport = { width: 1280, height: 800 };
export const PHONE: Viewport = { width: 390, height: 844 };

export type AppOptions = {
  /** Delay between replayed frames of a recorded stream, ms. */
  stepMs: number;
  /** Progress ticks of a mocked download. */
  dlTicks: number;
  /** Scripts run after the mock backend on every page (e.g. to make commands fail). */
  initScripts?: string[];
  colorScheme?: "light" | "dark";
};

/** What a test file drives: fresh pages on the served UI, and the page errors of the latest one. */
export type E2eApp = {
  /** A new page at `viewport` on the app's start screen (closes the previous one). */
  freshPage: (viewport?: Viewport, colorScheme?: "light" | "dark") => Promise<Page>;
  /** Uncaught errors and console errors of the page `freshPage` opened last. */
  errors: () => string[];
};

/**
 * Serves dist/, starts Chromium with the mock backend before the file's tests and closes both
 * after them. Call once at the top level of a test file.
 */
export function useApp(opts: AppOptions): E2eApp {
  let server: Awaited<ReturnType<typeof serveDist>> | undefined;
  let browser: Awaited<ReturnType<typeof launch>> | undefined;
  let page: Page | undefined;
  let errors: string[] = [];
  beforeAll(async () => {
    server = await serveDist();
    browser = await launch(await mockScript({ stepMs: opts.stepMs, dlTicks: opts.dlTicks }));
    for (const content of opts.initScripts ?? []) await browser.context.addInitScript({ content });
  });
  afterAll(async () => {
    await browser?.close();
    await server?.close();
  });
  const started = () => {
    if (!browser || !server) throw new Error("useApp: the browser is not started (call it at the top level of a test file)");
    return { browser, server };
  };
  return {
    freshPage: async (viewport = DESKTOP, colorScheme = opts.colorScheme) => {
      const { browser, server } = started();
      if (page) await page.close();
      page = await browser.context.newPage();
      await page.setViewportSize(viewport);
      if (colorScheme) await page.emulateMedia({ colorScheme });
      errors = collectErrors(page);
      await page.goto(server.url);
      await page.getByTestId("model-picker").waitFor();
      return page;
    },
    errors: () => errors,
  };
}

/** Opens a tab of the app (chat, profiler, models, compare, settings). */
export const tab = (p: Page, id: string) => p.click(`[data-tab=${id}]`);

/** How far the page scrolls sideways, px (0 or less: it does not). */
export const pageOverflow = (p: Page) => p.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
