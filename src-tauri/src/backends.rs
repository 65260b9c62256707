//! Loading models for decoding (cached, one at a time) and building the CPU / virtual-NPU
//! backends a run asks for; where the embedded default model lives.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use unmask_engine::backend::vnpu::profile::DeviceProfile;
use unmask_engine::model::{load_model, ChatTemplate, GenerationDefaults, LoadedModel, TextTokenizer, Transformer};

use crate::error::{AppError, AppResult};

/// Device profile used when a vnpu request names none.
pub const DEFAULT_DEVICE: &str = "sm8750";
/// Environment variable naming the folder that holds `tiny-llada/` (overrides the search).
pub const MODELS_DIR_ENV: &str = "UNMASK_MODELS_DIR";
/// Folder name of the embedded default model.
pub const EMBEDDED_MODEL: &str = "tiny-llada";

/// The embedded default model's folder: `$UNMASK_MODELS_DIR/tiny-llada`, else `models/tiny-llada`
/// next to the executable or up to three folders above it (a `target/debug` build in the repo),
/// else the repository this crate was built from.
pub fn embedded_model_dir() -> Option<PathBuf> {
    let ok = |d: PathBuf| d.join("config.json").is_file().then_some(d);
    if let Some(dir) = std::env::var_os(MODELS_DIR_ENV).filter(|d| !d.is_empty()) {
        return ok(PathBuf::from(dir).join(EMBEDDED_MODEL));
    }
    if let Some(exe_dir) = std::env::current_exe().ok().and_then(|e| e.parent().map(Path::to_owned)) {
        for up in exe_dir.ancestors().take(4) {
            for rel in ["models", "share/unmask/models", "resources/models"] {
                if let Some(d) = ok(up.join(rel).join(EMBEDDED_MODEL)) {
                    return Some(d);
                }
            }
        }
    }
    ok(Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join("models").join(EMBEDDED_MODEL))
}

/// A loaded model's parts that decoding needs.
pub struct Loaded {
    pub transformer: Arc<Transformer>,
    pub tokenizer: TextTokenizer,
    pub template: ChatTemplate,
    pub generation: GenerationDefaults,
}

impl Loaded {
    /// Token ids that end an answer (EOS/EOT/pad/BOS and the template's stop strings).
    pub fn stop_ids(&self) -> Vec<u32> {
        let c = &self.transformer.config;
        let mut v: Vec<u32> = [c.eos_token_id, c.eot_token_id, c.pad_token_id, c.bos_token_id].into_iter().flatten().collect();
        v.extend(self.template.stop_strings().iter().filter_map(|t| self.tokenizer.token_id(t)));
        v
    }
}

/// Keeps the most recently used model in memory (weights are memory-mapped, so a reload is cheap
/// but not free; one at a time keeps memory bounded).
#[derive(Default)]
pub struct ModelCache {
    current: Mutex<Option<(PathBuf, Arc<Loaded>)>>,
}

impl ModelCache {
    /// The model at `path`, loading it (blocking) when it is not the cached one.
    pub fn get_blocking(&self, path: &Path) -> AppResult<Arc<Loaded>> {
        {
            let cur = self.current.lock().map_err(|_| AppError::internal("model cache poisoned"))?;
            if let Some((p, m)) = cur.as_ref() {
                if p == path {
                    return Ok(m.clone());
                }
            }
        }
        let LoadedModel { transformer, tokenizer, template, generation, .. } = load_model(path)?;
        let loaded = Arc::new(Loaded { transformer: Arc::new(transformer), tokenizer, template, generation });
        let mut cur = self.current.lock().map_err(|_| AppError::internal("model cache poisoned"))?;
        *cur = Some((path.to_owned(), loaded.clone()));
        Ok(loaded)
    }

    /// Forgets the cached model if it is `path` (before deleting its files).
    pub fn evict(&self, path: &Path) {
        if let Ok(mut cur) = self.current.lock() {
            if cur.as_ref().is_some_and(|(p, _)| p == path) {
                *cur = None;
            }
        }
    }
}

/// A built-in device profile by name (case-insensitive), with a clear error naming the choices.
pub fn device_profile(name: &str) -> AppResult<DeviceProfile> {
    DeviceProfile::builtin(&name.to_lowercase()).map_err(|_| {
        AppError::invalid(format!("unknown device `{name}` (built-in profiles: {})", DeviceProfile::list_builtin().join(", ")))
    })
}

/// Names of the built-in virtual NPU device profiles.
pub fn device_names() -> Vec<String> {
    DeviceProfile::list_builtin().into_iter().map(str::to_owned).collect()
}
