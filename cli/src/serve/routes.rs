//! The endpoints: `GET /v1/models`, `GET /v1/models/{id}`, `POST /v1/chat/completions`,
//! `POST /v1/completions`, `GET /health`; everything else is an OpenAI-style 404/405.

use axum::extract::{DefaultBodyLimit, Path, State};
use axum::http::{Method, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{middleware, Json, Router};
use serde_json::{json, Value};
use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver};

use super::auth::require_key;
use super::error::ApiError;
use super::extract::ApiJson;
use super::openai::{ChatRequest, CompletionRequest};
use super::reply::{split, Reply};
use super::request::{prepare_chat, prepare_completion, Prepared};
use super::state::{AppState, ServedModel};
use super::stream;
use super::worker::JobEvent;

/// The server's routes.
pub fn router(app: AppState) -> Router {
    Router::new()
        .route("/v1/models", get(list_models))
        .route("/v1/models/{id}", get(get_model))
        .route("/v1/chat/completions", post(chat_completions))
        .route("/v1/completions", post(completions))
        .route("/health", get(health))
        .fallback(no_route)
        .method_not_allowed_fallback(wrong_method)
        .layer(middleware::from_fn_with_state(app.clone(), require_key))
        .layer(DefaultBodyLimit::max(app.max_body))
        .with_state(app)
}

fn model_object(m: &ServedModel) -> Value {
    let cfg = &m.parts.transformer.config;
    json!({
        "id": m.name,
        "object": "model",
        "created": m.loaded_at,
        "owned_by": "unmask",
        "unmask": {
            "arch": cfg.arch.gguf_name(),
            "diffusion": cfg.arch.is_diffusion(),
            "context": cfg.max_seq,
            "backend": m.backend,
            "generation_defaults": m.parts.generation,
            "queue": { "capacity": m.worker.capacity(), "waiting": m.worker.waiting() },
            "batch": m.worker.batch_report(),
        },
    })
}

async fn list_models(State(app): State<AppState>) -> Json<Value> {
    let data: Vec<Value> = app.models.iter().map(|m| model_object(m)).collect();
    Json(json!({ "object": "list", "data": data }))
}

async fn get_model(State(app): State<AppState>, Path(id): Path<String>) -> Result<Json<Value>, ApiError> {
    let model = app.model(&id)?;
    Ok(Json(model_object(&model)))
}

async fn health(State(app): State<AppState>) -> Json<Value> {
    Json(json!({ "status": if app.is_shutting_down() { "shutting_down" } else { "ok" } }))
}

async fn no_route(uri: Uri) -> ApiError {
    ApiError::no_route(uri.path())
}

async fn wrong_method(method: Method, uri: Uri) -> ApiError {
    ApiError::wrong_method(method.as_str(), uri.path())
}

async fn chat_completions(
    State(app): State<AppState>,
    ApiJson(req): ApiJson<ChatRequest>,
) -> Result<Response, ApiError> {
    let model = app.model(&req.model)?;
    let prepared = off_runtime(move || prepare_chat(model, req)).await?;
    respond(app, prepared).await
}

async fn completions(
    State(app): State<AppState>,
    ApiJson(req): ApiJson<CompletionRequest>,
) -> Result<Response, ApiError> {
    let model = app.model(&req.model)?;
    let prepared = off_runtime(move || prepare_completion(model, req)).await?;
    respond(app, prepared).await
}

/// Tokenising and checking a request is CPU work: it runs off the async runtime's threads.
async fn off_runtime<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, ApiError> + Send + 'static,
) -> Result<T, ApiError> {
    tokio::task::spawn_blocking(f).await.map_err(|e| ApiError::internal(format!("checking the request: {e}")))?
}

/// Queues the job and answers: a stream of events, or the whole response once it is done.
async fn respond(app: AppState, prepared: Prepared) -> Result<Response, ApiError> {
    if app.is_shutting_down() {
        return Err(ApiError::shutting_down());
    }
    let (tx, rx) = unbounded_channel();
    let (job, reply) = split(prepared, tx);
    reply.model.worker.submit(job)?;
    if reply.stream {
        Ok(stream::events(app, reply, rx).into_response())
    } else {
        whole(app, reply, rx).await
    }
}

/// Waits for the job's end. If the client disconnects, this future is dropped with the channel,
/// which cancels the run.
async fn whole(app: AppState, mut reply: Reply, mut rx: UnboundedReceiver<JobEvent>) -> Result<Response, ApiError> {
    loop {
        match rx.recv().await {
            Some(JobEvent::Started { run_id, queued_s }) => reply.started(&app, run_id, queued_s),
            Some(JobEvent::Frame(_)) => {}
            Some(JobEvent::Finished(o)) => return Ok(Json(reply.full(&o)).into_response()),
            Some(JobEvent::Failed(e)) => return Err(e),
            None => return Err(ApiError::internal("the model's worker stopped")),
        }
    }
}
