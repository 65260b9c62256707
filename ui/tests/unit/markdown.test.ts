import { describe, expect, it } from "vitest";
import { isSafeHref, renderMarkdown } from "../../src/lib/markdown";

/** Renders into a detached element, as the component does. */
function dom(text: string): HTMLElement {
  const div = document.createElement("div");
  div.innerHTML = renderMarkdown(text);
  return div;
}

describe("markdown rendering", () => {
  it("paragraphs, emphasis, lists and inline code", () => {
    const d = dom("First *soft* and **strong**.\n\nSecond with `x + 1`.\n\n- one\n- two\n\n1. a\n2. b");
    expect([...d.querySelectorAll("p")].map((p) => p.textContent)).toEqual(["First soft and strong.", "Second with x + 1."]);
    expect(d.querySelector("em")?.textContent).toBe("soft");
    expect(d.querySelector("strong")?.textContent).toBe("strong");
    expect(d.querySelector("p code")?.textContent).toBe("x + 1");
    expect([...d.querySelectorAll("ul li")].map((li) => li.textContent)).toEqual(["one", "two"]);
    expect([...d.querySelectorAll("ol li")].map((li) => li.textContent)).toEqual(["a", "b"]);
  });

  it("a single newline is a line break", () => {
    const d = dom("line one\nline two");
    expect(d.querySelectorAll("br").length).toBe(1);
  });

  it("fenced code blocks keep their text and language, unparsed", () => {
    const d = dom("```rust\nfn main() { let x = a < b && *c*; }\n```");
    const code = d.querySelector("pre > code");
    expect(code?.textContent).toBe("fn main() { let x = a < b && *c*; }\n");
    expect(code?.className).toBe("language-rust");
    expect(d.querySelector("em")).toBeNull();
  });

  it("safe links open outside the app window", () => {
    const a = dom("See [the docs](https://example.com/a?b=1 \"Docs\").").querySelector("a");
    expect(a?.getAttribute("href")).toBe("https://example.com/a?b=1");
    expect(a?.getAttribute("target")).toBe("_blank");
    expect(a?.getAttribute("rel")).toBe("noopener noreferrer nofollow");
    expect(a?.getAttribute("title")).toBe("Docs");
    expect(dom("<https://example.org>").querySelector("a")?.getAttribute("href")).toBe("https://example.org");
  });

  it("raw HTML is text, never markup", () => {
    const d = dom('Hi <img src=x onerror="alert(1)"> and <script>alert(2)</script><b>bold</b>');
    expect(d.querySelector("img")).toBeNull();
    expect(d.querySelector("script")).toBeNull();
    expect(d.querySelector("b")).toBeNull();
    expect(d.textContent).toContain('<img src=x onerror="alert(1)">');
    expect(d.textContent).toContain("<b>bold</b>");
    expect(d.innerHTML).not.toMatch(/<img|<script|<b>/i);
  });

  it("HTML blocks are text too", () => {
    const d = dom('<div onclick="steal()">\n<iframe src="https://evil.example"></iframe>\n</div>');
    expect(d.querySelector("div, iframe")).toBeNull();
    expect(d.textContent).toContain("<iframe");
  });

  it("javascript:, data: and other unsafe links lose their target but keep their text", () => {
    for (const href of ["javascript:alert(1)", "JaVaScRiPt:alert(1)", "data:text/html,<script>alert(1)</script>",
      "vbscript:msgbox(1)", "file:///etc/passwd", "/relative", "java\tscript:alert(1)"]) {
      const d = dom(`[click me](${href})`);
      expect(d.textContent, href).toContain("click me");
      expect(d.querySelector("a[href]"), href).toBeNull();
      expect(d.innerHTML, href).not.toMatch(/javascript:|data:|vbscript:|file:/i);
    }
    expect(dom("<javascript:alert(1)>").querySelector("a[href]")).toBeNull();
  });

  it("images are shown as their alt text (no remote loads)", () => {
    const d = dom('![a cat](https://example.com/cat.png) ![x](x" onerror="alert(1))');
    expect(d.querySelector("img")).toBeNull();
    expect(d.textContent).toContain("a cat");
  });

  it("only web and mail links count as safe", () => {
    expect(isSafeHref("https://a.b")).toBe(true);
    expect(isSafeHref("http://a.b")).toBe(true);
    expect(isSafeHref("mailto:x@y.z")).toBe(true);
    expect(isSafeHref(" javascript:alert(1)")).toBe(false);
    expect(isSafeHref("ftp://a.b")).toBe(false);
  });

  it("plain text stays as it was", () => {
    expect(dom("933").textContent?.trim()).toBe("933");
    expect(dom("3?1556").textContent?.trim()).toBe("3?1556");
    expect(dom("").textContent).toBe("");
  });
});
