// Choosing a model file or folder with the native picker (Tauri dialog plugin). The e2e mock
// answers the plugin's IPC command; debug builds of the app can answer for it through
// UNMASK_E2E_PICK (native dialogs cannot be driven over WebDriver).
import { open } from "@tauri-apps/plugin-dialog";
import { testPickedPath } from "./api";

/** What to pick: one .gguf file, or a Hugging Face model folder. */
export type PickKind = "gguf" | "folder";

/** The chosen path, or null when the user cancelled. */
export async function pickModelPath(kind: PickKind): Promise<string | null> {
  const preset = await testPickedPath().catch(() => null);
  if (preset !== null) return preset;
  const picked = await open(
    kind === "gguf"
      ? { title: "Choose a GGUF model file", multiple: false, directory: false, filters: [{ name: "GGUF model", extensions: ["gguf"] }] }
      : { title: "Choose a Hugging Face model folder", multiple: false, directory: true },
  );
  return typeof picked === "string" ? picked : null;
}
