import { defineConfig } from "vitest/config";

// E2E runs in Node and drives a real headless Chromium; one file at a time on a loaded machine.
export default defineConfig({
  test: {
    include: ["e2e/**/*.e2e.ts"],
    environment: "node",
    testTimeout: 180_000,
    hookTimeout: 180_000,
    fileParallelism: false,
    sequence: { concurrent: false },
    // expect.poll defaults to 1 s; a loaded 2-core machine and real recordings need more.
    expect: { poll: { timeout: 60_000, interval: 50 } },
  },
});
