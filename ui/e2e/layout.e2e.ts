// Page frame on phones and desktops: no sideways scrolling on any screen, a bottom tab bar, 44 px touch
// targets, the composer on screen under an error banner, errors kept to their screen; screenshots of all.
import { describe, expect, it } from "vitest";
import type { Page } from "playwright-core";
import { shot, useApp } from "./harness";
import { failureScript, finishedChat, openScreen, openTab, screens } from "./screens";

const app = useApp({ stepMs: 5, dlTicks: 30, initScripts: [failureScript], colorScheme: "dark" });
const freshPage = app.freshPage;

const phoneWidths = [360, 390, 430];
const describeEl = `(e) => e.tagName.toLowerCase() + (e.id ? "#" + e.id : "") +
  (e.getAttribute("data-testid") ? "[" + e.getAttribute("data-testid") + "]" : "") +
  (typeof e.className === "string" && e.className ? "." + e.className.trim().split(/\\s+/).join(".") : "") +
  " " + JSON.stringify((e.textContent || e.getAttribute("aria-label") || "").trim().slice(0, 30))`;

/** Sideways overflow of the page and of <main>, with the elements sticking out (not inside a scroller). */
async function overflow(p: Page): Promise<{ page: number; main: number; wide: string[] }> {
  return p.evaluate((describeSrc) => {
    const describe = eval(describeSrc) as (e: Element) => string;
    const vw = window.innerWidth;
    const main = document.querySelector("main");
    if (!main) throw new Error("no <main>");
    const scrolls = (e: Element) => {
      for (let a = e.parentElement; a && a !== main; a = a.parentElement) {
        if (getComputedStyle(a).overflowX !== "visible") return true;
      }
      return false;
    };
    const wide = [...document.querySelectorAll("body *")]
      .filter((e) => { const r = e.getBoundingClientRect(); return r.width > 0 && r.right > vw + 0.5 && !scrolls(e); })
      .slice(0, 8).map(describe);
    return { page: document.documentElement.scrollWidth - vw, main: main.scrollWidth - main.clientWidth, wide };
  }, describeEl);
}

/** Visible controls smaller than 44x44 px (form fields: lower than 44 px; checkboxes: with their labels). */
async function smallTargets(p: Page): Promise<string[]> {
  return p.evaluate((describeSrc) => {
    const describe = eval(describeSrc) as (e: Element) => string;
    const shown = (e: Element) => e.getClientRects().length > 0 && getComputedStyle(e).visibility !== "hidden";
    const box = (e: Element) => e.getBoundingClientRect();
    const tooSmall: string[] = [];
    for (const e of document.querySelectorAll("button, [role=button], a[href]")) {
      const r = box(e);
      if (shown(e) && (r.width < 43.5 || r.height < 43.5)) tooSmall.push(`${describe(e)} ${r.width.toFixed(0)}x${r.height.toFixed(0)}`);
    }
    for (const e of document.querySelectorAll("select, textarea, input:not([type=checkbox]):not([type=radio]):not([type=hidden])")) {
      const r = box(e);
      if (shown(e) && r.height < 43.5) tooSmall.push(`${describe(e)} height ${r.height.toFixed(0)}`);
    }
    for (const e of document.querySelectorAll<HTMLInputElement>("input[type=checkbox], input[type=radio]")) {
      if (!shown(e)) continue;
      const boxes = [box(e), ...[...(e.labels ?? [])].map(box)];
      if (!boxes.some((r) => r.width >= 43.5 && r.height >= 43.5)) tooSmall.push(`${describe(e)} (no 44 px label)`);
    }
    return tooSmall;
  }, describeEl);
}

/** The top bar is one row and the tabs sit in one row at the bottom of the viewport. */
async function phoneFrame(p: Page): Promise<{ topbar: number; tabsInOneRow: boolean; tabbarBottomGap: number; tabHeights: number[] }> {
  return p.evaluate(() => {
    const topbar = document.querySelector(".topbar")?.getBoundingClientRect();
    const bar = document.querySelector("[data-testid=tabbar]")?.getBoundingClientRect();
    const tabs = [...document.querySelectorAll("[data-testid=tabbar] button")].map((b) => b.getBoundingClientRect());
    if (!topbar || !bar) throw new Error("no top bar or tab bar");
    return {
      topbar: topbar.height,
      tabsInOneRow: tabs.length === 5 && tabs.every((t) => Math.abs(t.top - tabs[0].top) < 1),
      tabbarBottomGap: window.innerHeight - bar.bottom,
      tabHeights: tabs.map((t) => Math.round(t.height)),
    };
  });
}

