//! [`RunRecorder`]: writes one run while it decodes. Frames are buffered on the decoding thread
//! (a clone, no I/O) and handed in batches to a background task that commits each batch in one
//! transaction, so tracing costs the decoder almost nothing.

use std::ops::ControlFlow;
use std::time::{Duration, Instant};

use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;
use unmask_engine::decode::StepFrame;

use crate::error::{Result, StoreError};
use crate::runs::{self, RunOutcome, RunRecord, RunStatus, StoredTimeline, TIMELINE_V1};
use crate::{now_ms, NewRun, RunId, Store};

/// When the recorder hands buffered frames to the database: after `max_frames` frames or when
/// the oldest buffered frame is `max_delay` old, whichever comes first (checked when a frame
/// arrives), and always at finish.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TraceBatching {
    pub max_frames: usize,
    pub max_delay: Duration,
}

impl Default for TraceBatching {
    fn default() -> Self {
        TraceBatching { max_frames: 32, max_delay: Duration::from_millis(250) }
    }
}

impl TraceBatching {
    /// One transaction per frame (for comparison; slow).
    pub fn unbatched() -> Self {
        TraceBatching { max_frames: 1, max_delay: Duration::ZERO }
    }
}

struct Final {
    status: RunStatus,
    outcome: Option<RunOutcome>,
    error: Option<String>,
    timeline: Option<StoredTimeline>,
}

enum Msg {
    Frames(Vec<StepFrame>),
    Flush(oneshot::Sender<Result<()>>),
    Finish(Box<Final>, oneshot::Sender<Result<()>>),
}

/// Writes one run: [`record`](Self::record) each frame during the decode, then
/// [`finish`](Self::finish), [`fail`](Self::fail) or [`cancel`](Self::cancel). Dropping it
/// without finishing marks the run `interrupted` (after writing the frames it has).
///
/// `record` is synchronous and cheap, so the recorder can be moved into a decoding thread
/// (`spawn_blocking`) and back.
pub struct RunRecorder {
    id: RunId,
    store: Store,
    tx: Option<mpsc::UnboundedSender<Msg>>,
    writer: Option<JoinHandle<()>>,
    buffer: Vec<StepFrame>,
    oldest: Option<Instant>,
    batching: TraceBatching,
    timeline: Option<StoredTimeline>,
    recorded: u64,
}

impl std::fmt::Debug for RunRecorder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunRecorder").field("id", &self.id).field("recorded", &self.recorded).finish()
    }
}

impl Store {
    /// Starts a run (status `running`) with default trace batching.
    pub async fn start_run(&self, new: NewRun) -> Result<RunRecorder> {
        self.start_run_with(new, TraceBatching::default()).await
    }

    /// Starts a run with the given trace batching.
    pub async fn start_run_with(&self, new: NewRun, batching: TraceBatching) -> Result<RunRecorder> {
        let settings = serde_json::to_string(&new.settings).map_err(|e| StoreError::Internal(e.to_string()))?;
        let now = now_ms();
        let owner = self.session_id().to_owned();
        let mut tx = self.write_tx().await?;
        if let Some(mid) = new.model_id {
            let r = sqlx::query!("UPDATE models SET last_used_at = ? WHERE id = ?", now, mid).execute(&mut *tx).await?;
            if r.rows_affected() == 0 {
                return Err(StoreError::not_found("model", mid));
            }
        }
        let backend = new.backend.to_string();
        let id = sqlx::query_scalar!(
            r#"INSERT INTO runs (model_id, model_name, backend, prompt, settings_json, status, started_at, owner)
               VALUES (?, ?, ?, ?, ?, 'running', ?, ?) RETURNING id AS "id!""#,
            new.model_id,
            new.model_name,
            backend,
            new.prompt,
            settings,
            now,
            owner
        )
        .fetch_one(&mut *tx)
        .await?;
        tx.commit().await?;
        let (sender, rx) = mpsc::unbounded_channel();
        let writer = tokio::spawn(write_loop(self.clone(), id, rx));
        Ok(RunRecorder {
            id,
            store: self.clone(),
            tx: Some(sender),
            writer: Some(writer),
            buffer: Vec::with_capacity(batching.max_frames.max(1)),
            oldest: None,
            batching,
            timeline: None,
            recorded: 0,
        })
    }
}

