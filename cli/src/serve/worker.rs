//! A model's worker: a few decoding slots, each a thread with its own session, take the model's
//! queued jobs oldest first, each recorded as a run. With more than one slot the slots' forwards
//! are packed into one (cross-request batching, `unmask_engine::backend::batch`), so concurrent
//! requests share each forward instead of waiting for each other's whole generation. Decoding
//! never waits on I/O: frames go to the client through an unbounded channel, the run's trace to
//! the store's background writer, and the run's final write happens on the async runtime while
//! the slot already decodes its next job.

use std::ops::ControlFlow;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use tokio::runtime::Handle;
use tokio::sync::mpsc::UnboundedSender;
use tokio_util::task::TaskTracker;
use unmask_engine::backend::batch::ForwardBatcher;
use unmask_engine::decode::{trim_at_stop, CancelFlag, DecodeSettings, StepFrame, TokenState};
use unmask_engine::run::{BackendSpec, RunOutcome, Session};
use unmask_engine::EngineError;
use unmask_store::{ModelRecord, NewRun, RunMetrics, RunRecorder, Store};

use super::error::ApiError;
use super::queue::{JobQueue, PushError};

/// One generation waiting for, or being run by, a worker.
pub struct Job {
    pub ids: Vec<u32>,
    pub settings: DecodeSettings,
    pub stop_ids: Vec<u32>,
    /// What the run records as its prompt.
    pub prompt_text: String,
    /// Whether the client wants every step (streaming) or only the end.
    pub want_frames: bool,
    /// Events to the request's handler; closed when the client has gone.
    pub events: UnboundedSender<JobEvent>,
    pub queued_at: Instant,
}

/// What a handler hears about its job.
#[derive(Debug)]
pub enum JobEvent {
    /// Decoding starts (`run_id` when runs are recorded).
    Started { run_id: Option<i64>, queued_s: f64 },
    /// One denoising step (only when the job wants frames).
    Frame(Box<StepFrame>),
    /// The run finished and is recorded.
    Finished(Box<RunOutcome>),
    /// The run could not start, failed or was cancelled by the server.
    Failed(ApiError),
}

/// Where and as what a worker records its runs.
#[derive(Clone)]
pub struct Recording {
    pub store: Store,
    /// The model's store record (runs link to it), if it has one.
    pub model: Option<ModelRecord>,
    /// The draft model its runs decode with (stored with their speculative-decoding counters).
    pub draft: Option<String>,
}

/// A model's decoding slots and their queue.
pub struct Worker {
    name: String,
    queue: Arc<JobQueue<Job>>,
    /// The cancel flags of the jobs being run, one place per slot.
    running: Arc<Mutex<Vec<Option<CancelFlag>>>>,
    service: Arc<ServiceTime>,
    threads: Mutex<Vec<JoinHandle<()>>>,
    batcher: Option<Arc<ForwardBatcher>>,
}

/// What a slot's thread needs besides its session.
#[derive(Clone)]
struct Context {
    name: String,
    slot: usize,
    backend: BackendSpec,
    queue: Arc<JobQueue<Job>>,
    running: Arc<Mutex<Vec<Option<CancelFlag>>>>,
    service: Arc<ServiceTime>,
    recording: Option<Recording>,
    /// The batcher the slots' sessions share (more than one slot).
    batcher: Option<Arc<ForwardBatcher>>,
    rt: Handle,
    tracker: TaskTracker,
}

/// The sessions a worker decodes with: one per slot, sharing `batcher` when there are several.
pub struct Slots {
    pub sessions: Vec<Session>,
    pub batcher: Option<Arc<ForwardBatcher>>,
}

