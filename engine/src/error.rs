//! Typed engine errors: every failure names the file or tensor and what is wrong.

use std::path::PathBuf;

/// Result alias for engine operations.
pub type Result<T, E = EngineError> = std::result::Result<T, E>;

/// Everything that can go wrong while loading or running a model.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// An I/O error on a named file.
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// A file whose bytes do not follow its format.
    #[error("{path}: corrupt {format} file: {reason}")]
    Corrupt { path: PathBuf, format: &'static str, reason: String },
    /// A required tensor is absent from the checkpoint.
    #[error("{path}: missing tensor `{name}`")]
    MissingTensor { path: PathBuf, name: String },
    /// A tensor has the wrong shape for the configuration.
    #[error("tensor `{name}` has shape {}, the config needs {}", dims(found), dims(expected))]
    ShapeMismatch { name: String, expected: Vec<usize>, found: Vec<usize> },
    /// A problem with a tensor, named with the file that holds it.
    #[error("{path}: {inner}")]
    InFile { path: PathBuf, inner: Box<EngineError> },
    /// A weight holds NaN or infinity.
    #[error("{path}: tensor `{name}` holds the non-finite value {value} at element {index}")]
    NonFiniteWeight { path: PathBuf, name: String, index: usize, value: f32 },
    /// A forward pass produced NaN or infinite logits (weights or activations overflowed).
    #[error("the model produced a non-finite logit ({value}) in output row {row} of a forward pass; its weights or activations overflow, so no text is produced from it")]
    NonFiniteLogits { row: usize, value: f32 },
    /// A tensor's data type is not supported where it is used.
    #[error("tensor `{name}`: unsupported dtype {dtype}")]
    UnsupportedDType { name: String, dtype: String },
    /// A path that holds no model at all.
    #[error("{path}: not a model: {reason}")]
    NotAModel { path: PathBuf, reason: String },
    /// A config.json or GGUF metadata problem.
    #[error("{path}: bad model config: {reason}")]
    Config { path: PathBuf, reason: String },
    /// The checkpoint names an architecture we do not run.
    #[error("{path}: unknown architecture `{}` (supported: {})", shown(arch), supported_architectures())]
    UnknownArchitecture { path: PathBuf, arch: String },
    /// No tokenizer could be found or built.
    #[error("{path}: tokenizer: {reason}")]
    Tokenizer { path: PathBuf, reason: String },
    /// The request does not fit the model (too long, bad ids, ...).
    #[error("invalid request: {0}")]
    InvalidRequest(String),
    /// The prompt plus generation exceeds the model context.
    #[error("the prompt and the tokens to generate make {len} tokens, more than the model's context of {max}")]
    ContextOverflow { len: usize, max: usize },
    /// The run was cancelled by the caller.
    #[error("cancelled")]
    Cancelled,
    /// A backend-specific failure.
    #[error("backend {backend}: {reason}")]
    Backend { backend: String, reason: String },
    /// The backend cannot run this model or request (e.g. mixed dense and MoE layers on QNN).
    #[error("backend {backend} does not support {what}")]
    Unsupported { backend: String, what: String },
    /// A QNN (Qualcomm NPU) library, provider or API call failed.
    #[error("QNN: {0}")]
    Qnn(#[from] qnn_sys::QnnError),
}

/// The GGUF names of every family we run, for the unknown-architecture error.
fn supported_architectures() -> String {
    crate::model::Architecture::ALL.iter().map(|a| a.gguf_name()).collect::<Vec<_>>().join(", ")
}

/// A string read from a file, safe to print on one line: control characters escaped, long
/// ones cut.
pub(crate) fn shown(s: &str) -> String {
    let mut out: String = s.chars().take(64).flat_map(char::escape_default).collect();
    if s.chars().count() > 64 {
        out.push('…');
    }
    out
}

/// A shape in words: `[4096, 192]` reads as "4096 x 192".
fn dims(d: &[usize]) -> String {
    if d.is_empty() {
        return "a scalar".into();
    }
    d.iter().map(|x| x.to_string()).collect::<Vec<_>>().join(" x ")
}

impl EngineError {
    /// Wraps an I/O error with the path it happened on.
    pub fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        EngineError::Io { path: path.into(), source }
    }
    /// A corrupt-file error.
    pub fn corrupt(path: impl Into<PathBuf>, format: &'static str, reason: impl Into<String>) -> Self {
        EngineError::Corrupt { path: path.into(), format, reason: reason.into() }
    }
    /// Names the file `self` happened in, unless the message already names a path.
    pub fn in_file(self, path: &std::path::Path) -> Self {
        match self {
            EngineError::ShapeMismatch { .. } | EngineError::UnsupportedDType { .. } => {
                EngineError::InFile { path: path.to_owned(), inner: Box::new(self) }
            }
            other => other,
        }
    }
    /// A config error.
    pub fn config(path: impl Into<PathBuf>, reason: impl Into<String>) -> Self {
        EngineError::Config { path: path.into(), reason: reason.into() }
    }
}
