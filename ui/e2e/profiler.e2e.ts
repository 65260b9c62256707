// End-to-end: the profiler and Compare screens as a user reads them, at desktop and phone sizes.
import { describe, expect, it } from "vitest";
import type { Locator, Page } from "playwright-core";
import { formatEnergy } from "../src/lib/format";
import { loadFixtures, type RecordedRun } from "../tests/fixtures";
import { PHONE, pageOverflow, shot, tab, useApp } from "./harness";

const fixtures = loadFixtures();
const byBackend = (kind: "cpu" | "vnpu"): RecordedRun | null =>
  fixtures.find((f) => f.run.request.backend.kind === kind)?.run ?? null;

const app = useApp({ stepMs: 40, dlTicks: 30 });
const freshPage = app.freshPage;

/** The mock seeds one run per fixture, in fixture order; run lists show the newest first. */
const listIndex = (run: RecordedRun) => fixtures.length - 1 - fixtures.findIndex((f) => f.run === run);

async function openRun(p: Page, run: RecordedRun): Promise<void> {
  await tab(p, "profiler");
  await p.getByTestId("run-picker").waitFor();
  await expect.poll(() => p.locator("[data-testid=run-picker] option").count()).toBeGreaterThanOrEqual(fixtures.length);
  await p.getByTestId("run-picker").selectOption({ index: listIndex(run) });
  await expect.poll(() => p.getByTestId("run-picker").evaluate((e) => (e as HTMLSelectElement).selectedOptions[0]?.textContent ?? ""))
    .toContain(run.detail.summary.backend);
  await expect.poll(() => p.getByTestId("sim-time").textContent()).toBeTruthy();
  await p.getByTestId("timeline").first().waitFor();
}
async function center(l: Locator): Promise<{ x: number; y: number }> {
  const b = await l.boundingBox();
  if (!b) throw new Error("element has no box");
  return { x: b.x + b.width / 2, y: b.y + b.height / 2 };
}
/** The slice's name as its tooltip starts. */
async function sliceName(slice: Locator): Promise<string> {
  return ((await slice.locator("title").textContent()) ?? "").split(" · ")[0];
}
/** The first slice at `depth` in the NPU lane drawn at least `minW` px wide, or null. */
async function wideSlice(p: Page, depth: number, minW: number): Promise<Locator | null> {
  const i = await p.$$eval("[data-testid=slice]", (els, [d, w]) => els.findIndex((g) => {
    const r = g.querySelector("rect.slice");
    return g.getAttribute("data-depth") === String(d) && r?.classList.contains("npu") && r.getBoundingClientRect().width >= w;
  }), [depth, minW] as const);
  return i < 0 ? null : p.getByTestId("slice").nth(i);
}

