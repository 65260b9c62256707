// End-to-end: the conversation around the chat (system prompt, Markdown, rename, search, export,
// delete with confirmation) at desktop size and on a 390 px phone, IPC mocked as in app.e2e.ts.
import fs from "node:fs";
import { describe, expect, it } from "vitest";
import type { Page } from "playwright-core";
import type { ConversationExport } from "../src/lib/export";
import { DESKTOP, PHONE, pageOverflow, shot, useApp } from "./harness";

const app = useApp({ stepMs: 5, dlTicks: 10 });
const freshPage = app.freshPage;

const CODE_PROMPT = "Explain this:\n\n```js\nconst answer = [347, 586].reduce((a, b) => a + b, 0); // a long line that must scroll inside its block, not widen the page\n```";

type Call = { cmd: string; args: Record<string, unknown> };
const calls = (p: Page, cmd: string) =>
  p.evaluate((c) => window.__UNMASK_CALLS__.filter((x) => x.cmd === c), cmd) as Promise<Call[]>;
type SentRequest = { prompt: string; conversationId: number | null; systemPrompt: string | null };
const generateRequests = async (p: Page) => (await calls(p, "generate")).map((c) => c.args.request as SentRequest);

/** Sends `text` and waits until the answer is in the conversation. */
async function sendAndWait(p: Page, text: string) {
  const before = await p.getByTestId("msg-assistant").count();
  const sent = (await calls(p, "generate")).length;
  await p.getByTestId("prompt").fill(text);
  await p.getByTestId("send").click();
  await expect.poll(async () => (await calls(p, "generate")).length).toBe(sent + 1);
  // A new chat starts from zero answers; an open one gains one.
  await expect.poll(() => p.getByTestId("msg-assistant").count()).toBeGreaterThanOrEqual(before === 0 ? 1 : before + 1);
  await expect.poll(() => p.getByTestId("prompt").isEnabled()).toBe(true);
}
const titles = (p: Page) => p.locator("[data-testid=open-conversation]").allTextContents();

async function openActions(p: Page, title: string) {
  await p.locator("[data-testid=conversation]", { hasText: title }).getByTestId("conversation-actions").click();
}
async function download(p: Page, testId: string): Promise<{ name: string; text: string }> {
  const [d] = await Promise.all([p.waitForEvent("download"), p.getByTestId(testId).click()]);
  const path = await d.path();
  return { name: d.suggestedFilename(), text: fs.readFileSync(path, "utf8") };
}

