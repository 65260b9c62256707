// E2E harness: serves the built UI, bundles the mock backend and opens Debian's Chromium.
import fs from "node:fs";
import http from "node:http";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { build } from "esbuild";
import { chromium, type BrowserContext, type Page } from "playwright-core";
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
