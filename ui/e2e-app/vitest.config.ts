import { defineConfig } from "vitest/config";

// The real app window (WebKitGTK) driven over WebDriver by tauri-driver: one session at a time,
// generous timeouts because the embedded model really runs on a loaded 2-core machine.
export default defineConfig({
  test: {
    include: ["e2e-app/**/*.webdriver.ts"],
    environment: "node",
    testTimeout: 300_000,
    hookTimeout: 300_000,
    fileParallelism: false,
    sequence: { concurrent: false },
  },
});
