// The colour tokens of both themes meet WCAG AA contrast, and the page frame is set up for phones.
import fs from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";

const ui = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../..");
const css = fs.readFileSync(path.join(ui, "src/app.css"), "utf8");
const html = fs.readFileSync(path.join(ui, "index.html"), "utf8");

/** The custom properties declared in a CSS block's text. */
function tokens(block: string): Record<string, string> {
  return Object.fromEntries([...block.matchAll(/(--[\w-]+):\s*([^;]+);/g)].map((m) => [m[1], m[2].trim()]));
}
const rootBlock = /^:root\s*\{([^}]*)\}/m.exec(css)?.[1] ?? "";
const lightBlock = /@media \(prefers-color-scheme: light\)\s*\{\s*:root\s*\{([^}]*)\}/.exec(css)?.[1] ?? "";
const dark = tokens(rootBlock);
const light = { ...dark, ...tokens(lightBlock) };

/** WCAG 2.x contrast ratio of two #rrggbb colours. */
function contrast(a: string, b: string): number {
  const lum = (hex: string) => {
    const [r, g, bl] = [1, 3, 5].map((i) => parseInt(hex.slice(i, i + 2), 16) / 255)
      .map((c) => (c <= 0.03928 ? c / 12.92 : ((c + 0.055) / 1.055) ** 2.4));
    return 0.2126 * r + 0.7152 * g + 0.0722 * bl;
  };
  const [x, y] = [lum(a), lum(b)].sort((p, q) => q - p);
  return (x + 0.05) / (y + 0.05);
}

const surfaces = ["--bg", "--panel", "--panel2"];
const text = ["--fg", "--muted", "--accent", "--ok", "--bad", "--warn", "--npu", "--cpu"];
const pairs: [string, string, number][] = [
  ...text.flatMap((t) => surfaces.map((s): [string, string, number] => [t, s, 4.5])),
  ...["--control-line", "--focus"].flatMap((t) => surfaces.map((s): [string, string, number] => [t, s, 3])),
  ["--on-accent", "--accent-bg", 4.5],
  ["--masked-fg", "--masked-bg", 4.5],
  ["--banner-fg", "--banner-bg", 4.5],
  ["--fg", "--user-bg", 4.5], ["--muted", "--user-bg", 4.5], ["--accent", "--user-bg", 4.5],
  ["--fg", "--active-bg", 4.5],
  ["--slice-label", "--npu-fill", 4.5], ["--slice-label", "--cpu-fill", 4.5], ["--slice-label", "--dma-fill", 4.5],
];

describe("colour tokens", () => {
  for (const [name, theme] of [["dark", dark], ["light", light]] as const) {
    it(`${name} theme: text >= 4.5:1 and control outlines >= 3:1 on every surface`, () => {
      const failing = pairs
        .map(([fg, bg, min]) => ({ fg, bg, min, ratio: contrast(theme[fg] ?? "", theme[bg] ?? "") }))
        .filter((p) => !(p.ratio >= p.min))
        .map((p) => `${p.fg} on ${p.bg}: ${p.ratio.toFixed(2)} < ${p.min}`);
      expect(failing).toEqual([]);
    });
  }

  it("the light theme overrides every colour of the dark one", () => {
    const colours = Object.keys(dark).filter((k) => /^#|^rgba?\(/.test(dark[k]));
    expect(colours.filter((k) => !(k in tokens(lightBlock)))).toEqual([]);
  });

  it("rules outside the token blocks take colours only from variables", () => {
    const rules = css.replace(rootBlock, "").replace(lightBlock, "").replace(/\/\*[\s\S]*?\*\//g, "");
    expect(rules.match(/#[0-9a-f]{3,8}\b|rgba?\([^)]*\)/gi) ?? []).toEqual([]);
  });
});

describe("page frame on phones", () => {
  it("draws edge to edge and pads with the safe-area insets", () => {
    expect(html).toMatch(/<meta name="viewport" content="[^"]*viewport-fit=cover/);
    for (const side of ["top", "right", "bottom", "left"]) expect(css).toContain(`env(safe-area-inset-${side})`);
    expect(css).toContain("100dvh");
  });
});
