//! Finding the model to run: `--model`, `$UNMASK_MODEL`, or the embedded default.

use std::path::PathBuf;

use anyhow::Result;

use crate::exit::{fail, UNAVAILABLE};

pub use unmask_engine::model::embedded::{embedded, list_embedded, model_roots, DEFAULT_MODEL};

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
    if let Some(p) = embedded(&name) {
        return Ok(p);
    }
    Err(fail(
        UNAVAILABLE,
        format!(
            "model `{name}` not found (not in the store, not in {}); `unmask models list` shows the models, or pass --model PATH to a model directory or .gguf file",
            model_roots().iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", ")
        ),
    ))
}