impl Worker {
    /// Starts one thread per session of `slots` for a model, with a queue of `capacity` jobs.
    pub fn spawn(
        name: &str,
        slots: Slots,
        capacity: usize,
        recording: Option<Recording>,
        rt: Handle,
        tracker: TaskTracker,
    ) -> std::io::Result<Worker> {
        let queue = Arc::new(JobQueue::new(capacity));
        let running = Arc::new(Mutex::new(vec![None; slots.sessions.len()]));
        let service = Arc::new(ServiceTime::default());
        let mut threads = Vec::new();
        for (slot, session) in slots.sessions.into_iter().enumerate() {
            let ctx = Context {
                name: name.to_owned(),
                slot,
                backend: session.backend().clone(),
                queue: queue.clone(),
                running: running.clone(),
                service: service.clone(),
                recording: recording.clone(),
                batcher: slots.batcher.clone(),
                rt: rt.clone(),
                tracker: tracker.clone(),
            };
            let spawned =
                std::thread::Builder::new().name(format!("serve-{name}-{slot}")).spawn(move || work(session, ctx));
            match spawned {
                Ok(t) => threads.push(t),
                Err(e) => {
                    // The slots already started end with the closed queue.
                    queue.close();
                    return Err(e);
                }
            }
        }
        let batcher = slots.batcher;
        Ok(Worker { name: name.to_owned(), queue, running, service, threads: Mutex::new(threads), batcher })
    }

    /// Queues a job: 429 when the queue is full, 503 when the server is shutting down.
    pub fn submit(&self, job: Job) -> Result<(), ApiError> {
        let job = match self.queue.push(job) {
            Ok(_) => return Ok(()),
            Err(PushError::Closed(_)) => return Err(ApiError::shutting_down()),
            // Places held by clients that have left are freed before saying no.
            Err(PushError::Full(job)) if self.queue.remove_where(|j| j.events.is_closed()) > 0 => job,
            Err(PushError::Full(_)) => return Err(self.full()),
        };
        match self.queue.push(job) {
            Ok(_) => Ok(()),
            Err(PushError::Closed(_)) => Err(ApiError::shutting_down()),
            Err(PushError::Full(_)) => Err(self.full()),
        }
    }

    fn full(&self) -> ApiError {
        ApiError::queue_full(&self.name, self.queue.capacity(), self.retry_after_s())
    }

    /// Seconds until a place in the queue is likely free: the waiting jobs at the recent
    /// service time (jobs finished per second over all slots), at least 1 (what `Retry-After`
    /// says).
    pub fn retry_after_s(&self) -> u64 {
        let slots = self.running.lock().unwrap_or_else(|e| e.into_inner()).len().max(1);
        let wait = (self.queue.len() + 1) as f64 * self.service.seconds() / slots as f64;
        (wait.ceil() as u64).clamp(1, 60)
    }

    /// How many jobs may wait.
    pub fn capacity(&self) -> usize {
        self.queue.capacity()
    }

    /// Jobs waiting.
    pub fn waiting(&self) -> usize {
        self.queue.len()
    }

    /// Decoding slots, the jobs running in them, and how packed their forwards have been.
    pub fn batch_report(&self) -> serde_json::Value {
        let running = self.running.lock().unwrap_or_else(|e| e.into_inner());
        let c = self.batcher.as_ref().map(|b| b.counters()).unwrap_or_default();
        serde_json::json!({
            "slots": running.len(),
            "running": running.iter().flatten().count(),
            "packed_forwards": c.batches,
            "sequence_forwards": c.forwards,
            "largest": c.largest,
            "first_token_forwards": c.passed_over,
        })
    }

    /// Stops taking jobs; the waiting ones are answered 503 (they never ran, nothing is recorded).
    /// The jobs being run go on.
    pub fn close(&self) {
        for job in self.queue.close() {
            let _ = job.events.send(JobEvent::Failed(ApiError::shutting_down()));
        }
    }

    /// Cancels the jobs being run (each is recorded as cancelled with its partial answer).
    pub fn cancel_running(&self) {
        for flag in self.running.lock().unwrap_or_else(|e| e.into_inner()).iter().flatten() {
            flag.cancel();
        }
    }

    /// Waits for the slots' threads to end (after [`close`](Self::close)).
    pub fn join(&self) {
        let threads = std::mem::take(&mut *self.threads.lock().unwrap_or_else(|e| e.into_inner()));
        for t in threads {
            if t.join().is_err() {
                tracing::error!(model = %self.name, "a worker thread panicked");
            }
        }
    }
}