describe("profiler", () => {
  it("vNPU run: nested operators one row lower, legend, explicit empty DMA lane, readable counters and energy", async () => {
    const run = byBackend("vnpu");
    if (!run?.detail.timeline) return;
    const tl = run.detail.timeline;
    const p = await freshPage();
    await openRun(p, run);

    // NPU, CPU and DMA lanes are always there; a lane without events says so.
    const kinds = await p.$$eval("[data-testid=lane]", (els) => els.map((e) => e.getAttribute("data-lane-kind")));
    for (const k of ["npu", "cpu", "dma"]) expect(kinds).toContain(k);
    if (!tl.lanes.some((l) => l.kind === "dma")) {
      expect(await p.locator("[data-testid=lane][data-lane-kind=dma]").getAttribute("data-empty")).toBe("true");
      expect(await p.locator("[data-testid=lane][data-lane-kind=dma] [data-testid=empty-lane]").textContent())
        .toBe("no DMA transfers in this run");
    }

    // Operators sit one sub-row below their forward pass: two distinct rows in the NPU lane,
    // and no two slices of a row overlap.
    const npuRows = await p.$$eval("[data-testid=slice]", (els) => {
      const rows = new Map<number, [number, number][]>();
      for (const g of els) {
        const r = g.querySelector("rect.slice.npu");
        if (!r) continue;
        const y = Number(r.getAttribute("y"));
        const x = Number(r.getAttribute("x"));
        const list = rows.get(y) ?? [];
        list.push([x, x + Number(r.getAttribute("width"))]);
        rows.set(y, list);
      }
      return [...rows.entries()].map(([y, spans]) => ({ y, spans }));
    });
    expect(npuRows.length).toBe(2);
    expect(await p.locator("[data-testid=slice][data-depth='1']").count()).toBeGreaterThan(0);

    // Legend: lane colours, what lighter and hatched mean.
    const legend = (await p.getByTestId("legend").textContent()) ?? "";
    expect(legend).toContain("NPU");
    expect(legend).toContain("DMA");
    expect(legend).toContain("hatched: simulated");

    // Counters: readable names with units and labelled axes, never the raw trace names.
    const labels = await p.getByTestId("counter-label").allTextContents();
    expect(labels.length).toBe(tl.counters.length);
    for (const l of labels) expect(l).not.toMatch(/_/);
    if (tl.counters.some((c) => c.name === "npu_visible_bytes")) expect(labels).toContain("NPU-visible memory");
    const caption = (await p.locator("[data-testid=counter] figcaption").allTextContents()).join(" ");
    expect(caption).not.toContain("energy_active_j");
    for (const x of await p.getByTestId("counter-x").allTextContents()) expect(x).toContain("simulated time");
    for (const y of await p.getByTestId("counter-y").allTextContents()) expect(y.trim()).not.toBe("");

    // Energy: the total (with NPU idle power) and the active part the counter adds up, side by side.
    const active = tl.counters.find((c) => c.name === "energy_active_j");
    if (tl.energyJ !== null && active) {
      expect(await p.getByTestId("energy").textContent()).toBe(formatEnergy(tl.energyJ));
      const activeJ = active.points[active.points.length - 1][1];
      expect(await p.getByTestId("energy-active").textContent()).toBe(formatEnergy(activeJ));
      expect(await p.getByTestId("energy-note").textContent()).toContain("NPU idle");
      expect(await p.getByTestId("energy-card").textContent()).toContain("total");
    }
    // Every time is labelled simulated or measured.
    expect(await p.locator(".cards").textContent()).toMatch(/measured.*simulated/s);

    // Steps: "revised" counts only replaced tokens (the engine flags them), never drafts of later
    // blocks or promotions; the totals row says what it is.
    const expected = run.detail.frames.map((f) => String(f.changes.filter((c) => c.revised && c.state !== "masked").length));
    expect(await p.getByTestId("revised").allTextContents()).toEqual(expected);
    expect(await p.locator("[data-testid=step-totals] th").textContent()).toContain("total");
    await shot(p, "profiler-desktop");
    expect(app.errors()).toEqual([]);
  });

  it("click selects a slice (drag still pans), details show its parent and share; the keyboard works too", async () => {
    const run = byBackend("vnpu");
    if (!run?.detail.timeline) return;
    const p = await freshPage();
    await openRun(p, run);
    const svg = p.getByTestId("timeline-svg");
    for (let i = 0; i < 7; i++) await p.getByTestId("zoom-in").click();
    const op = await wideSlice(p, 1, 6);
    if (!op) throw new Error("no operator slice wide enough after zooming in");
    const name = await sliceName(op);
    const at = await center(op.locator("rect.slice"));
    await p.mouse.click(at.x, at.y);
    await expect.poll(() => p.getByTestId("detail-name").textContent()).toBe(name);
    expect(await p.getByTestId("detail-lane").textContent()).toContain("NPU");
    expect(await p.getByTestId("detail-kind").textContent()).toContain("simulated");
    expect(await p.getByTestId("detail-parent").textContent()).toMatch(/^forward/);
    expect(await p.getByTestId("detail-share").textContent()).toMatch(/%$/);
    expect(await p.getByTestId("selection").count()).toBe(1);
    await shot(p, "profiler-selected");

    // A drag pans and keeps the selection.
    const range = await p.getByTestId("view-range").textContent();
    const box = await svg.boundingBox();
    if (!box) throw new Error("no svg box");
    await p.mouse.move(box.x + box.width * 0.7, at.y);
    await p.mouse.down();
    await p.mouse.move(box.x + box.width * 0.4, at.y, { steps: 6 });
    await p.mouse.up();
    await expect.poll(() => p.getByTestId("view-range").textContent()).not.toBe(range);
    expect(await p.getByTestId("detail-name").textContent()).toBe(name);

    // Keyboard: arrows move along the row and up to the enclosing forward pass; Escape clears.
    await svg.focus();
    await p.keyboard.press("ArrowRight");
    await expect.poll(() => p.getByTestId("detail-name").textContent()).not.toBe(name);
    await p.keyboard.press("ArrowUp");
    await expect.poll(() => p.getByTestId("detail-name").textContent()).toMatch(/^forward/);
    await p.keyboard.press("Escape");
    await expect.poll(() => p.getByTestId("detail-name").count()).toBe(0);
    // Keyboard zoom.
    const before = await p.getByTestId("view-range").textContent();
    await p.keyboard.press("0");
    await expect.poll(() => p.getByTestId("view-range").textContent()).not.toBe(before);
    expect(app.errors()).toEqual([]);
  });

  it("CPU run: says which lanes exist and why; everything is measured", async () => {
    const run = byBackend("cpu");
    if (!run?.detail.timeline) return;
    const p = await freshPage();
    await openRun(p, run);
    expect(await p.getByTestId("lane").count()).toBe(run.detail.timeline.lanes.length);
    expect(await p.getByTestId("time-kind").textContent()).toContain("measured");
    const legend = (await p.getByTestId("legend").textContent()) ?? "";
    expect(legend).toContain("CPU backend");
    expect(legend).toContain("virtual NPU");
    expect(await p.getByTestId("sim-time").textContent()).toBe("–");
    expect(await p.getByTestId("energy-card").textContent()).toContain("not measured");
    for (const x of await p.getByTestId("counter-x").allTextContents()) expect(x).toContain("measured time");
    expect(app.errors()).toEqual([]);
  });

  it("phone (390 px): no page overflow, the timeline fits its box, tap selects, the steps table scrolls inside its box", async () => {
    const p = await freshPage(PHONE);
    for (const f of fixtures) {
      await openRun(p, f.run);
      expect(await pageOverflow(p)).toBeLessThanOrEqual(0);
      const svgBox = await p.getByTestId("timeline-svg").boundingBox();
      const outer = await p.getByTestId("timeline").boundingBox();
      if (!svgBox || !outer) throw new Error("no timeline box");
      expect(svgBox.x + svgBox.width).toBeLessThanOrEqual(outer.x + outer.width + 0.5);
      expect(svgBox.width).toBeLessThanOrEqual(PHONE.width);
      // Drawn at its real pixel width (not a 900 px drawing scaled down), so labels keep their size.
      const drawn = Number(await p.getByTestId("timeline-svg").getAttribute("width"));
      expect(Math.abs(drawn - svgBox.width)).toBeLessThanOrEqual(1);
      // The step table is wider than the phone but scrolls inside its own box.
      const table = await p.getByTestId("step-table-box").evaluate((e) => ({ sw: e.scrollWidth, cw: e.clientWidth,
        right: e.getBoundingClientRect().right }));
      expect(table.right).toBeLessThanOrEqual(PHONE.width);
    }
    const run = byBackend("vnpu");
    if (run?.detail.timeline) {
      await openRun(p, run);
      // Tap (touch pointer, no mouse) on a forward pass selects it.
      const fwd = await wideSlice(p, 0, 4);
      if (!fwd) throw new Error("no forward slice to tap");
      const name = await sliceName(fwd);
      const at = await center(fwd.locator("rect.slice"));
      const svg = p.getByTestId("timeline-svg");
      const init = { pointerId: 7, pointerType: "touch", isPrimary: true, clientX: at.x, clientY: at.y, bubbles: true };
      await svg.dispatchEvent("pointerdown", init);
      await svg.dispatchEvent("pointerup", init);
      await expect.poll(() => p.getByTestId("detail-name").textContent()).toBe(name);
      await p.getByTestId("slice-detail").scrollIntoViewIfNeeded();
      expect(await pageOverflow(p)).toBeLessThanOrEqual(0);
      await shot(p, "profiler-phone");
    }
    expect(app.errors()).toEqual([]);
  });
});