describe("conversations (built, headless chromium, mocked IPC)", () => {
  it("desktop: system prompt, Markdown, rename, search, export and delete with confirmation", async () => {
    const p = await freshPage(DESKTOP);
    // A new chat's system prompt goes with its first message and is saved with the conversation.
    await p.getByTestId("system-prompt").locator("summary").click();
    await p.getByTestId("system-prompt-text").fill("Answer with a number only.");
    await sendAndWait(p, CODE_PROMPT);
    const [first] = await generateRequests(p);
    expect(first).toMatchObject({ conversationId: null, systemPrompt: "Answer with a number only." });
    await expect.poll(() => p.getByTestId("system-prompt-summary").textContent()).toBe("Answer with a number only.");

    // The user's fenced code block is a monospace block that scrolls inside itself.
    const user = p.getByTestId("msg-user").first();
    const code = user.locator("pre > code");
    await code.waitFor();
    expect(await code.textContent()).toContain("const answer = [347, 586]");
    const style = await user.locator("pre").evaluate((el) => {
      const s = getComputedStyle(el);
      return { overflowX: s.overflowX, font: getComputedStyle(el.querySelector("code") as Element).fontFamily,
        scrolls: el.scrollWidth > el.clientWidth };
    });
    expect(style.overflowX).toBe("auto");
    expect(style.font).toMatch(/mono/i);
    expect(await user.locator("p").first().textContent()).toBe("Explain this:");

    // Raw HTML in a message is text: no element, no script run.
    await sendAndWait(p, 'Hi <img src=x onerror="window.__xss = 1"> [x](javascript:window.__xss=2)');
    const last = p.getByTestId("msg-user").last();
    expect(await last.locator("img").count()).toBe(0);
    expect(await last.locator("a[href]").count()).toBe(0);
    expect(await last.textContent()).toContain("<img src=x");
    expect(await p.evaluate(() => (window as unknown as { __xss?: number }).__xss)).toBeUndefined();
    // The second turn of an open conversation sends the prompt as saved.
    expect((await generateRequests(p))[1]).toMatchObject({ systemPrompt: "Answer with a number only." });

    // Editing the system prompt of an open chat and saving it.
    await p.getByTestId("system-prompt-text").fill("Be brief.");
    expect(await p.getByTestId("system-prompt-summary").textContent()).toContain("(not saved)");
    await p.getByTestId("system-prompt-save").click();
    await expect.poll(() => p.getByTestId("system-prompt-summary").textContent()).toBe("Be brief.");
    const saved = await calls(p, "set_system_prompt");
    expect(saved.map((c) => c.args.systemPrompt)).toEqual(["Be brief."]);

    // A second conversation, then rename the first.
    await p.getByTestId("new-chat").click();
    // A new chat starts without a system prompt.
    expect(await p.getByTestId("system-prompt-text").inputValue()).toBe("");
    await sendAndWait(p, "What is 12+7?");
    expect((await generateRequests(p))[2]).toMatchObject({ conversationId: null, systemPrompt: "" });
    await expect.poll(() => titles(p)).toHaveLength(2);
    const firstTitle = (await titles(p)).find((t) => t.startsWith("Explain")) ?? "";
    await openActions(p, firstTitle);
    await p.getByTestId("rename-conversation").click();
    const input = p.getByTestId("rename-input");
    expect(await input.inputValue()).toBe(firstTitle);
    await input.fill("  Code   question ");
    await input.press("Enter");
    await expect.poll(() => titles(p)).toContain("Code question");
    expect((await calls(p, "rename_conversation")).map((c) => c.args.title)).toEqual(["  Code   question "]);
    // Escape leaves a rename without saving.
    await openActions(p, "Code question");
    await p.getByTestId("rename-conversation").click();
    await p.getByTestId("rename-input").fill("Never saved");
    await p.getByTestId("rename-input").press("Escape");
    expect(await titles(p)).toContain("Code question");
    await shot(p, "conversations");

    // Search: by title, by message text (in the store), nothing, then everything again.
    const search = p.getByTestId("conversation-search");
    await search.fill("code q");
    await expect.poll(() => titles(p)).toEqual(["Code question"]);
    await search.fill("12+7");
    await expect.poll(() => titles(p)).toEqual(["What is 12+7?"]);
    await search.fill("reduce((a, b)");
    await expect.poll(() => titles(p)).toEqual(["Code question"]);
    expect((await calls(p, "search_conversations")).map((c) => c.args.query)).toContain("reduce((a, b)");
    await search.fill("no such words");
    await expect.poll(() => p.locator("[data-testid=conversations] li").textContent()).toBe("No chat matches.");
    await shot(p, "conversations-search");
    await search.fill("");
    await expect.poll(() => titles(p)).toHaveLength(2);

    // Export: the downloaded files hold the conversation.
    await openActions(p, "Code question");
    const md = await download(p, "export-markdown");
    expect(md.name).toBe("code-question.md");
    expect(md.text).toContain("# Code question\n");
    expect(md.text).toContain("**System prompt**\n\n> Be brief.\n");
    expect(md.text).toContain("## You\n\nExplain this:\n\n```js\nconst answer");
    expect(md.text).toContain("## Model\n\n");
    const json = await download(p, "export-json");
    expect(json.name).toBe("code-question.json");
    const parsed = JSON.parse(json.text) as ConversationExport;
    expect(parsed.format).toBe("unmask-conversation");
    expect(parsed.conversation).toMatchObject({ title: "Code question", systemPrompt: "Be brief." });
    expect(parsed.messages.map((m) => m.role)).toEqual(["user", "assistant", "user", "assistant"]);
    expect(parsed.messages[0].content).toBe(CODE_PROMPT);

    // Delete asks first; Keep keeps it; Delete removes only that one.
    await openActions(p, "What is 12+7?");
    await p.getByTestId("delete-conversation").click();
    await p.getByTestId("confirm-delete-conversation").waitFor();
    expect(await p.getByTestId("conversation").filter({ hasText: "What is 12+7?" }).textContent()).toContain("Delete this chat?");
    await shot(p, "conversations-delete");
    await p.getByTestId("keep-conversation").click();
    expect(await calls(p, "delete_conversation")).toEqual([]);
    expect(await titles(p)).toHaveLength(2);
    await openActions(p, "What is 12+7?");
    await p.getByTestId("delete-conversation").click();
    await p.getByTestId("confirm-delete-conversation").click();
    await expect.poll(() => titles(p)).toEqual(["Code question"]);
    expect((await calls(p, "delete_conversation")).length).toBe(1);
    expect(app.errors()).toEqual([]);
  });

  it("phone (390 px): the list is a folding panel over the chat, 44 px targets, no sideways scrolling", async () => {
    const p = await freshPage(PHONE);
    // Folded: one bar, the chat below it gets the screen.
    expect(await p.getByTestId("conversations").isVisible()).toBe(false);
    const bar = await p.getByTestId("conversations-toggle").boundingBox();
    expect(bar?.height ?? 0).toBeGreaterThanOrEqual(44);
    expect(bar?.height ?? 0).toBeLessThan(80);

    await p.getByTestId("system-prompt").locator("summary").click();
    await p.getByTestId("system-prompt-text").fill("Reply in one line.");
    await sendAndWait(p, CODE_PROMPT);
    expect((await generateRequests(p))[0]).toMatchObject({ systemPrompt: "Reply in one line." });
    await p.getByTestId("system-prompt").locator("summary").click();
    // A long code line scrolls inside its block; the page stays 390 px wide.
    const pre = p.getByTestId("msg-user").first().locator("pre");
    await pre.waitFor();
    const box = await pre.evaluate((el) => ({ scrolls: el.scrollWidth > el.clientWidth, right: el.getBoundingClientRect().right }));
    expect(box.scrolls).toBe(true);
    expect(box.right).toBeLessThanOrEqual(390);
    expect(await pageOverflow(p)).toBeLessThanOrEqual(0);
    const messages = await p.getByTestId("messages").boundingBox();
    expect(messages?.height ?? 0).toBeGreaterThan(844 * 0.35);
    await shot(p, "conversations-phone");

    await sendAndWait(p, "What is 12+7?");
    await p.getByTestId("new-chat-bar").click();
    await sendAndWait(p, "What is 347+586?");

    // Unfolded: the list over the chat, every control at least 44 px high.
    await p.getByTestId("conversations-toggle").click();
    await p.getByTestId("conversations").waitFor();
    expect(await p.getByTestId("conversations-toggle").getAttribute("aria-expanded")).toBe("true");
    await expect.poll(() => titles(p)).toHaveLength(2);
    await openActions(p, "What is 347+586?");
    const controls = p.locator("#conversation-panel button:visible, #conversation-panel input:visible");
    const heights = await controls.evaluateAll((els) => els.map((e) => e.getBoundingClientRect().height));
    expect(heights.length).toBeGreaterThan(6);
    expect(Math.min(...heights)).toBeGreaterThanOrEqual(44);
    expect(await pageOverflow(p)).toBeLessThanOrEqual(0);
    await shot(p, "conversations-phone-panel");

    // Rename, search and delete with confirmation work on the phone too.
    await p.getByTestId("rename-conversation").click();
    await p.getByTestId("rename-input").fill("Sum");
    await p.getByTestId("rename-save").click();
    await expect.poll(() => titles(p)).toContain("Sum");
    await p.getByTestId("conversation-search").fill("sum");
    await expect.poll(() => titles(p)).toEqual(["Sum"]);
    await p.getByTestId("conversation-search").fill("");
    await expect.poll(() => titles(p)).toHaveLength(2);
    await openActions(p, "Sum");
    await p.getByTestId("delete-conversation").click();
    await p.getByTestId("confirm-delete-conversation").click();
    await expect.poll(() => titles(p)).toHaveLength(1);

    // Picking a chat folds the panel and shows it.
    await p.locator("[data-testid=open-conversation]").first().click();
    expect(await p.getByTestId("conversations").isVisible()).toBe(false);
    await expect.poll(() => p.getByTestId("conversations-toggle").textContent()).toContain("Explain this:");
    await expect.poll(() => p.getByTestId("msg-user").count()).toBe(2);
    expect(await pageOverflow(p)).toBeLessThanOrEqual(0);
    expect(app.errors()).toEqual([]);
  });
});
