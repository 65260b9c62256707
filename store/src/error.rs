//! Typed store errors: each says what failed and on which file, URL or record.

use std::path::PathBuf;

/// Result alias for store operations.
pub type Result<T, E = StoreError> = std::result::Result<T, E>;

/// Everything that can go wrong in the store.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The database failed (I/O, constraint, corrupt file).
    #[error("database: {0}")]
    Database(#[from] sqlx::Error),
    /// Applying the embedded migrations failed (e.g. a database from a newer Unmask).
    #[error("database migration: {0}")]
    Migration(#[from] sqlx::migrate::MigrateError),
    /// A file-system operation failed.
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// No platform data folder could be determined and `UNMASK_DATA_DIR` is unset.
    #[error("no data folder: set UNMASK_DATA_DIR (no platform data directory on this system)")]
    NoDataDir,
    /// The engine's loader refused the model.
    #[error("not a usable model: {0}")]
    InvalidModel(#[from] unmask_engine::EngineError),
    /// A model with this name already exists.
    #[error("a model named `{0}` already exists")]
    DuplicateName(String),
    /// The same model (same content hash) is already registered.
    #[error("this model is already registered as `{existing}` (sha256 {sha256})")]
    DuplicateModel { existing: String, sha256: String },
    /// A name, file name or path that could escape the data folder or is not allowed.
    #[error("unsafe or invalid name `{name}`: {reason}")]
    UnsafeName { name: String, reason: String },
    /// A record that does not exist.
    #[error("{kind} {id} not found")]
    NotFound { kind: &'static str, id: String },
    /// A request that does not make sense (bad argument).
    #[error("invalid request: {0}")]
    InvalidRequest(String),
    /// Stored data that cannot be decoded (corrupt trace chunk, bad JSON column).
    #[error("corrupt stored data ({what}): {reason}")]
    Corrupt { what: String, reason: String },
    /// An HTTP failure that retries did not fix.
    #[error("download of {url} failed: {reason}")]
    Download { url: String, reason: String },
    /// The server answered with an error status that retrying cannot fix (404, 403, ...).
    #[error("download of {url}: HTTP {status}")]
    HttpStatus { url: String, status: u16 },
    /// A downloaded or imported file does not have the expected size.
    #[error("{file}: size {actual} bytes, expected {expected}")]
    SizeMismatch { file: String, expected: u64, actual: u64 },
    /// A downloaded or imported file does not have the expected sha256.
    #[error("{file}: sha256 {actual}, expected {expected}")]
    ChecksumMismatch { file: String, expected: String, actual: String },
    /// No bytes arrived for longer than the stall timeout, on every retry.
    #[error("download of {url} stalled (no data for {secs:.1} s)")]
    Stalled { url: String, secs: f64 },
    /// The caller cancelled the operation (a partial download is kept for resuming).
    #[error("cancelled")]
    Cancelled,
    /// A background task of the store died.
    #[error("internal: {0}")]
    Internal(String),
}

impl StoreError {
    /// Wraps an I/O error with the path it happened on.
    pub fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        StoreError::Io { path: path.into(), source }
    }
    /// A corrupt-data error.
    pub fn corrupt(what: impl Into<String>, reason: impl Into<String>) -> Self {
        StoreError::Corrupt { what: what.into(), reason: reason.into() }
    }
    /// A not-found error.
    pub fn not_found(kind: &'static str, id: impl ToString) -> Self {
        StoreError::NotFound { kind, id: id.to_string() }
    }
    /// An unsafe-name error.
    pub fn unsafe_name(name: impl Into<String>, reason: impl Into<String>) -> Self {
        StoreError::UnsafeName { name: name.into(), reason: reason.into() }
    }
}
