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
  },
});
