//! Where the embedded models live: one search, the same for the CLI, the app and the benchmarks.

use std::path::{Path, PathBuf};

/// Folder name of the embedded default model.
pub const DEFAULT_MODEL: &str = "tiny-llada";
/// Environment variable naming a folder of models searched first.
pub const MODELS_DIR_ENV: &str = "UNMASK_MODELS_DIR";

/// Folders searched for embedded models, most specific first: `$UNMASK_MODELS_DIR`; beside the
/// executable or up to three folders above it (`models/`, an installed `share/unmask/models/`, a
/// bundled app's `resources/models/`; covers `target/debug` builds in the repository); the
/// repository this crate was built from.
pub fn model_roots() -> Vec<PathBuf> {
    let mut roots = Vec::new();
    if let Some(d) = std::env::var_os(MODELS_DIR_ENV).filter(|d| !d.is_empty()) {
        roots.push(PathBuf::from(d));
    }
    if let Some(exe_dir) = std::env::current_exe().ok().and_then(|e| e.parent().map(Path::to_owned)) {
        for up in exe_dir.ancestors().take(4) {
            for rel in ["models", "share/unmask/models", "resources/models"] {
                roots.push(up.join(rel));
            }
        }
    }
    roots.push(Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join("models"));
    let mut seen = Vec::new();
    roots.retain(|r| {
        let fresh = !seen.contains(r);
        seen.push(r.clone());
        fresh
    });
    roots
}

/// The folder of the embedded model `name`, if a root has it.
pub fn embedded(name: &str) -> Option<PathBuf> {
    model_roots().into_iter().map(|r| r.join(name)).find(|p| p.join("config.json").is_file())
}

/// Every embedded model found: (name, folder), the first root holding a name wins.
pub fn list_embedded() -> Vec<(String, PathBuf)> {
    let mut out: Vec<(String, PathBuf)> = Vec::new();
    for root in model_roots() {
        let Ok(rd) = std::fs::read_dir(&root) else { continue };
        let mut entries: Vec<PathBuf> = rd.flatten().map(|e| e.path()).collect();
        entries.sort();
        for p in entries {
            if !p.join("config.json").is_file() {
                continue;
            }
            let name = p.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
            if !out.iter().any(|(n, _)| *n == name) {
                out.push((name, p.canonicalize().unwrap_or(p)));
            }
        }
    }
    out
}
