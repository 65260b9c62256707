//! The one error type every command returns; serialises as `{ kind, message }` for the UI.

use serde::{Deserialize, Serialize};
use specta::Type;
use unmask_engine::EngineError;
use unmask_store::StoreError;

/// A failed command: `kind` is a stable machine-readable class, `message` is shown to the user.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Type, thiserror::Error)]
#[error("{message}")]
pub struct AppError {
    pub kind: String,
    pub message: String,
}

impl AppError {
    /// An error of `kind` with `message`.
    pub fn new(kind: &str, message: impl Into<String>) -> Self {
        AppError { kind: kind.to_owned(), message: message.into() }
    }
    /// A request the app cannot carry out as asked.
    pub fn invalid(message: impl Into<String>) -> Self {
        AppError::new("invalid", message)
    }
    /// A record that does not exist.
    pub fn not_found(message: impl Into<String>) -> Self {
        AppError::new("notFound", message)
    }
    /// A bug or a dead background task.
    pub fn internal(message: impl Into<String>) -> Self {
        AppError::new("internal", message)
    }
}

impl From<StoreError> for AppError {
    fn from(e: StoreError) -> Self {
        let kind = match &e {
            StoreError::NotFound { .. } => "notFound",
            StoreError::InvalidModel(_) => "invalidModel",
            StoreError::DuplicateName(_) | StoreError::DuplicateModel { .. } => "duplicate",
            StoreError::UnsafeName { .. } | StoreError::InvalidRequest(_) => "invalid",
            StoreError::Io { .. } => "io",
            StoreError::Download { .. }
            | StoreError::HttpStatus { .. }
            | StoreError::Stalled { .. }
            | StoreError::SizeMismatch { .. }
            | StoreError::ChecksumMismatch { .. } => "download",
            StoreError::Cancelled => "cancelled",
            _ => "store",
        };
        AppError::new(kind, e.to_string())
    }
}

impl From<EngineError> for AppError {
    fn from(e: EngineError) -> Self {
        let kind = match &e {
            EngineError::Cancelled => "cancelled",
            EngineError::InvalidRequest(_) | EngineError::ContextOverflow { .. } => "invalidSettings",
            _ => "engine",
        };
        AppError::new(kind, e.to_string())
    }
}

/// Result of every app function.
pub type AppResult<T> = Result<T, AppError>;
