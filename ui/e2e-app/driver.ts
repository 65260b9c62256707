// Starts tauri-driver (which starts WebKitWebDriver, which starts the app binary) and opens a
// WebDriver session on the real app window. Paths come from scripts/app-e2e.sh.
import { spawn, type ChildProcess } from "node:child_process";
import fs from "node:fs";
import net from "node:net";
import os from "node:os";
import path from "node:path";
import { Builder, Capabilities, type WebDriver } from "selenium-webdriver";

function required(name: string): string {
  const v = process.env[name];
  if (!v) throw new Error(`${name} is not set: run this suite through scripts/app-e2e.sh`);
  if (!fs.existsSync(v)) throw new Error(`${name}=${v} does not exist`);
  return v;
}

async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const s = net.createServer();
    s.once("error", reject);
    s.listen(0, "127.0.0.1", () => {
      const addr = s.address();
      s.close(() => (addr && typeof addr === "object" ? resolve(addr.port) : reject(new Error("no port"))));
    });
  });
}

async function waitForPort(port: number, ms: number, child: ChildProcess): Promise<void> {
  const end = Date.now() + ms;
  while (Date.now() < end) {
    if (child.exitCode !== null) throw new Error(`tauri-driver exited with ${child.exitCode}`);
    const ok = await new Promise<boolean>((r) => {
      const c = net.connect(port, "127.0.0.1", () => { c.end(); r(true); });
      c.once("error", () => r(false));
    });
    if (ok) return;
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error(`tauri-driver did not listen on ${port} within ${ms} ms`);
}

/** A running app under WebDriver, with its own data folder. */
export type RealApp = {
  driver: WebDriver;
  dataDir: string;
  log: () => string;
  /** URLs the app handed to the system browser (xdg-open runs $BROWSER, a recorder here). */
  openedUrls: () => string[];
  close: () => Promise<void>;
};

/** Launches the app binary in a fresh data folder and connects to its window. */
export async function launchApp(): Promise<RealApp> {
  const application = required("UNMASK_APP_BINARY");
  const tauriDriver = required("TAURI_DRIVER");
  const nativeDriver = process.env.WEBKIT_WEBDRIVER ?? "/usr/bin/WebKitWebDriver";
  const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), "unmask-app-e2e-"));
  // The "system browser" is a recorder, registered the way a desktop registers one: the default
  // handler of http(s)/mailto links in the user's mimeapps.list, which xdg-open consults (and
  // $BROWSER, its fallback). Without it xdg-open would pick whatever browser is installed.
  const browserDir = fs.mkdtempSync(path.join(os.tmpdir(), "unmask-app-e2e-browser-"));
  const opened = path.join(browserDir, "opened.txt");
  const browser = path.join(browserDir, "browser.sh");
  fs.writeFileSync(browser, `#!/bin/sh\nprintf '%s\\n' "$1" >> '${opened}'\n`, { mode: 0o755 });
  const [configHome, dataHome] = [path.join(browserDir, "config"), path.join(browserDir, "data")];
  fs.mkdirSync(path.join(dataHome, "applications"), { recursive: true });
  fs.mkdirSync(configHome, { recursive: true });
  const schemes = ["http", "https", "mailto"].map((s) => `x-scheme-handler/${s}`);
  fs.writeFileSync(path.join(dataHome, "applications", "unmask-test-browser.desktop"),
    `[Desktop Entry]\nType=Application\nName=Unmask test browser\nExec=${browser} %u\nMimeType=${schemes.join(";")};\n`);
  fs.writeFileSync(path.join(configHome, "mimeapps.list"),
    `[Default Applications]\n${schemes.map((s) => `${s}=unmask-test-browser.desktop`).join("\n")}\n`);
  const [port, nativePort] = [await freePort(), await freePort()];
  let log = "";
  // The app is tauri-driver's grandchild: settings meant for it go on tauri-driver's environment.
  const child = spawn(tauriDriver, ["--port", String(port), "--native-port", String(nativePort),
    "--native-driver", nativeDriver], {
    env: { ...process.env, UNMASK_DATA_DIR: dataDir, BROWSER: browser, XDG_CONFIG_HOME: configHome,
      XDG_DATA_HOME: dataHome, WEBKIT_DISABLE_COMPOSITING_MODE: "1",
      WEBKIT_DISABLE_DMABUF_RENDERER: "1", LIBGL_ALWAYS_SOFTWARE: "1", GDK_BACKEND: "x11" },
    stdio: ["ignore", "pipe", "pipe"],
  });
  child.stdout?.on("data", (d) => (log += String(d)));
  child.stderr?.on("data", (d) => { log += String(d); if (process.env.UNMASK_APP_E2E_VERBOSE) process.stderr.write(`tauri-driver: ${d}`); });
  await waitForPort(port, 30_000, child);
  const caps = new Capabilities();
  caps.set("tauri:options", { application });
  caps.setBrowserName("wry");
  console.error("tauri-driver up on", port, nativePort);
  const driver = await new Builder().withCapabilities(caps).usingServer(`http://127.0.0.1:${port}/`).build();
  return {
    driver,
    dataDir,
    log: () => log,
    openedUrls: () => (fs.existsSync(opened) ? fs.readFileSync(opened, "utf8").split("\n").filter(Boolean) : []),
    close: async () => {
      try {
        await driver.quit();
      } finally {
        child.kill("SIGTERM");
        fs.rmSync(dataDir, { recursive: true, force: true });
        fs.rmSync(browserDir, { recursive: true, force: true });
      }
    },
  };
}