/// Recent seconds per job (exponential moving average), for `Retry-After`.
#[derive(Default)]
struct ServiceTime(AtomicU64);

impl ServiceTime {
    fn observe(&self, d: Duration) {
        let old = self.seconds();
        let new = if old == 0.0 { d.as_secs_f64() } else { 0.8 * old + 0.2 * d.as_secs_f64() };
        self.0.store(new.to_bits(), Ordering::Relaxed);
    }
    fn seconds(&self) -> f64 {
        f64::from_bits(self.0.load(Ordering::Relaxed))
    }
}

fn work(mut session: Session, ctx: Context) {
    while let Some(job) = ctx.queue.pop() {
        if job.events.is_closed() {
            // The client left while the job waited: nothing ran, so nothing is recorded.
            tracing::debug!(model = %ctx.name, "dropped a queued request whose client disconnected");
            continue;
        }
        let cancel = CancelFlag::new();
        set_running(&ctx, Some(cancel.clone()));
        let started = Instant::now();
        run_job(&mut session, job, cancel, &ctx);
        ctx.service.observe(started.elapsed());
        set_running(&ctx, None);
    }
    tracing::debug!(model = %ctx.name, "worker stopped");
}

fn set_running(ctx: &Context, flag: Option<CancelFlag>) {
    if let Some(place) = ctx.running.lock().unwrap_or_else(|e| e.into_inner()).get_mut(ctx.slot) {
        *place = flag;
    }
}

fn run_job(session: &mut Session, job: Job, cancel: CancelFlag, ctx: &Context) {
    let Job { ids, settings, stop_ids, prompt_text, want_frames, events, queued_at } = job;
    let queued_s = queued_at.elapsed().as_secs_f64();
    let mut recorder = match &ctx.recording {
        Some(r) => {
            let new = match &r.model {
                Some(m) => NewRun::new(m, &ctx.backend, &prompt_text, settings.clone()),
                None => NewRun {
                    model_id: None,
                    model_name: ctx.name.clone(),
                    backend: ctx.backend.clone(),
                    prompt: prompt_text.clone(),
                    settings: settings.clone(),
                },
            };
            match ctx.rt.block_on(r.store.start_run(new)) {
                Ok(rec) => Some(rec),
                Err(e) => {
                    tracing::error!(model = %ctx.name, error = %e, "recording a run failed");
                    let _ = events.send(JobEvent::Failed(ApiError::internal(format!("recording the run: {e}"))));
                    return;
                }
            }
        }
        None => None,
    };
    let run_id = recorder.as_ref().map(RunRecorder::id);
    let _ = events.send(JobEvent::Started { run_id, queued_s });

    let prompt_len = ids.len();
    // The generated tokens committed so far: the partial answer of a cancelled run.
    let mut partial: Vec<Option<u32>> = vec![None; settings.gen_length];
    let mut frames = 0u64;
    let started = Instant::now();
    let result = {
        // Packed forwards wait for this run's blocks from here until it ends (and no longer).
        let batching = ctx.batcher.as_ref().map(|b| b.join());
        // A streaming client waits for its first token: until the answer's first token is final
        // (what starts its text), this run's blocks go ahead of the pack's.
        let mut awaiting_first_token = want_frames;
        if let Some(b) = batching.as_ref().filter(|_| awaiting_first_token) {
            b.go_ahead(true);
        }
        let mut on_frame = |f: &StepFrame| {
            frames += 1;
            if let Some(r) = recorder.as_mut() {
                r.record(f);
            }
            for c in &f.changes {
                if let Some(slot) = c.pos.checked_sub(prompt_len).and_then(|i| partial.get_mut(i)) {
                    *slot = (c.state != TokenState::Masked).then_some(c.token);
                }
                if awaiting_first_token && c.pos == prompt_len && c.state == TokenState::Stable {
                    awaiting_first_token = false;
                    if let Some(b) = &batching {
                        b.go_ahead(false);
                    }
                }
            }
            if events.is_closed() {
                // The client disconnected: the engine stops before its next step.
                cancel.cancel();
            } else if want_frames {
                let _ = events.send(JobEvent::Frame(Box::new(f.clone())));
            }
            ControlFlow::Continue(())
        };
        session.run(&ids, &settings, &cancel, &mut on_frame)
    };
    let partial = matches!(result, Err(EngineError::Cancelled)).then(|| {
        let tokens: Vec<u32> = partial.iter().map_while(|t| *t).collect();
        let answer = trim_at_stop(&tokens, &stop_ids);
        unmask_store::RunOutcome {
            output: session.model().tokenizer.decode(answer, true),
            output_tokens: tokens,
            metrics: RunMetrics {
                wall_s: Some(started.elapsed().as_secs_f64()),
                steps: Some(frames),
                ..Default::default()
            },
            stop_reason: Some("caller_stopped".into()),
        }
    });
    let ending =
        Ending { model: ctx.name.clone(), run_id, recorder, recording: ctx.recording.clone(), result, partial, events };
    // The final write runs on the runtime; the tracker lets shutdown wait for it.
    ctx.tracker.spawn_on(ending.write(), &ctx.rt);
}

