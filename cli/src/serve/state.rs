//! What every handler shares: the served models with their workers, the API key, the shutdown
//! switch.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use unmask_engine::run::{BackendSpec, ModelParts};

use super::error::ApiError;
use super::worker::Worker;

/// One model the server answers for.
pub struct ServedModel {
    /// The id clients name it by.
    pub name: String,
    pub parts: Arc<ModelParts>,
    pub backend: BackendSpec,
    /// The draft model it decodes with (`--draft`), if any.
    pub draft: Option<String>,
    pub worker: Worker,
    /// Unix seconds it was loaded (the `created` of `/v1/models`).
    pub loaded_at: u64,
}

/// The server's shared state (cheap to clone).
#[derive(Clone)]
pub struct AppState(Arc<Shared>);

/// The state behind [`AppState`].
pub struct Shared {
    pub models: Vec<Arc<ServedModel>>,
    /// Every request must carry it when set.
    pub api_key: Option<String>,
    /// Largest request body accepted, bytes.
    pub max_body: usize,
    shutting_down: AtomicBool,
    /// Numbers response ids when runs are not recorded (recorded runs use their run id).
    next_id: AtomicU64,
    /// Makes unrecorded response ids differ between server processes.
    id_prefix: String,
}

impl std::ops::Deref for AppState {
    type Target = Shared;
    fn deref(&self) -> &Shared {
        &self.0
    }
}

impl AppState {
    pub fn new(models: Vec<Arc<ServedModel>>, api_key: Option<String>, max_body: usize) -> Self {
        let id_prefix = format!("{:x}", unix_now_nanos() as u64);
        AppState(Arc::new(Shared {
            models,
            api_key,
            max_body,
            shutting_down: AtomicBool::new(false),
            next_id: AtomicU64::new(1),
            id_prefix,
        }))
    }

    /// The served model named `id`.
    pub fn model(&self, id: &str) -> Result<Arc<ServedModel>, ApiError> {
        self.models.iter().find(|m| m.name == id).cloned().ok_or_else(|| {
            let served: Vec<String> = self.models.iter().map(|m| m.name.clone()).collect();
            ApiError::unknown_model(id, &served)
        })
    }

    /// The id of a response: from its run id, else from a per-process counter.
    pub fn response_id(&self, prefix: &str, run_id: Option<i64>) -> String {
        match run_id {
            Some(id) => format!("{prefix}-run{id}"),
            None => format!("{prefix}-{}-{}", self.id_prefix, self.next_id.fetch_add(1, Ordering::Relaxed)),
        }
    }

    /// Whether shutdown has begun.
    pub fn is_shutting_down(&self) -> bool {
        self.shutting_down.load(Ordering::SeqCst)
    }

    /// Stops taking requests: new ones get 503, queued ones are answered 503, running ones go on.
    pub fn begin_shutdown(&self) {
        self.shutting_down.store(true, Ordering::SeqCst);
        for m in &self.models {
            m.worker.close();
        }
    }

    /// Cancels every running generation (recorded as cancelled with what it had).
    pub fn cancel_running(&self) {
        for m in &self.models {
            m.worker.cancel_running();
        }
    }

    /// Waits for every worker thread to end (after [`begin_shutdown`](Self::begin_shutdown)).
    pub fn join_workers(&self) {
        for m in &self.models {
            m.worker.join();
        }
    }
}

/// Unix time in nanoseconds.
pub fn unix_now_nanos() -> u128 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0)
}

/// Unix time in seconds.
pub fn unix_now() -> u64 {
    (unix_now_nanos() / 1_000_000_000) as u64
}
