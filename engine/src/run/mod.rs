//! One run pipeline for every front end (CLI, app, server, benchmarks): a [`RunSpec`] names the
//! model, the backend and the user's setting overrides; a [`Session`] builds the backend once,
//! decides the effective settings (user over model defaults over engine defaults), checks the
//! request, decodes, cuts the answer at the stop tokens and returns a [`RunOutcome`] for the
//! store to record.

pub(crate) mod backend_spec;
pub(crate) mod chat_context;
pub(crate) mod executor;
pub(crate) mod moe_calibrate;
pub(crate) mod overrides;
pub(crate) mod session;
pub(crate) mod stop;

use std::path::PathBuf;

pub use backend_spec::{BackendSpec, DEFAULT_DEVICE, DEFAULT_QNN_LIBRARY};
pub use chat_context::{fit_chat, FittedChat};
pub use executor::{Executor, RunTimeline, TimelineMark};
pub use moe_calibrate::{calibrate_moe, static_plan, CalibrationShape};
pub use overrides::{effective_settings, SettingsOverrides, DEFAULTS_THAT_DIFFER};
pub use session::{ModelParts, RunOutcome, RunPrompt, Session};
pub use stop::stop_ids;

/// What to run: a model, a backend, and what the user set.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct RunSpec {
    /// Model folder or `.gguf` file.
    pub model: PathBuf,
    pub backend: BackendSpec,
    pub settings: SettingsOverrides,
}
