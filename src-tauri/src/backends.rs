//! Loading models for decoding (cached, one at a time) and building the CPU / virtual-NPU
//! backends a run asks for; where the embedded default model lives.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use unmask_engine::backend::vnpu::profile::DeviceProfile;
use unmask_engine::run::ModelParts;

use crate::error::{AppError, AppResult};

pub use unmask_engine::model::embedded::{DEFAULT_MODEL as EMBEDDED_MODEL, MODELS_DIR_ENV};
pub use unmask_engine::run::DEFAULT_DEVICE;

/// The embedded default model's folder (the engine's one search: see
/// [`unmask_engine::model::embedded::model_roots`]).
pub fn embedded_model_dir() -> Option<PathBuf> {
    unmask_engine::model::embedded::embedded(EMBEDDED_MODEL)
}

/// A loaded model's parts that decoding needs (shared with the engine's run sessions).
pub type Loaded = ModelParts;

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
        let loaded = Arc::new(ModelParts::load(path)?);
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
