import { afterEach, describe, expect, it } from "vitest";
import { app, dismissError, errorOn, openProfile, selectTab, showError } from "../../src/lib/state.svelte";

afterEach(() => {
  dismissError();
  app.tab = "chat";
});

describe("error banners belong to a screen", () => {
  it("shows an error on the screen where it happened and clears it when the user leaves that screen", () => {
    selectTab("models");
    showError({ kind: "notFound", message: "no model at /x" });
    expect(app.errorScreen).toEqual({ tab: "models", message: "no model at /x" });
    expect(errorOn("models")).toBe("no model at /x");
    expect(errorOn("chat")).toBeNull();
    selectTab("chat");
    expect(app.error).toBeNull();
    selectTab("models");
    expect(errorOn("models")).toBeNull();
  });

  it("keeps an error of another screen until the user has been there and left", () => {
    selectTab("settings");
    showError(new Error("stream failed"), "chat");
    expect(errorOn("settings")).toBeNull();
    selectTab("compare");
    expect(app.error).toBe("stream failed");
    selectTab("chat");
    expect(errorOn("chat")).toBe("stream failed");
    openProfile(3);
    expect(app.tab).toBe("profiler");
    expect(app.error).toBeNull();
  });

  it("re-selecting the open screen keeps its error; dismissing removes it", () => {
    showError("locked");
    selectTab("chat");
    expect(errorOn("chat")).toBe("locked");
    dismissError();
    expect(errorOn("chat")).toBeNull();
  });

  it("an error set directly (no screen recorded) shows on the open screen and is cleared on leaving it", () => {
    selectTab("models");
    showError("old");
    app.error = null;
    selectTab("chat");
    app.error = "generation failed";
    expect(errorOn("chat")).toBe("generation failed");
    selectTab("models");
    expect(app.error).toBeNull();
  });
});
