//! `unmask serve`: an OpenAI-compatible HTTP server (`/v1/models`, `/v1/chat/completions`,
//! `/v1/completions`, streaming or not) over the same run pipeline as `generate`: each loaded
//! model gets one worker thread with a bounded FIFO queue, and every run is recorded in the
//! store unless `--no-record`. Built on axum/hyper and tokio; see docs/serve.md.
//!
//! Modules: `routes` (endpoints) → `extract` (JSON bodies) → `request` (OpenAI request → checked
//! job) → `worker` + `queue` (one thread per model) → `reply` / `stream` / `text` (responses,
//! SSE chunks, the stable text prefix); `auth` (API key, bind policy), `error` (OpenAI error
//! objects), `state` (what handlers share).

mod auth;
mod error;
mod extract;
mod openai;
mod queue;
mod reply;
mod request;
mod routes;
mod state;
mod stream;
mod text;
mod worker;

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use clap::Args;
use tokio::runtime::Handle;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use unmask_engine::backend::batch::ForwardBatcher;
use unmask_engine::backend::cpu::CpuBackend;
use unmask_engine::decode::spec_ar::{check_pair, SpecArSettings};
use unmask_engine::run::{BackendSpec, ModelParts, Session};
use unmask_store::Store;

use crate::args::{BackendArgs, DraftArgs};
use crate::data::{self, Data, ResolvedModel};
use crate::exit::{fail, USAGE};
use state::{AppState, ServedModel};
use worker::{Recording, Slots, Worker};

/// Flags of `unmask serve`.
#[derive(Args, Debug)]
pub struct ServeArgs {
    /// Model to serve: a directory or .gguf path, a store name or an embedded name; repeat the
    /// flag to serve several (clients name each by its name) [default: the embedded tiny-llada].
    #[arg(long = "model", short = 'm', value_name = "MODEL")]
    pub models: Vec<String>,
    #[command(flatten)]
    pub backend: BackendArgs,
    /// Speculative decoding: every served autoregressive model that shares the draft's
    /// vocabulary decodes with it (diffusion models are served without it).
    #[command(flatten)]
    pub draft: DraftArgs,
    /// Address to listen on. Anything but loopback requires --api-key.
    #[arg(long, default_value = "127.0.0.1")]
    pub host: String,
    /// Port to listen on (0 = any free port; the address is printed on start).
    #[arg(long, default_value_t = 8080)]
    pub port: u16,
    /// Key every request must carry as `Authorization: Bearer KEY` [default: $UNMASK_API_KEY;
    /// without one, only loopback addresses are allowed].
    #[arg(long, value_name = "KEY")]
    pub api_key: Option<String>,
    /// Requests that may wait per model while one runs; more are answered 429 with Retry-After.
    #[arg(long, value_name = "N", default_value_t = 16, value_parser = clap::value_parser!(u16).range(1..=4096))]
    pub queue: u16,
    /// Requests per model decoded together, their forwards packed into one (cross-request
    /// batching, cpu backend only); 1 decodes one request at a time [default: 16 on the cpu
    /// backend, 1 on the others].
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u16).range(1..=256))]
    pub batch: Option<u16>,
    /// Largest request body in bytes (larger ones are answered 413).
    #[arg(long, value_name = "BYTES", default_value_t = 1 << 20)]
    pub max_request_bytes: usize,
    /// Seconds running generations get to finish after SIGTERM or Ctrl-C before they are
    /// cancelled (a second signal cancels them at once).
    #[arg(long, value_name = "SECONDS", default_value_t = 10.0)]
    pub shutdown_grace: f64,
    /// Do not record runs in the store.
    #[arg(long)]
    pub no_record: bool,
}

/// A model ready to serve.
struct Loaded {
    resolved: ResolvedModel,
    parts: Arc<ModelParts>,
    /// The draft it decodes with, when `--draft` pairs with it.
    draft: Option<Arc<Draft>>,
}

/// The `--draft` model, loaded once and shared by every slot of every model it drafts for.
struct Draft {
    name: String,
    parts: Arc<ModelParts>,
    settings: SpecArSettings,
}

