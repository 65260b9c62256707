//! Errors as OpenAI clients expect them: an HTTP status and an `{"error": {...}}` object.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{json, Value};
use unmask_engine::EngineError;

/// A request that failed, as the client sees it.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{message}")]
pub struct ApiError {
    pub status: StatusCode,
    /// OpenAI's error `type` (`invalid_request_error`, `authentication_error`, ...).
    pub kind: &'static str,
    /// OpenAI's error `code`, when one applies.
    pub code: Option<&'static str>,
    /// The request field at fault, when one is.
    pub param: Option<String>,
    pub message: String,
    /// Seconds for a `Retry-After` header (busy queue).
    pub retry_after: Option<u64>,
}

impl ApiError {
    fn new(status: StatusCode, kind: &'static str, message: impl Into<String>) -> Self {
        ApiError { status, kind, code: None, param: None, message: message.into(), retry_after: None }
    }
    fn with_code(mut self, code: &'static str) -> Self {
        self.code = Some(code);
        self
    }
    /// A malformed or unusable request (400).
    pub fn invalid(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "invalid_request_error", message)
    }
    /// A bad value of one field (400).
    pub fn invalid_param(param: &str, message: impl Into<String>) -> Self {
        let mut e = Self::invalid(message);
        e.param = Some(param.to_owned());
        e
    }
    /// A field the server understands but cannot honour (400).
    pub fn unsupported(param: &str, message: impl Into<String>) -> Self {
        Self::invalid_param(param, message).with_code("unsupported_parameter")
    }
    /// A model id that is not served (404).
    pub fn unknown_model(id: &str, served: &[String]) -> Self {
        let mut e = Self::new(
            StatusCode::NOT_FOUND,
            "invalid_request_error",
            format!("the model `{id}` is not served here (served: {})", served.join(", ")),
        )
        .with_code("model_not_found");
        e.param = Some("model".into());
        e
    }
    /// A path that does not exist (404).
    pub fn no_route(path: &str) -> Self {
        Self::new(StatusCode::NOT_FOUND, "invalid_request_error", format!("no endpoint {path} (see GET /v1/models)"))
            .with_code("unknown_url")
    }
    /// A method the path does not take (405).
    pub fn wrong_method(method: &str, path: &str) -> Self {
        Self::new(StatusCode::METHOD_NOT_ALLOWED, "invalid_request_error", format!("{path} does not take {method}"))
    }
    /// Missing or wrong API key (401).
    pub fn unauthorized() -> Self {
        Self::new(
            StatusCode::UNAUTHORIZED,
            "authentication_error",
            "missing or incorrect API key (send `Authorization: Bearer KEY`)",
        )
        .with_code("invalid_api_key")
    }
    /// A body over the size limit (413).
    pub fn too_large(limit: usize) -> Self {
        Self::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "invalid_request_error",
            format!("the request body is larger than the {limit} bytes allowed"),
        )
        .with_code("request_too_large")
    }
    /// The model's queue is full (429); the client may retry after `retry_after` seconds.
    pub fn queue_full(model: &str, capacity: usize, retry_after: u64) -> Self {
        let mut e = Self::new(
            StatusCode::TOO_MANY_REQUESTS,
            "rate_limit_error",
            format!("the queue of model `{model}` is full ({capacity} requests waiting); retry after {retry_after} s"),
        )
        .with_code("queue_full");
        e.retry_after = Some(retry_after);
        e
    }
    /// The server is shutting down (503).
    pub fn shutting_down() -> Self {
        Self::new(StatusCode::SERVICE_UNAVAILABLE, "server_error", "the server is shutting down")
            .with_code("shutting_down")
    }
    /// The generation was cancelled on the server's side (shutdown after the grace period).
    pub fn cancelled() -> Self {
        Self::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "server_error",
            "the generation was cancelled (the server is shutting down)",
        )
        .with_code("cancelled")
    }
    /// Anything else (500).
    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(StatusCode::INTERNAL_SERVER_ERROR, "server_error", message)
    }

    /// An engine error: the request's fault (400) or the server's (500).
    pub fn from_engine(e: &EngineError) -> Self {
        match e {
            EngineError::InvalidRequest(_) => Self::invalid(e.to_string()),
            EngineError::ContextOverflow { .. } => Self::invalid(e.to_string()).with_code("context_length_exceeded"),
            EngineError::Cancelled => Self::cancelled(),
            _ => Self::internal(e.to_string()),
        }
    }

    /// The JSON error object.
    pub fn body(&self) -> Value {
        json!({ "error": { "message": self.message, "type": self.kind, "param": self.param, "code": self.code } })
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut response = (self.status, axum::Json(self.body())).into_response();
        if let Some(s) = self.retry_after {
            response.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(s));
        }
        response
    }
}
