//! Reading a JSON body so that every failure (too large, not JSON, wrong fields) is an
//! OpenAI-style error object rather than axum's plain-text rejection.

use axum::body::Bytes;
use axum::extract::{FromRequest, Request};
use axum::http::StatusCode;
use serde::de::DeserializeOwned;

use super::error::ApiError;
use super::state::AppState;

/// A JSON request body.
pub struct ApiJson<T>(pub T);

impl<T: DeserializeOwned> FromRequest<AppState> for ApiJson<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &AppState) -> Result<Self, ApiError> {
        let bytes = Bytes::from_request(req, state).await.map_err(|e| {
            if e.status() == StatusCode::PAYLOAD_TOO_LARGE {
                ApiError::too_large(state.max_body)
            } else {
                ApiError::invalid(format!("could not read the request body: {}", e.body_text()))
            }
        })?;
        serde_json::from_slice(&bytes).map(ApiJson).map_err(|e| ApiError::invalid(format!("invalid request body: {e}")))
    }
}
