import { describe, expect, it } from "vitest";
import type { ConversationDetail } from "../../src/lib/bindings";
import { conversationJson, conversationMarkdown, exportFileName, type ConversationExport } from "../../src/lib/export";

const detail: ConversationDetail = {
  conversation: { id: 7, title: "Sums  of\nnumbers", modelId: 1, updatedMs: Date.UTC(2026, 11, 2, 10, 0, 0),
    systemPrompt: "Answer with a number.\n\nNothing else." },
  messages: [
    { id: 1, role: "user", content: "What is 347+586?", runId: null, createdMs: 1 },
    { id: 2, role: "assistant", content: "933\n\n```\n347+586=933\n```", runId: 42, createdMs: 2 },
    { id: 3, role: "user", content: "  ", runId: null, createdMs: 3 },
  ],
};

describe("conversation export", () => {
  it("Markdown: title, system prompt as a quote, turns under their speaker", () => {
    expect(conversationMarkdown(detail)).toBe(
      "# Sums of numbers\n\n" +
      "_Last updated 2026-12-02T10:00:00.000Z_\n\n" +
      "**System prompt**\n\n> Answer with a number.\n>\n> Nothing else.\n\n" +
      "## You\n\nWhat is 347+586?\n\n" +
      "## Model\n\n933\n\n```\n347+586=933\n```\n\n" +
      "## You\n\n_(empty)_\n",
    );
  });

  it("Markdown without a system prompt has no such section", () => {
    const md = conversationMarkdown({ ...detail, conversation: { ...detail.conversation, systemPrompt: null } });
    expect(md).not.toContain("System prompt");
  });

  it("JSON keeps every field, exactly", () => {
    const parsed = JSON.parse(conversationJson(detail)) as ConversationExport;
    expect(parsed).toEqual({
      format: "unmask-conversation",
      version: 1,
      conversation: { id: 7, title: "Sums  of\nnumbers", systemPrompt: "Answer with a number.\n\nNothing else.", modelId: 1,
        updatedMs: Date.UTC(2026, 11, 2, 10, 0, 0) },
      messages: [
        { role: "user", content: "What is 347+586?", runId: null, createdMs: 1 },
        { role: "assistant", content: "933\n\n```\n347+586=933\n```", runId: 42, createdMs: 2 },
        { role: "user", content: "  ", runId: null, createdMs: 3 },
      ],
    });
  });

  it("file names are safe and never empty", () => {
    expect(exportFileName("What is 347+586?", "md")).toBe("what-is-347-586.md");
    expect(exportFileName("Café / résumé", "json")).toBe("cafe-resume.json");
    expect(exportFileName("../../etc/passwd", "md")).toBe("etc-passwd.md");
    expect(exportFileName("???", "json")).toBe("conversation.json");
    expect(exportFileName("x".repeat(100), "md")).toBe("x".repeat(60) + ".md");
  });
});
