//! Who may talk to the server: anyone on this machine by default (loopback only); on any other
//! address only holders of the API key, which every request must then carry as
//! `Authorization: Bearer KEY`.

use std::net::SocketAddr;

use axum::extract::{Request, State};
use axum::http::header::AUTHORIZATION;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::error::ApiError;
use super::state::AppState;

/// Refuses to listen beyond this machine without a key.
pub fn check_bind(addrs: &[SocketAddr], api_key: Option<&str>) -> Result<(), String> {
    let open: Vec<String> = addrs.iter().filter(|a| !a.ip().is_loopback()).map(|a| a.ip().to_string()).collect();
    if open.is_empty() || api_key.is_some() {
        Ok(())
    } else {
        Err(format!(
            "{} is reachable from other machines: pass --api-key KEY (or set UNMASK_API_KEY) so only clients with the key are served",
            open.join(", ")
        ))
    }
}

/// Compares without an early exit, so the time taken does not tell how much of a guess was right.
fn same_secret(given: &[u8], key: &[u8]) -> bool {
    given.len() == key.len() && given.iter().zip(key).fold(0u8, |acc, (a, b)| acc | (a ^ b)) == 0
}

/// Middleware: with a key configured, requests without it get 401 (`/health` stays open).
pub async fn require_key(State(app): State<AppState>, req: Request, next: Next) -> Response {
    let Some(key) = app.api_key.as_deref() else { return next.run(req).await };
    if req.uri().path() == "/health" {
        return next.run(req).await;
    }
    let given = req
        .headers()
        .get(AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::trim);
    match given {
        Some(g) if same_secret(g.as_bytes(), key.as_bytes()) => next.run(req).await,
        _ => ApiError::unauthorized().into_response(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_loopback_goes_without_a_key() {
        let lo: SocketAddr = "127.0.0.1:8080".parse().expect("addr");
        let lo6: SocketAddr = "[::1]:8080".parse().expect("addr");
        let any: SocketAddr = "0.0.0.0:8080".parse().expect("addr");
        assert!(check_bind(&[lo, lo6], None).is_ok());
        assert!(check_bind(&[any], None).is_err());
        assert!(check_bind(&[any], Some("k")).is_ok());
        assert!(same_secret(b"abc", b"abc") && !same_secret(b"abd", b"abc") && !same_secret(b"ab", b"abc"));
    }
}
