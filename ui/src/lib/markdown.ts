// Message text as Markdown: parsed by `marked`, raw HTML shown as text, then sanitised by
// DOMPurify as a second line of defence before it reaches `{@html}`.
import { Marked, type Tokens } from "marked";
import DOMPurify from "dompurify";

/** Link targets a click may open: the web and mail, nothing that runs code or reads files. */
const SAFE_HREF = /^(?:https?:\/\/|mailto:)/i;

export function isSafeHref(href: string): boolean {
  return SAFE_HREF.test(href.trim());
}

const HTML_ESCAPES: Record<string, string> = { "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" };
function escapeHtml(s: string): string {
  return s.replace(/[&<>"']/g, (c) => HTML_ESCAPES[c]);
}

const marked = new Marked({
  async: false,
  gfm: true,
  // Chat text: a single newline is a line break, as people type it.
  breaks: true,
  renderer: {
    // A model (or a user) writing HTML sees it as text; it is never parsed as markup.
    html({ text }: Tokens.HTML | Tokens.Tag) {
      return escapeHtml(text);
    },
    // Unsafe or relative targets keep their text and lose the link.
    link(token: Tokens.Link) {
      if (isSafeHref(token.href)) return false;
      return this.parser.parseInline(token.tokens);
    },
    // No remote loads from a message (the app is offline, and an image URL can track): the alt text.
    image({ text }: Tokens.Image) {
      return escapeHtml(text);
    },
  },
});

let purifier: ReturnType<typeof DOMPurify> | null = null;
/** A DOMPurify of our own, so its link hook does not leak into other users of the library. */
function getPurifier(): ReturnType<typeof DOMPurify> {
  if (purifier) return purifier;
  const p = DOMPurify(window);
  p.addHook("afterSanitizeAttributes", (node) => {
    if (node.tagName !== "A") return;
    const href = node.getAttribute("href") ?? "";
    if (!isSafeHref(href)) {
      node.removeAttribute("href");
      return;
    }
    // Never navigate the app's own window; no opener or referrer for the page opened.
    node.setAttribute("target", "_blank");
    node.setAttribute("rel", "noopener noreferrer nofollow");
  });
  purifier = p;
  return p;
}

/** Tags Markdown produces; anything else is dropped by the sanitiser. */
const ALLOWED_TAGS = ["p", "br", "em", "strong", "del", "code", "pre", "blockquote", "ul", "ol", "li", "a", "h1", "h2",
  "h3", "h4", "h5", "h6", "hr", "table", "thead", "tbody", "tr", "th", "td", "input"];
const ALLOWED_ATTR = ["href", "title", "class", "start", "align", "type", "checked", "disabled"];

/** Renders message text to sanitised HTML. */
export function renderMarkdown(text: string): string {
  const html = marked.parse(text) as string;
  return getPurifier().sanitize(html, { ALLOWED_TAGS, ALLOWED_ATTR, ALLOWED_URI_REGEXP: SAFE_HREF });
}