describe("compare", () => {
  /** Compares the first two listed runs; returns their fixtures in column order. */
  async function compareFixtures(p: Page): Promise<RecordedRun[]> {
    await tab(p, "compare");
    const checks = p.getByTestId("run-check");
    await expect.poll(() => checks.count()).toBe(fixtures.length);
    for (let i = 0; i < Math.min(2, fixtures.length); i++) await checks.nth(i).check();
    await p.getByTestId("compare").click();
    await expect.poll(() => p.getByTestId("compare-head").count()).toBe(Math.min(2, fixtures.length));
    const picked = [fixtures[fixtures.length - 1].run, fixtures[fixtures.length - 2].run];
    const heads = await p.getByTestId("compare-head").allTextContents();
    heads.forEach((h, i) => expect(h).toContain(picked[i].detail.summary.backend));
    return picked;
  }

  it("one table with a column per run: kinds labelled, best only within a kind, ratios and settings diff", async () => {
    if (fixtures.length < 2) return;
    const p = await freshPage();
    const picked = await compareFixtures(p);
    const [a, b] = picked.map((r) => r.detail.summary);
    const kind = (s: typeof a) => (s.simulatedS !== null ? "simulated" : "measured");

    // Latency: each cell says how it was obtained; a simulated value never "wins" over a measured one.
    const latency = p.locator("[data-testid=metric-row][data-metric=latency] [data-testid=metric-cell]");
    expect(await latency.evaluateAll((els) => els.map((e) => e.getAttribute("data-kind")))).toEqual([kind(a), kind(b)]);
    const cells = await latency.allTextContents();
    expect(cells[0]).toContain(kind(a));
    expect(cells[1]).toContain(kind(b));
    if (kind(a) !== kind(b)) {
      expect(await p.locator("[data-testid=metric-row][data-metric=latency] td.best").count()).toBe(0);
    }

    // Ratios against the first run, only between the same kind.
    const ratios = await p.getByTestId("ratio-row").evaluateAll((rows) => rows.map((r) => [
      r.querySelector("th")?.textContent ?? "", ...[...r.querySelectorAll("td")].map((td) => td.textContent ?? "")]));
    const row = (label: string) => ratios.find((r) => r[0].startsWith(label));
    const timeRatio = row("latency ÷ first")?.[2];
    if (kind(a) !== kind(b)) expect(timeRatio).toBe(`– (${kind(b)} vs ${kind(a)})`);
    else expect(timeRatio).toMatch(/×$/);
    if (a.forwards && b.forwards) expect(row("forwards ÷ first")?.[2]).toBe(`${(b.forwards / a.forwards).toFixed(2)}×`);
    if (a.wallS && b.wallS) expect(row("wall ÷ first")?.[2]).toBe(`${(b.wallS / a.wallS).toFixed(2)}×`);

    // Settings diff: exactly the keys that differ.
    const differ = Object.keys(a.settings).filter((k) =>
      JSON.stringify((a.settings as Record<string, unknown>)[k]) !== JSON.stringify((b.settings as Record<string, unknown>)[k])).sort();
    const shown = await p.getByTestId("diff-row").evaluateAll((rows) => rows.map((r) => r.getAttribute("data-key")));
    expect(shown).toEqual(differ);

    // One shared time axis: every timeline has the same tick labels at the same x.
    const axes = await p.$$eval("[data-testid=compare-timelines] [data-testid=timeline-svg]", (svgs) =>
      svgs.map((s) => [...s.querySelectorAll("text.tick")].slice(1).map((t) => `${t.textContent}@${t.getAttribute("x")}`)));
    expect(axes.length).toBe(picked.filter((r) => r.detail.timeline).length);
    for (const ax of axes) expect(ax).toEqual(axes[0]);
    await p.getByTestId("compare-table").scrollIntoViewIfNeeded();
    await shot(p, "compare-desktop");
    // Zooming one zooms all.
    await p.getByTestId("shared-zoom-in").click();
    const zoomed = await p.$$eval("[data-testid=compare-timelines] [data-testid=timeline-svg]", (svgs) =>
      svgs.map((s) => [...s.querySelectorAll("text.tick")].slice(1).map((t) => t.textContent).join(",")));
    for (const z of zoomed) expect(z).toBe(zoomed[0]);
    expect(zoomed[0]).not.toBe(axes[0].map((t) => t.split("@")[0]).join(","));
    expect(app.errors()).toEqual([]);
  });

  it("phone (390 px): the metrics stay side by side in one table and the page does not overflow", async () => {
    if (fixtures.length < 2) return;
    const p = await freshPage(PHONE);
    await compareFixtures(p);
    const heads = p.getByTestId("compare-head");
    const h0 = await heads.nth(0).boundingBox();
    const h1 = await heads.nth(1).boundingBox();
    if (!h0 || !h1) throw new Error("no head boxes");
    expect(Math.abs(h0.y - h1.y)).toBeLessThan(2);
    expect(h1.x).toBeGreaterThan(h0.x + h0.width - 1);
    expect(h1.x + h1.width).toBeLessThanOrEqual(PHONE.width);
    expect(await pageOverflow(p)).toBeLessThanOrEqual(0);
    await p.getByTestId("compare-table").scrollIntoViewIfNeeded();
    await shot(p, "compare-phone");
    await p.getByTestId("compare-timelines").scrollIntoViewIfNeeded();
    expect(await pageOverflow(p)).toBeLessThanOrEqual(0);
    await shot(p, "compare-phone-timelines");
    expect(app.errors()).toEqual([]);
  });
});