impl RunRecorder {
    /// The run's id.
    pub fn id(&self) -> RunId {
        self.id
    }

    /// Frames recorded so far.
    pub fn frames_recorded(&self) -> u64 {
        self.recorded
    }

    /// Records one frame (buffers a copy; hands a full batch to the writer without waiting).
    pub fn record(&mut self, frame: &StepFrame) {
        self.buffer.push(frame.clone());
        self.recorded += 1;
        let now = Instant::now();
        let oldest = *self.oldest.get_or_insert(now);
        if self.buffer.len() >= self.batching.max_frames || now.duration_since(oldest) >= self.batching.max_delay {
            self.hand_off();
        }
    }

    /// A frame callback for `unmask_engine::decode::generate` that records every frame.
    pub fn sink(&mut self) -> impl FnMut(&StepFrame) -> ControlFlow<()> + '_ {
        move |f| {
            self.record(f);
            ControlFlow::Continue(())
        }
    }

    /// A frame callback that records every frame, then calls `inner` (e.g. to stream to a UI).
    pub fn sink_with<'a>(
        &'a mut self,
        mut inner: impl FnMut(&StepFrame) -> ControlFlow<()> + 'a,
    ) -> impl FnMut(&StepFrame) -> ControlFlow<()> + 'a {
        move |f| {
            self.record(f);
            inner(f)
        }
    }

    /// Attaches a vNPU timeline, written with the final status.
    pub fn set_timeline(&mut self, timeline: StoredTimeline) {
        self.timeline = Some(timeline);
    }

    /// Writes everything recorded so far and waits until it is committed.
    pub async fn flush(&mut self) -> Result<()> {
        self.hand_off();
        let (reply, rx) = oneshot::channel();
        self.send(Msg::Flush(reply))?;
        rx.await.map_err(|_| StoreError::Internal("run writer stopped".into()))?
    }

    /// Ends the run as `completed` with its output and metrics.
    pub async fn finish(self, outcome: RunOutcome) -> Result<RunRecord> {
        self.end(RunStatus::Completed, Some(outcome), None).await
    }

    /// Ends the run as `failed` with an error message (the trace so far is kept).
    pub async fn fail(self, error: impl std::fmt::Display) -> Result<RunRecord> {
        self.end(RunStatus::Failed, None, Some(error.to_string())).await
    }

    /// Ends the run as `cancelled`, with whatever partial outcome the caller has.
    pub async fn cancel(self, partial: Option<RunOutcome>) -> Result<RunRecord> {
        self.end(RunStatus::Cancelled, partial, None).await
    }

    async fn end(mut self, status: RunStatus, outcome: Option<RunOutcome>, error: Option<String>) -> Result<RunRecord> {
        self.hand_off();
        let (reply, rx) = oneshot::channel();
        let fin = Final { status, outcome, error, timeline: self.timeline.take() };
        self.send(Msg::Finish(Box::new(fin), reply))?;
        self.tx = None;
        let result = rx.await.map_err(|_| StoreError::Internal("run writer stopped".into()))?;
        if let Some(w) = self.writer.take() {
            let _ = w.await;
        }
        result?;
        self.store.run_detail(self.id).await
    }

    fn hand_off(&mut self) {
        self.oldest = None;
        if self.buffer.is_empty() {
            return;
        }
        let frames = std::mem::replace(&mut self.buffer, Vec::with_capacity(self.batching.max_frames.max(1)));
        if let Some(tx) = &self.tx {
            // If the writer is gone the error surfaces at flush/finish.
            let _ = tx.send(Msg::Frames(frames));
        }
    }

    fn send(&self, msg: Msg) -> Result<()> {
        self.tx
            .as_ref()
            .ok_or_else(|| StoreError::Internal("run already finished".into()))?
            .send(msg)
            .map_err(|_| StoreError::Internal("run writer stopped".into()))
    }
}

