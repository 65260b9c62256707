// Loads the recorded step streams: the real recordings in tests/fixtures/ (written by src-tauri's
// recorder from the embedded model) when present, otherwise the hand-made provisional ones.
import fs from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import type { RecordedRun } from "../src/lib/contract";

const here = path.dirname(fileURLToPath(import.meta.url));

/** A fixture file with its name and whether it is a real recording. */
export type Fixture = { name: string; run: RecordedRun; real: boolean };

function jsonFiles(dir: string): string[] {
  if (!fs.existsSync(dir)) return [];
  // recorded-from.json names the model the recordings came from; it is not a run.
  return fs.readdirSync(dir).filter((f) => f.endsWith(".json") && f !== "recorded-from.json").sort();
}

/** Folder the fixtures come from. */
export function fixtureDir(): { dir: string; real: boolean } {
  // Lets a run point at recordings elsewhere (e.g. extracted from another branch).
  const override = process.env.UNMASK_FIXTURE_DIR;
  if (override) return { dir: path.resolve(override), real: true };
  const real = path.join(here, "fixtures");
  if (jsonFiles(real).length > 0) return { dir: real, real: true };
  return { dir: path.join(here, "fixtures-provisional"), real: false };
}

/** All recorded runs. */
export function loadFixtures(): Fixture[] {
  const { dir, real } = fixtureDir();
  return jsonFiles(dir).map((f) => ({
    name: f.replace(/\.json$/, ""),
    run: JSON.parse(fs.readFileSync(path.join(dir, f), "utf8")) as RecordedRun,
    real,
  }));
}