/// Runs `unmask serve` until SIGTERM or Ctrl-C.
pub fn run(args: ServeArgs, data_dir: Option<&Path>) -> Result<()> {
    init_logging();
    let api_key = match args.api_key.clone() {
        Some(k) if k.trim().is_empty() => return Err(fail(USAGE, "--api-key is empty")),
        Some(k) => Some(k),
        None => std::env::var("UNMASK_API_KEY").ok().filter(|k| !k.trim().is_empty()),
    };
    if !(args.shutdown_grace.is_finite() && args.shutdown_grace >= 0.0) {
        return Err(fail(USAGE, format!("--shutdown-grace {} must be a number of seconds >= 0", args.shutdown_grace)));
    }
    let spec = args.backend.spec()?;
    let batch = match (args.batch, &spec) {
        (Some(n), BackendSpec::Cpu) => usize::from(n),
        (None, BackendSpec::Cpu) => 16,
        (Some(n), other) if n > 1 => {
            return Err(fail(
                USAGE,
                format!("--batch {n}: cross-request batching runs on the cpu backend only, not on {other}"),
            ))
        }
        _ => 1,
    };
    let dir = data::data_dir(data_dir)?;
    let (models, draft) = resolve_models(&args.models, args.draft.draft.as_deref(), args.no_record, &dir)?;
    let mut loaded = Vec::new();
    for resolved in models {
        let parts =
            ModelParts::load(&resolved.path).with_context(|| format!("loading model {}", resolved.path.display()))?;
        loaded.push(Loaded { resolved, parts: Arc::new(parts), draft: None });
    }
    if let Some(resolved) = draft {
        pair_draft(&mut loaded, resolved, args.draft.settings())?;
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("unmask-serve")
        .enable_all()
        .build()
        .context("starting the server runtime")?;
    rt.block_on(serve(args, spec, batch, api_key, &dir, loaded))
}

/// The models named by `--model` (or the default), each once, and the `--draft` model.
fn resolve_models(
    wanted: &[String],
    draft: Option<&str>,
    no_record: bool,
    dir: &Path,
) -> Result<(Vec<ResolvedModel>, Option<ResolvedModel>)> {
    let data = if no_record { None } else { Some(Data::open(dir)?) };
    let names: Vec<Option<&str>> =
        if wanted.is_empty() { vec![None] } else { wanted.iter().map(|w| Some(w.as_str())).collect() };
    let mut out: Vec<ResolvedModel> = Vec::new();
    for name in names {
        let r = data::resolve_model_in(name, data.as_ref(), dir)?;
        if out.iter().any(|o| o.name == r.name) {
            return Err(fail(USAGE, format!("two --model flags name the model `{}`", r.name)));
        }
        out.push(r);
    }
    let draft = draft.map(|d| data::resolve_model_in(Some(d), data.as_ref(), dir)).transpose()?;
    Ok((out, draft))
}

/// Loads the `--draft` model and gives it to every served autoregressive model it pairs with.
/// A causal model it cannot draft for (another vocabulary), or no causal model at all, is a
/// usage error: the flag would otherwise silently do nothing.
fn pair_draft(loaded: &mut [Loaded], resolved: ResolvedModel, settings: SpecArSettings) -> Result<()> {
    let flag = format!("--draft {}", resolved.name);
    settings.validate().map_err(|e| fail(USAGE, format!("{flag}: {e}")))?;
    let parts = ModelParts::load(&resolved.path)
        .with_context(|| format!("loading the draft model {}", resolved.path.display()))?;
    let draft = Arc::new(Draft { name: resolved.name, parts: Arc::new(parts), settings });
    for l in loaded.iter_mut() {
        let target = &l.parts.transformer.config;
        if target.arch.is_diffusion() {
            tracing::info!(model = %l.resolved.name, "a diffusion model: served without the draft model");
            continue;
        }
        check_pair(target, &draft.parts.transformer.config)
            .map_err(|e| fail(USAGE, format!("{flag} for model {}: {e}", l.resolved.name)))?;
        l.draft = Some(draft.clone());
    }
    if loaded.iter().all(|l| l.draft.is_none()) {
        return Err(fail(
            USAGE,
            format!(
                "{flag}: no served model is autoregressive; speculative decoding with a draft model is for \
                 autoregressive targets (serve one with --model, e.g. tiny-ar)"
            ),
        ));
    }
    Ok(())
}

async fn serve(
    args: ServeArgs,
    spec: BackendSpec,
    batch: usize,
    api_key: Option<String>,
    dir: &Path,
    loaded: Vec<Loaded>,
) -> Result<()> {
    let addrs: Vec<SocketAddr> = tokio::net::lookup_host((args.host.as_str(), args.port))
        .await
        .map_err(|e| fail(USAGE, format!("--host {}: {e}", args.host)))?
        .collect();
    auth::check_bind(&addrs, api_key.as_deref()).map_err(|m| fail(USAGE, m))?;
    let listener = tokio::net::TcpListener::bind(addrs.as_slice())
        .await
        .with_context(|| format!("listening on {}:{}", args.host, args.port))?;
    let local = listener.local_addr()?;
    let store = match args.no_record {
        true => None,
        false => Some(Store::open(dir.to_owned()).await.with_context(|| {
            format!("opening the store in {} (use --no-record to serve without it)", dir.display())
        })?),
    };

    let tracker = TaskTracker::new();
    let mut models = Vec::new();
    for Loaded { resolved, parts, draft } in loaded {
        let mut slots = if batch > 1 {
            let batcher = ForwardBatcher::new(Box::new(CpuBackend::new(parts.transformer.clone())));
            let sessions = (0..batch).map(|_| Session::open_batched(parts.clone(), &spec, &batcher)).collect();
            Slots { sessions, batcher: Some(batcher) }
        } else {
            let session = Session::open(parts.clone(), &spec)
                .with_context(|| format!("starting backend {spec} for {}", resolved.name))?;
            Slots { sessions: vec![session], batcher: None }
        };
        if let Some(d) = &draft {
            for session in &mut slots.sessions {
                session.set_draft(d.parts.clone(), d.settings.clone()).map_err(|e| fail(USAGE, e.to_string()))?;
            }
        }
        let draft_name = draft.as_ref().map(|d| d.name.clone());
        let recording = store.as_ref().map(|s| Recording {
            store: s.clone(),
            model: resolved.record.clone(),
            draft: draft_name.clone(),
        });
        let worker = Worker::spawn(
            &resolved.name,
            slots,
            usize::from(args.queue),
            recording,
            Handle::current(),
            tracker.clone(),
        )
        .context("starting a worker thread")?;
        models.push(Arc::new(ServedModel {
            name: resolved.name,
            parts,
            backend: spec.clone(),
            draft: draft_name,
            worker,
            loaded_at: state::unix_now(),
        }));
    }
    let names: Vec<String> = models
        .iter()
        .map(|m| match &m.draft {
            Some(d) => format!("{} (draft {d})", m.name),
            None => m.name.clone(),
        })
        .collect();
    let app = AppState::new(models, api_key, args.max_request_bytes);
    // Tests and scripts read the address from this line (with --port 0 it is the only place).
    eprintln!(
        "unmask serve: listening on http://{local} (models: {}; backend {spec}; queue {} per model; {} decoded together; {}{})",
        names.join(", "),
        args.queue,
        batch,
        if store.is_some() { "recording runs" } else { "not recording" },
        if app.api_key.is_some() { "; API key required" } else { "" }
    );

    let shutdown = CancellationToken::new();
    let force = CancellationToken::new();
    tokio::spawn(watch_signals(shutdown.clone(), force.clone()));
    let server =
        axum::serve(listener, routes::router(app.clone())).with_graceful_shutdown(shutdown.clone().cancelled_owned());
    let mut server = tokio::spawn(async move { server.await });

    tokio::select! {
        r = &mut server => {
            // The server ended by itself (it only does on an accept error).
            shutdown.cancel();
            r.context("the server task")?.context("serving")?;
        }
        _ = shutdown.cancelled() => {}
    }
    tracing::info!(
        grace_s = args.shutdown_grace,
        "shutting down: queued requests are refused, running ones get the grace period"
    );
    app.begin_shutdown();
    if !server.is_finished() {
        tokio::select! {
            _ = &mut server => {}
            _ = tokio::time::sleep(Duration::from_secs_f64(args.shutdown_grace)) => {
                tracing::info!("grace period over: cancelling running generations");
                app.cancel_running();
            }
            _ = force.cancelled() => {
                tracing::info!("second signal: cancelling running generations");
                app.cancel_running();
            }
        }
    }
    if !server.is_finished() && tokio::time::timeout(Duration::from_secs(10), &mut server).await.is_err() {
        tracing::warn!("connections still open 10 s after the generations ended; closing them");
        server.abort();
    }
    let workers = app.clone();
    tokio::task::spawn_blocking(move || workers.join_workers()).await.context("joining the workers")?;
    // The last runs' final writes.
    tracker.close();
    tracker.wait().await;
    if let Some(s) = store {
        s.close().await;
    }
    eprintln!("unmask serve: stopped");
    Ok(())
}

/// First SIGTERM or Ctrl-C: graceful shutdown; a second one: cancel running generations.
async fn watch_signals(shutdown: CancellationToken, force: CancellationToken) {
    use tokio::signal::unix::{signal, SignalKind};
    let (Ok(mut term), Ok(mut int)) = (signal(SignalKind::terminate()), signal(SignalKind::interrupt())) else {
        tracing::error!("cannot listen for SIGTERM/SIGINT: stop the server with SIGKILL");
        return;
    };
    for token in [shutdown, force] {
        tokio::select! {
            _ = term.recv() => {}
            _ = int.recv() => {}
        }
        token.cancel();
    }
}

/// Logs to stderr; `UNMASK_LOG` filters (e.g. `UNMASK_LOG=debug`), default `info`.
fn init_logging() {
    use std::io::IsTerminal;
    use tracing_subscriber::EnvFilter;
    let filter = EnvFilter::try_from_env("UNMASK_LOG").unwrap_or_else(|_| EnvFilter::new("info"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .with_target(false)
        .try_init();
}
