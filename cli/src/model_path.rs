//! Finding the model to run: `--model`, `$UNMASK_MODEL`, or the embedded default.

use std::path::{Path, PathBuf};

use anyhow::Result;

use crate::exit::{fail, UNAVAILABLE};

/// Directory name of the embedded default model under `models/`.
pub const DEFAULT_MODEL: &str = "tiny-llada";

/// Folders searched for embedded models, most specific first.
pub fn model_roots() -> Vec<PathBuf> {
    let mut roots = Vec::new();
    if let Ok(d) = std::env::var("UNMASK_MODELS_DIR") {
        roots.push(PathBuf::from(d));
    }
    if let Ok(exe) = std::env::current_exe() {
        // Installed layout: bin/unmask next to share/unmask/models.
        if let Some(prefix) = exe.parent().and_then(Path::parent) {
            roots.push(prefix.join("share/unmask/models"));
        }
    }
    // Source checkout: the repository's models/ folder.
    roots.push(Path::new(env!("CARGO_MANIFEST_DIR")).join("../models"));
    roots
}

/// Resolves a model argument: a path, a name under a model root, or the default.
pub fn resolve(arg: Option<&str>) -> Result<PathBuf> {
    let wanted = arg.map(str::to_owned).or_else(|| std::env::var("UNMASK_MODEL").ok());
    let name = match &wanted {
        Some(w) => {
            let p = PathBuf::from(w);
            if p.exists() {
                return Ok(p);
            }
            if w.contains('/') || w.ends_with(".gguf") {
                return Err(fail(UNAVAILABLE, format!("model path `{w}` does not exist")));
            }
            w.clone()
        }
        None => DEFAULT_MODEL.to_owned(),
    };
    for root in model_roots() {
        let p = root.join(&name);
        if p.join("config.json").exists() || p.exists() && p.is_file() {
            return Ok(p);
        }
    }
    Err(fail(
        UNAVAILABLE,
        format!(
            "model `{name}` not found (not in the store, not in {}); `unmask models list` shows the models, or pass --model PATH to a model directory or .gguf file",
            model_roots().iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", ")
        ),
    ))
}

/// The folder of an embedded model, if a model root has it.
pub fn embedded(name: &str) -> Option<PathBuf> {
    model_roots().into_iter().map(|r| r.join(name)).find(|p| p.join("config.json").exists())
}

/// Embedded models found in the model roots: (name, path).
pub fn list_embedded() -> Vec<(String, PathBuf)> {
    let mut out = Vec::new();
    for root in model_roots() {
        let Ok(rd) = std::fs::read_dir(&root) else { continue };
        let mut entries: Vec<_> = rd.flatten().map(|e| e.path()).collect();
        entries.sort();
        for p in entries {
            if p.join("config.json").exists() {
                let name = p.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
                if !out.iter().any(|(n, _): &(String, PathBuf)| *n == name) {
                    out.push((name, p.canonicalize().unwrap_or(p)));
                }
            }
        }
    }
    out
}
