// A conversation as a file people keep: Markdown to read, JSON to process. Pure functions; the
// download itself is `downloadText`.
import type { ConversationDetail } from "./bindings";

/** What the JSON export holds (its `format` and `version` say what reads it back). */
export type ConversationExport = {
  format: "unmask-conversation";
  version: 1;
  conversation: { id: number; title: string; systemPrompt: string | null; modelId: number | null; updatedMs: number };
  messages: { role: "user" | "assistant"; content: string; runId: number | null; createdMs: number }[];
};

const speaker = (role: "user" | "assistant") => (role === "user" ? "You" : "Model");
const iso = (ms: number) => new Date(ms).toISOString();

/** The conversation as Markdown: title, system prompt, then each turn under its speaker. */
export function conversationMarkdown(detail: ConversationDetail): string {
  const c = detail.conversation;
  const parts = [`# ${oneLine(c.title)}`, `_Last updated ${iso(c.updatedMs)}_`];
  if (c.systemPrompt) parts.push(`**System prompt**\n\n${quote(c.systemPrompt)}`);
  for (const m of detail.messages) {
    parts.push(`## ${speaker(m.role)}\n\n${m.content.trim() === "" ? "_(empty)_" : m.content.trim()}`);
  }
  return parts.join("\n\n") + "\n";
}

/** The conversation as JSON (pretty-printed). */
export function conversationJson(detail: ConversationDetail): string {
  const c = detail.conversation;
  const out: ConversationExport = {
    format: "unmask-conversation",
    version: 1,
    conversation: { id: c.id, title: c.title, systemPrompt: c.systemPrompt, modelId: c.modelId, updatedMs: c.updatedMs },
    messages: detail.messages.map((m) => ({ role: m.role, content: m.content, runId: m.runId, createdMs: m.createdMs })),
  };
  return JSON.stringify(out, null, 2) + "\n";
}

/** A file name from a title: lower-case letters, digits and dashes, never empty. */
export function exportFileName(title: string, extension: "md" | "json"): string {
  const stem = title
    .normalize("NFKD")
    .replace(/[\u0300-\u036f]/g, "")
    .toLowerCase()
    .replace(/[^a-z0-9]+/g, "-")
    .replace(/^-+|-+$/g, "")
    .slice(0, 60)
    .replace(/-+$/, "");
  return `${stem || "conversation"}.${extension}`;
}

function oneLine(s: string): string {
  return s.replace(/\s+/g, " ").trim();
}
function quote(s: string): string {
  return s.trim().split("\n").map((l) => (l === "" ? ">" : `> ${l}`)).join("\n");
}
