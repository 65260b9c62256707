//! [`AppState`]: the store, the model cache, running generations and downloads. Every command is
//! a thin wrapper over an async method here, so the logic is testable without a window.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use unmask_engine::decode::CancelFlag;
use unmask_store::{ModelId, ModelRecord, RunId, Store};

use crate::backends::{self, ModelCache};
use crate::batcher::FRAME_INTERVAL;
use crate::downloads::Downloads;
use crate::error::{AppError, AppResult};

/// Everything the commands share. Cheap to share behind an `Arc`.
pub struct AppState {
    pub store: Store,
    pub models: Arc<ModelCache>,
    /// Id of the embedded default model, when it was found and registered.
    pub embedded_model_id: Option<ModelId>,
    /// Folder of the embedded model (to tell it apart from imports).
    pub embedded_dir: Option<PathBuf>,
    pub(crate) running: Mutex<HashMap<RunId, CancelFlag>>,
    pub(crate) downloads: Downloads,
    /// Interval between `frames` events of a generation.
    pub frame_interval: Duration,
}

impl AppState {
    /// Opens the store in `data_dir`, registers the embedded default model (in place, no copy, no
    /// network) when it is not registered yet, and adds the built-in presets.
    pub async fn open(data_dir: impl Into<PathBuf>) -> AppResult<Arc<AppState>> {
        let store = Store::open(data_dir.into()).await?;
        let embedded_dir = backends::embedded_model_dir();
        let embedded_model_id = match &embedded_dir {
            Some(dir) => Some(register_embedded(&store, dir).await?),
            None => {
                tracing::warn!("embedded model {} not found; set {}", backends::EMBEDDED_MODEL, backends::MODELS_DIR_ENV);
                None
            }
        };
        crate::presets::ensure_builtin(&store).await?;
        Ok(Arc::new(AppState {
            store,
            models: Arc::new(ModelCache::default()),
            embedded_model_id,
            embedded_dir: embedded_dir.and_then(|d| d.canonicalize().ok()),
            running: Mutex::new(HashMap::new()),
            downloads: Downloads::default(),
            frame_interval: FRAME_INTERVAL,
        }))
    }

    /// Opens the store in `$UNMASK_DATA_DIR` or the platform data folder.
    pub async fn open_default() -> AppResult<Arc<AppState>> {
        AppState::open(unmask_store::default_data_dir()?).await
    }

    /// The model a request names, or the embedded default.
    pub async fn resolve_model(&self, id: Option<ModelId>) -> AppResult<ModelRecord> {
        match id.or(self.embedded_model_id) {
            Some(id) => Ok(self.store.get_model(id).await?),
            None => Err(AppError::invalid("no model chosen and the embedded default model is not available")),
        }
    }

    /// Whether `model` is the embedded default.
    pub fn is_embedded(&self, model: &ModelRecord) -> bool {
        Some(model.id) == self.embedded_model_id
            || self.embedded_dir.as_deref().is_some_and(|d| same_path(&self.store.model_path(model), d))
    }

    /// Asks a running generation to stop (it ends as `cancelled` with its partial output).
    pub fn stop_generation(&self, run_id: RunId) -> AppResult<()> {
        let running = self.running.lock().map_err(|_| AppError::internal("run table poisoned"))?;
        match running.get(&run_id) {
            Some(flag) => {
                flag.cancel();
                Ok(())
            }
            None => Err(AppError::not_found(format!("run {run_id} is not running"))),
        }
    }
}

fn same_path(a: &Path, b: &Path) -> bool {
    a.canonicalize().ok().is_some_and(|a| a == b)
}

/// Finds or registers the embedded model (by name; registered in place so nothing is copied).
async fn register_embedded(store: &Store, dir: &Path) -> AppResult<ModelId> {
    if let Some(m) = store.model_by_name(backends::EMBEDDED_MODEL).await? {
        return Ok(m.id);
    }
    let m = store.import_model(dir, Some(backends::EMBEDDED_MODEL), true).await?;
    tracing::info!(id = m.id, path = %dir.display(), "registered the embedded default model");
    Ok(m.id)
}