impl Drop for RunRecorder {
    fn drop(&mut self) {
        if self.tx.is_some() {
            // Not finished: hand over what we have; the writer sees the channel close and marks
            // the run interrupted.
            self.hand_off();
            self.tx = None;
        }
    }
}

/// The background writer of one run.
async fn write_loop(store: Store, id: RunId, mut rx: mpsc::UnboundedReceiver<Msg>) {
    let mut first_error: Option<StoreError> = None;
    loop {
        match rx.recv().await {
            Some(Msg::Frames(frames)) => {
                if let Err(e) = store.append_trace(id, &frames).await {
                    tracing::warn!(run = id, error = %e, "writing trace frames failed");
                    first_error.get_or_insert(e);
                }
            }
            Some(Msg::Flush(reply)) => {
                let _ = reply.send(first_error.take().map_or(Ok(()), Err));
            }
            Some(Msg::Finish(fin, reply)) => {
                let r = finalize(&store, id, *fin).await;
                let r = match first_error.take() {
                    Some(e) => Err(e),
                    None => r,
                };
                let _ = reply.send(r);
                return;
            }
            None => {
                let fin = Final {
                    status: RunStatus::Interrupted,
                    outcome: None,
                    error: Some("the run's recorder was dropped before the run finished".into()),
                    timeline: None,
                };
                if let Err(e) = finalize(&store, id, fin).await {
                    tracing::warn!(run = id, error = %e, "marking an abandoned run interrupted failed");
                }
                return;
            }
        }
    }
}

/// Writes the final state of a run (and its timeline) in one transaction.
async fn finalize(store: &Store, id: RunId, fin: Final) -> Result<()> {
    let now = now_ms();
    let status = fin.status.as_str();
    let o = fin.outcome.unwrap_or_default();
    let has_outcome = !o.output.is_empty() || !o.output_tokens.is_empty() || o.metrics != Default::default();
    let output = has_outcome.then_some(o.output);
    let tokens = if has_outcome {
        Some(serde_json::to_string(&o.output_tokens).map_err(|e| StoreError::Internal(e.to_string()))?)
    } else {
        None
    };
    let m = o.metrics;
    let steps = m.steps.map(|v| v as i64);
    let forwards = m.forwards.map(|v| v as i64);
    let answer_tokens = m.answer_tokens.map(|v| v.min(i64::MAX as u64) as i64);
    let timeline = fin.timeline.as_ref().map(runs::encode_timeline).transpose()?;
    let mut tx = store.write_tx().await?;
    if let Some(data) = timeline {
        sqlx::query!(
            r#"INSERT INTO run_timelines (run_id, encoding, data) VALUES (?, ?, ?)
               ON CONFLICT (run_id) DO UPDATE SET encoding = excluded.encoding, data = excluded.data"#,
            id,
            TIMELINE_V1,
            data
        )
        .execute(&mut *tx)
        .await?;
    }
    sqlx::query!(
        r#"UPDATE runs SET status = ?, output = ?, output_tokens_json = ?, error = ?, stop_reason = ?,
                           finished_at = ?, wall_s = ?, steps = ?, forwards = ?, tokens_per_forward = ?,
                           simulated_npu_s = ?, energy_mj = ?, answer_tokens = ?, owner = NULL
           WHERE id = ?"#,
        status,
        output,
        tokens,
        fin.error,
        o.stop_reason,
        now,
        m.wall_s,
        steps,
        forwards,
        m.tokens_per_forward,
        m.simulated_npu_s,
        m.energy_mj,
        answer_tokens,
        id
    )
    .execute(&mut *tx)
    .await?;
    tx.commit().await?;
    Ok(())
}
