//! The one error type every command returns; serialises as `{ kind, message }` for the UI.

use serde::{Deserialize, Serialize};
use specta::Type;
use unmask_engine::EngineError;
use unmask_store::StoreError;

/// Machine-readable class of a failed command (the UI may branch on it; it shows `message`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, Type)]
#[serde(rename_all = "camelCase")]
pub enum AppErrorKind {
    /// A request the app cannot carry out as asked.
    Invalid,
    /// Decoding settings the engine refuses (or a prompt that does not fit with them).
    InvalidSettings,
    /// A record or path that does not exist.
    NotFound,
    /// A folder or file that is not a model the app can read.
    InvalidModel,
    /// A model or preset of that name or content already exists.
    Duplicate,
    /// Reading or writing a file failed.
    Io,
    /// A download failed (network, HTTP status, stall, size or checksum).
    Download,
    /// The user cancelled it.
    Cancelled,
    /// Any other failure of the store.
    Store,
    /// Any other failure of the engine.
    Engine,
    /// A bug or a dead background task.
    Internal,
}

/// A failed command: `kind` is a stable machine-readable class, `message` is shown to the user.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Type, thiserror::Error)]
#[error("{message}")]
pub struct AppError {
    pub kind: AppErrorKind,
    pub message: String,
}

impl AppError {
    /// An error of `kind` with `message`.
    pub fn new(kind: AppErrorKind, message: impl Into<String>) -> Self {
        AppError { kind, message: message.into() }
    }
    /// A request the app cannot carry out as asked.
    pub fn invalid(message: impl Into<String>) -> Self {
        AppError::new(AppErrorKind::Invalid, message)
    }
    /// A record that does not exist.
    pub fn not_found(message: impl Into<String>) -> Self {
        AppError::new(AppErrorKind::NotFound, message)
    }
    /// A bug or a dead background task.
    pub fn internal(message: impl Into<String>) -> Self {
        AppError::new(AppErrorKind::Internal, message)
    }
}

impl From<StoreError> for AppError {
    fn from(e: StoreError) -> Self {
        use AppErrorKind as K;
        let kind = match &e {
            StoreError::NotFound { .. } => K::NotFound,
            StoreError::InvalidModel(_) => K::InvalidModel,
            StoreError::DuplicateName(_) | StoreError::DuplicateModel { .. } => K::Duplicate,
            StoreError::UnsafeName { .. } | StoreError::InvalidRequest(_) => K::Invalid,
            StoreError::Io { .. } => K::Io,
            StoreError::Download { .. }
            | StoreError::HttpStatus { .. }
            | StoreError::Stalled { .. }
            | StoreError::SizeMismatch { .. }
            | StoreError::ChecksumMismatch { .. } => K::Download,
            StoreError::Cancelled => K::Cancelled,
            _ => K::Store,
        };
        AppError::new(kind, e.to_string())
    }
}

impl From<EngineError> for AppError {
    fn from(e: EngineError) -> Self {
        let kind = match &e {
            EngineError::Cancelled => AppErrorKind::Cancelled,
            EngineError::InvalidRequest(_) | EngineError::ContextOverflow { .. } => AppErrorKind::InvalidSettings,
            _ => AppErrorKind::Engine,
        };
        AppError::new(kind, e.to_string())
    }
}

/// Result of every app function.
pub type AppResult<T> = Result<T, AppError>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_serialise_as_kind_and_message() {
        let e = AppError::new(AppErrorKind::InvalidSettings, "steps 3 must be a positive multiple of the 2 blocks");
        let v = serde_json::to_value(&e).expect("json");
        assert_eq!(
            v,
            serde_json::json!({"kind": "invalidSettings", "message": "steps 3 must be a positive multiple of the 2 blocks"})
        );
        let kinds = [
            (AppErrorKind::Invalid, "invalid"),
            (AppErrorKind::NotFound, "notFound"),
            (AppErrorKind::InvalidModel, "invalidModel"),
            (AppErrorKind::Io, "io"),
            (AppErrorKind::Internal, "internal"),
        ];
        for (k, s) in kinds {
            assert_eq!(serde_json::to_value(k).expect("json"), s);
        }
    }
}