/// A run id for logs (`-` when runs are not recorded).
fn run_label(run_id: Option<i64>) -> String {
    run_id.map_or_else(|| "-".to_owned(), |id| id.to_string())
}

/// A decode's end, to be recorded and then told to the client.
struct Ending {
    model: String,
    run_id: Option<i64>,
    recorder: Option<RunRecorder>,
    recording: Option<Recording>,
    result: unmask_engine::Result<RunOutcome>,
    partial: Option<unmask_store::RunOutcome>,
    events: UnboundedSender<JobEvent>,
}

impl Ending {
    async fn write(self) {
        let Ending { model, run_id, recorder, recording, result, partial, events } = self;
        let event = match result {
            Ok(outcome) => {
                let saved = match (recorder, recording) {
                    (Some(mut rec), Some(r)) => {
                        let id = rec.id();
                        let (stored, timeline) = unmask_store::recorded_outcome(&outcome);
                        if let Some(t) = timeline {
                            rec.set_timeline(t);
                        }
                        match rec.finish(stored).await {
                            Ok(_) => r.store.put_run_counters(id, &outcome, r.draft.as_deref()).await,
                            Err(e) => Err(e),
                        }
                    }
                    _ => Ok(()),
                };
                match saved {
                    Ok(()) => {
                        tracing::info!(
                            model = %model, run = %run_label(run_id), answer_tokens = outcome.answer_tokens,
                            steps = outcome.output.steps, wall_ms = (outcome.output.wall_s * 1e3).round(), "completed"
                        );
                        JobEvent::Finished(Box::new(outcome))
                    }
                    Err(e) => {
                        tracing::error!(model = %model, run = %run_label(run_id), error = %e, "saving a run failed");
                        JobEvent::Failed(ApiError::internal(format!("saving the run: {e}")))
                    }
                }
            }
            Err(EngineError::Cancelled) => {
                if let Some(rec) = recorder {
                    if let Err(e) = rec.cancel(partial).await {
                        tracing::error!(model = %model, run = %run_label(run_id), error = %e, "saving a cancelled run failed");
                    }
                }
                tracing::info!(model = %model, run = %run_label(run_id), "cancelled");
                JobEvent::Failed(ApiError::cancelled())
            }
            Err(e) => {
                if let Some(rec) = recorder {
                    if let Err(err) = rec.fail(&e).await {
                        tracing::error!(model = %model, run = %run_label(run_id), error = %err, "saving a failed run failed");
                    }
                }
                tracing::warn!(model = %model, run = %run_label(run_id), error = %e, "failed");
                JobEvent::Failed(ApiError::from_engine(&e))
            }
        };
        let _ = events.send(event);
    }
}