describe("layout (built, headless chromium, mocked IPC)", () => {
  it("every screen with content fits 360-430 px phones without sideways scrolling, 44 px targets, bottom tabs", async () => {
    const p = await freshPage();
    await finishedChat(p);
    for (const s of screens) {
      await p.setViewportSize({ width: 1280, height: 800 });
      await openScreen(p, s);
      // Desktop: the tabs are in the top bar.
      expect(await p.getByTestId("tabbar").evaluate((n) => n.closest("header") !== null && getComputedStyle(n).position)).toBe("static");
      await shot(p, `desktop-${s}`);
      for (const width of phoneWidths) {
        await p.setViewportSize({ width, height: 844 });
        const o = await overflow(p);
        expect({ page: Math.max(0, o.page), main: Math.max(0, o.main), wide: o.wide }, `${s} at ${width} px`)
          .toEqual({ page: 0, main: 0, wide: [] });
        if (width === 390) {
          expect(await smallTargets(p), `${s} at 390 px`).toEqual([]);
          const f = await phoneFrame(p);
          expect(f.topbar, `${s}: top bar height`).toBeLessThanOrEqual(60);
          expect(f.tabsInOneRow).toBe(true);
          expect(Math.abs(f.tabbarBottomGap)).toBeLessThan(1);
          expect(f.tabHeights.every((h) => h >= 44)).toBe(true);
          await shot(p, `phone-${s}`);
        }
      }
    }
    await p.setViewportSize({ width: 1280, height: 800 });
    expect(app.errors()).toEqual([]);
  });

  it("light theme: phone and desktop screenshots of every screen", async () => {
    const p = await freshPage();
    await p.emulateMedia({ colorScheme: "light" });
    await finishedChat(p);
    for (const s of screens) {
      await p.setViewportSize({ width: 1280, height: 800 });
      await openScreen(p, s);
      expect(await p.evaluate(() => getComputedStyle(document.documentElement).colorScheme)).toBe("light");
      await shot(p, `desktop-${s}-light`);
      await p.setViewportSize({ width: 390, height: 844 });
      await shot(p, `phone-${s}-light`);
    }
    await p.setViewportSize({ width: 1280, height: 800 });
    expect(app.errors()).toEqual([]);
  });

  it("an error banner keeps the composer on a 390x844 screen and stays on the screen it belongs to", async () => {
    const p = await freshPage();
    await p.setViewportSize({ width: 390, height: 844 });
    await finishedChat(p);
    await p.evaluate(() => { (window as unknown as { __FAIL_COMMAND__: Record<string, string> }).__FAIL_COMMAND__.generate =
      "the model file was moved while the app was running; import it again from the Models screen"; });
    await p.getByTestId("prompt").fill("What is 2+2?");
    await p.getByTestId("send").click();
    const banner = p.getByTestId("error-banner");
    await expect.poll(() => banner.count()).toBe(1);
    expect(await banner.textContent()).toContain("the model file was moved");
    // The failed prompt is given back, and Send and the prompt are fully on screen above the tab bar.
    await expect.poll(() => p.getByTestId("prompt").inputValue()).toBe("What is 2+2?");
    const inView = await p.evaluate(() => {
      const bar = document.querySelector("[data-testid=tabbar]")?.getBoundingClientRect();
      const limit = Math.min(window.innerHeight, bar?.top ?? Infinity);
      return ["send", "prompt", "error-banner"].map((id) => {
        const r = document.querySelector(`[data-testid=${id}]`)?.getBoundingClientRect();
        return r ? { id, inside: r.top >= 0 && r.left >= 0 && r.bottom <= limit + 0.5 && r.right <= window.innerWidth + 0.5 } : { id, inside: false };
      });
    });
    expect(inView).toEqual([{ id: "send", inside: true }, { id: "prompt", inside: true }, { id: "error-banner", inside: true }]);
    await shot(p, "phone-chat-error");

    // Leaving the screen clears its error; it does not follow the user.
    await openTab(p, "models");
    expect(await banner.count()).toBe(0);
    await openTab(p, "chat");
    expect(await banner.count()).toBe(0);

    // An error on another screen shows there, is dismissed by its button or by leaving the screen.
    await openTab(p, "models");
    await p.locator("[data-testid=import-advanced] summary").click();
    await p.getByTestId("import-path").fill("/data/missing-model");
    await p.getByTestId("import").click();
    await expect.poll(() => banner.textContent()).toContain("no model at /data/missing-model");
    await p.getByTestId("dismiss-error").click();
    expect(await banner.count()).toBe(0);
    await p.getByTestId("import").click();
    await expect.poll(() => banner.count()).toBe(1);
    await openTab(p, "settings");
    expect(await banner.count()).toBe(0);
    await openTab(p, "models");
    expect(await banner.count()).toBe(0);
    await p.setViewportSize({ width: 1280, height: 800 });
    expect(app.errors()).toEqual([]);
  });

  it("step replay controls are labelled icons, not font glyphs", async () => {
    const p = await freshPage();
    await finishedChat(p);
    const replay = p.getByTestId("replay").first();
    for (const [id, name] of [["first-step", "First step"], ["prev-step", "Previous step"], ["next-step", "Next step"], ["last-step", "Last step"]]) {
      const b = replay.getByTestId(id);
      expect(await b.getAttribute("aria-label")).toBe(name);
      expect(await b.locator("svg path").count()).toBe(1);
      expect((await b.textContent())?.trim()).toBe("");
    }
    const total = await replay.getByTestId("scrubber").getAttribute("max");
    await replay.getByTestId("first-step").click();
    await expect.poll(() => replay.getByTestId("scrub-label").textContent()).toBe(`step 0 / ${total}`);
    await replay.getByTestId("next-step").click();
    await expect.poll(() => replay.getByTestId("scrub-label").textContent()).toBe(`step 1 / ${total}`);
    await replay.getByTestId("last-step").click();
    await expect.poll(() => replay.getByTestId("scrub-label").textContent()).toBe(`step ${total} / ${total}`);
    expect(app.errors()).toEqual([]);
  });

  it("keyboard focus is shown with a ring in both colour schemes", async () => {
    const p = await freshPage();
    for (const scheme of ["dark", "light"] as const) {
      await p.emulateMedia({ colorScheme: scheme });
      await p.keyboard.press("Tab");
      const ring = await p.evaluate(() => {
        const e = document.activeElement as HTMLElement;
        const cs = getComputedStyle(e);
        return { tag: e.tagName, style: cs.outlineStyle, width: parseFloat(cs.outlineWidth) };
      });
      expect(ring).toMatchObject({ tag: "BUTTON", style: "solid" });
      expect(ring.width).toBeGreaterThanOrEqual(2);
    }
    expect(app.errors()).toEqual([]);
  });
});
