// Fails when the hand-written contract types (src/lib/contract.ts) and the tauri-specta
// generated ones (src/lib/bindings.ts, committed by src-tauri) disagree. Without bindings.ts
// (a UI-only checkout) there is nothing to compare and it says so.
import { execFileSync } from "node:child_process";
import fs from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";

const ui = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..");
const bindings = path.join(ui, "src", "lib", "bindings.ts");
if (!fs.existsSync(bindings)) {
  console.log("check-bindings: no src/lib/bindings.ts, skipped");
  process.exit(0);
}
const contract = fs.readFileSync(path.join(ui, "src", "lib", "contract.ts"), "utf8");
const generated = fs.readFileSync(bindings, "utf8");
const names = [...contract.matchAll(/^export type (\w+)/gm)].map((m) => m[1])
  .filter((n) => new RegExp(`^export type ${n}\\b`, "m").test(generated));
if (names.length < 20) {
  console.error(`check-bindings: only ${names.length} shared type names; is bindings.ts the contract's?`);
  process.exit(1);
}
const dir = fs.mkdtempSync(path.join(ui, ".check-bindings-"));
try {
  const lines = [
    'import type * as B from "../src/lib/bindings";',
    'import type * as C from "../src/lib/contract";',
    "type Eq<X, Y> = [X] extends [Y] ? ([Y] extends [X] ? true : false) : false;",
    ...names.map((n) => `export const ${n}: Eq<B.${n}, C.${n}> = true;`),
  ];
  fs.writeFileSync(path.join(dir, "check.ts"), lines.join("\n") + "\n");
  const tsc = path.join(ui, "..", "node_modules", "typescript", "bin", "tsc");
  execFileSync(process.execPath, [tsc, "--noEmit", "--strict", "--skipLibCheck", "--moduleResolution", "bundler",
    "--module", "esnext", "--target", "es2022", path.join(dir, "check.ts")], { stdio: "inherit" });
  console.log(`check-bindings: ${names.length} types of contract.ts equal bindings.ts`);
} catch {
  // check.ts line 4 + i holds names[i].
  console.error("check-bindings: contract.ts and bindings.ts differ; check.ts lines are: " +
    names.map((n, i) => `${i + 4}=${n}`).join(" "));
  process.exitCode = 1;
} finally {
  fs.rmSync(dir, { recursive: true, force: true });
}
