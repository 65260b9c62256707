//! The runs table: one row per decoding run with its settings, output and metrics; traces and
//! timelines hang off it. Writing happens through [`crate::RunRecorder`].

use std::collections::BTreeMap;
use std::io::{Read, Write};

use flate2::read::DeflateDecoder;
use flate2::write::DeflateEncoder;
use flate2::Compression;
use serde::{Deserialize, Serialize};
use unmask_engine::decode::{DecodeOutput, DecodeSettings, StepFrame};
use unmask_engine::run::BackendSpec;
use unmask_engine::trace::{LanePower, Timeline};

use crate::error::{Result, StoreError};
use crate::models::ModelRecord;
use crate::trace_codec;
use crate::{ModelId, RunId, Store, UnixMillis};

/// Lifecycle of a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RunStatus {
    /// Being decoded (or its writer died and recovery has not run yet).
    Running,
    Completed,
    /// Ended with an error (see `error`).
    Failed,
    /// Stopped by the user.
    Cancelled,
    /// Its process ended before the run finished (crash, kill); found by recovery on open.
    Interrupted,
}

impl RunStatus {
    /// The stored name.
    pub fn as_str(self) -> &'static str {
        match self {
            RunStatus::Running => "running",
            RunStatus::Completed => "completed",
            RunStatus::Failed => "failed",
            RunStatus::Cancelled => "cancelled",
            RunStatus::Interrupted => "interrupted",
        }
    }
    fn parse(s: &str) -> Result<Self> {
        Ok(match s {
            "running" => RunStatus::Running,
            "completed" => RunStatus::Completed,
            "failed" => RunStatus::Failed,
            "cancelled" => RunStatus::Cancelled,
            "interrupted" => RunStatus::Interrupted,
            other => return Err(StoreError::corrupt("runs.status", format!("unknown status `{other}`"))),
        })
    }
}

/// Measured (and simulated) cost of a run.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RunMetrics {
    /// Wall time of the decode, seconds.
    pub wall_s: Option<f64>,
    /// Denoising steps (AR: tokens produced).
    pub steps: Option<u64>,
    /// Model forwards (a CFG pass counts separately).
    pub forwards: Option<u64>,
    /// Committed tokens per forward.
    pub tokens_per_forward: Option<f64>,
    /// Simulated NPU time, seconds (virtual NPU backend).
    pub simulated_npu_s: Option<f64>,
    /// Simulated energy, millijoules.
    pub energy_mj: Option<f64>,
    /// Answer tokens up to and including the first stop token, never the padding after it.
    pub answer_tokens: Option<u64>,
}

impl RunMetrics {
    /// The metrics of a finished decode (energy is not part of it: add it from the timeline).
    pub fn from_decode(out: &DecodeOutput) -> Self {
        RunMetrics {
            wall_s: Some(out.wall_s),
            steps: Some(out.steps as u64),
            forwards: Some(out.forwards as u64),
            tokens_per_forward: Some(out.tokens_per_forward),
            simulated_npu_s: out.simulated_s,
            energy_mj: None,
            answer_tokens: None,
        }
    }
}

/// How a run ended successfully.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RunOutcome {
    /// Decoded text.
    pub output: String,
    /// Generated token ids.
    pub output_tokens: Vec<u32>,
    pub metrics: RunMetrics,
    /// Why decoding ended (`completed`, `eos`, `caller_stopped`).
    pub stop_reason: Option<String>,
}

impl RunOutcome {
    /// Outcome of a decode whose tokens were detokenised to `text`.
    pub fn from_decode(out: &DecodeOutput, text: impl Into<String>) -> Self {
        let stop_reason = serde_json::to_value(out.stop_reason).ok().and_then(|v| v.as_str().map(str::to_owned));
        RunOutcome {
            output: text.into(),
            output_tokens: out.tokens.clone(),
            metrics: RunMetrics::from_decode(out),
            stop_reason,
        }
    }
}

/// What the store keeps of an engine run: the outcome row (answer text, the answer's tokens,
/// metrics with the energy of its timeline) and the timeline itself, if the backend kept one.
pub fn recorded_outcome(o: &unmask_engine::run::RunOutcome) -> (RunOutcome, Option<StoredTimeline>) {
    let mut outcome = RunOutcome::from_decode(&o.output, o.text.clone());
    // Answer tokens only: EOS padding after the answer is not output.
    outcome.metrics.tokens_per_forward = Some(o.answer_tokens_per_forward());
    outcome.metrics.answer_tokens = Some(o.answer_tokens as u64);
    let timeline = match (&o.timeline, &o.speculation) {
        (Some(t), _) => Some(StoredTimeline { timeline: t.timeline.clone(), power: Some(t.power.clone()) }),
        // A speculative AR run on the CPU: its drafter and verifier tasks, measured.
        (None, Some(sp)) if !sp.trace.is_empty() => {
            Some(StoredTimeline { timeline: sp.trace.to_timeline(unmask_engine::trace::MEASURED_DEVICE), power: None })
        }
        _ => None,
    };
    if let Some(t) = &o.timeline {
        outcome.metrics.energy_mj = Some(t.timeline.energy(&t.power).total_j * 1e3);
    }
    (outcome, timeline)
}

impl crate::Store {
    /// Stores what a finished run's MoE layers and speculative decoding did, beside the run
    /// (nothing for a run that had neither); `draft_model` names the draft of a speculative run.
    /// Every front end saves a run's counters through this one place.
    pub async fn put_run_counters(
        &self,
        run_id: i64,
        o: &unmask_engine::run::RunOutcome,
        draft_model: Option<&str>,
    ) -> crate::Result<()> {
        let encode = |what: &str, e: serde_json::Error| crate::StoreError::Internal(format!("encoding {what}: {e}"));
        if let Some(m) = o.moe.as_ref().filter(|m| m.layer_runs > 0) {
            let stats = serde_json::to_value(m).map_err(|e| encode("MoE counters", e))?;
            self.put_run_moe(run_id, &stats).await?;
        }
        if let (Some(sp), Some(draft)) = (&o.speculation, draft_model) {
            let stats = serde_json::to_value(sp).map_err(|e| encode("speculative-decoding counters", e))?;
            let spec = crate::RunSpeculation { draft_model: draft.to_owned(), stats };
            self.put_run_speculation(run_id, &spec).await?;
        }
        Ok(())
    }
}

/// What a new run is.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NewRun {
    /// The registered model, if the run used one (embedded or ad-hoc paths may have none).
    pub model_id: Option<ModelId>,
    /// Display name of the model (kept when the model is deleted).
    pub model_name: String,
    /// Backend and device (`cpu`, `vnpu:sm8750`); stored as its one spelling.
    pub backend: BackendSpec,
    pub prompt: String,
    pub settings: DecodeSettings,
}

impl NewRun {
    /// A run of a registered model.
    pub fn new(model: &ModelRecord, backend: &BackendSpec, prompt: &str, settings: DecodeSettings) -> Self {
        NewRun {
            model_id: Some(model.id),
            model_name: model.name.clone(),
            backend: backend.clone(),
            prompt: prompt.to_owned(),
            settings,
        }
    }
}

/// A stored run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunRecord {
    pub id: RunId,
    pub model_id: Option<ModelId>,
    pub model_name: String,
    pub backend: BackendSpec,
    pub prompt: String,
    pub settings: DecodeSettings,
    pub status: RunStatus,
    pub output: Option<String>,
    pub output_tokens: Option<Vec<u32>>,
    pub error: Option<String>,
    pub stop_reason: Option<String>,
    pub started_at: UnixMillis,
    pub finished_at: Option<UnixMillis>,
    pub metrics: RunMetrics,
    /// Frames of step trace stored.
    pub trace_frames: u64,
    /// Whether a vNPU timeline is stored.
    pub has_timeline: bool,
}

/// One decoding setting that differs between two runs (JSON values of `DecodeSettings` fields).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SettingDiff {
    pub key: String,
    pub a: serde_json::Value,
    pub b: serde_json::Value,
}

/// Two runs side by side.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunComparison {
    pub a: RunRecord,
    pub b: RunRecord,
    /// Settings that differ.
    pub settings_diff: Vec<SettingDiff>,
    /// Both outputs present and equal.
    pub same_output: bool,
    /// First index where the generated tokens differ (None if equal or unknown).
    pub first_token_difference: Option<usize>,
    /// `b / a` per metric, where both are present and `a` is non-zero.
    pub ratios: BTreeMap<String, f64>,
}

/// A vNPU timeline stored with a run, with the lane powers needed for a Perfetto export
/// (`unmask_engine::trace::to_chrome_trace(&t.timeline, &t.power?)`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StoredTimeline {
    pub timeline: Timeline,
    pub power: Option<LanePower>,
}

/// Encoding name of stored timelines.
pub(crate) const TIMELINE_V1: &str = "timeline-v1+json+deflate";

pub(crate) fn encode_timeline(t: &StoredTimeline) -> Result<Vec<u8>> {
    let json = serde_json::to_vec(t).map_err(|e| StoreError::Internal(format!("timeline to JSON: {e}")))?;
    let mut enc = DeflateEncoder::new(Vec::new(), Compression::new(6));
    enc.write_all(&json).map_err(|e| StoreError::Internal(e.to_string()))?;
    enc.finish().map_err(|e| StoreError::Internal(e.to_string()))
}

fn decode_timeline(data: &[u8]) -> Result<StoredTimeline> {
    let mut json = Vec::new();
    DeflateDecoder::new(data)
        .read_to_end(&mut json)
        .map_err(|e| StoreError::corrupt("run timeline", format!("deflate: {e}")))?;
    serde_json::from_slice(&json).map_err(|e| StoreError::corrupt("run timeline", e.to_string()))
}

pub(crate) struct RunRow {
    pub id: i64,
    pub model_id: Option<i64>,
    pub model_name: String,
    pub backend: String,
    pub prompt: String,
    pub settings_json: String,
    pub status: String,
    pub output: Option<String>,
    pub output_tokens_json: Option<String>,
    pub error: Option<String>,
    pub stop_reason: Option<String>,
    pub started_at: i64,
    pub finished_at: Option<i64>,
    pub wall_s: Option<f64>,
    pub steps: Option<i64>,
    pub forwards: Option<i64>,
    pub tokens_per_forward: Option<f64>,
    pub simulated_npu_s: Option<f64>,
    pub energy_mj: Option<f64>,
    pub answer_tokens: Option<i64>,
    pub trace_frames: i64,
    pub has_timeline: bool,
}

impl TryFrom<RunRow> for RunRecord {
    type Error = StoreError;
    fn try_from(r: RunRow) -> Result<Self> {
        let settings = serde_json::from_str(&r.settings_json)
            .map_err(|e| StoreError::corrupt(format!("settings of run {}", r.id), e.to_string()))?;
        let output_tokens = r
            .output_tokens_json
            .as_deref()
            .map(serde_json::from_str)
            .transpose()
            .map_err(|e| StoreError::corrupt(format!("tokens of run {}", r.id), e.to_string()))?;
        Ok(RunRecord {
            id: r.id,
            model_id: r.model_id,
            model_name: r.model_name,
            backend: BackendSpec::from_recorded(&r.backend),
            prompt: r.prompt,
            settings,
            status: RunStatus::parse(&r.status)?,
            output: r.output,
            output_tokens,
            error: r.error,
            stop_reason: r.stop_reason,
            started_at: r.started_at,
            finished_at: r.finished_at,
            metrics: RunMetrics {
                wall_s: r.wall_s,
                steps: r.steps.map(|v| v.max(0) as u64),
                forwards: r.forwards.map(|v| v.max(0) as u64),
                tokens_per_forward: r.tokens_per_forward,
                simulated_npu_s: r.simulated_npu_s,
                energy_mj: r.energy_mj,
                answer_tokens: r.answer_tokens.map(|v| v.max(0) as u64),
            },
            trace_frames: r.trace_frames.max(0) as u64,
            has_timeline: r.has_timeline,
        })
    }
}

impl Store {
    /// The most recent runs, newest first (`limit` rows after skipping `offset`).
    pub async fn recent_runs(&self, limit: u32, offset: u32) -> Result<Vec<RunRecord>> {
        let (limit, offset) = (i64::from(limit), i64::from(offset));
        let rows = sqlx::query_as!(
            RunRow,
            r#"SELECT id AS "id!", model_id, model_name, backend, prompt, settings_json, status, output,
                      output_tokens_json, error, stop_reason, started_at, finished_at, wall_s, steps,
                      forwards, tokens_per_forward, simulated_npu_s, energy_mj, answer_tokens, trace_frames,
                      EXISTS (SELECT 1 FROM run_timelines t WHERE t.run_id = runs.id) AS "has_timeline!: bool"
               FROM runs ORDER BY started_at DESC, id DESC LIMIT ? OFFSET ?"#,
            limit,
            offset
        )
        .fetch_all(&self.pool)
        .await?;
        rows.into_iter().map(RunRecord::try_from).collect()
    }

    /// Runs of one model, newest first.
    pub async fn runs_of_model(&self, model_id: ModelId, limit: u32, offset: u32) -> Result<Vec<RunRecord>> {
        let (limit, offset) = (i64::from(limit), i64::from(offset));
        let rows = sqlx::query_as!(
            RunRow,
            r#"SELECT id AS "id!", model_id, model_name, backend, prompt, settings_json, status, output,
                      output_tokens_json, error, stop_reason, started_at, finished_at, wall_s, steps,
                      forwards, tokens_per_forward, simulated_npu_s, energy_mj, answer_tokens, trace_frames,
                      EXISTS (SELECT 1 FROM run_timelines t WHERE t.run_id = runs.id) AS "has_timeline!: bool"
               FROM runs WHERE model_id = ? ORDER BY started_at DESC, id DESC LIMIT ? OFFSET ?"#,
            model_id,
            limit,
            offset
        )
        .fetch_all(&self.pool)
        .await?;
        rows.into_iter().map(RunRecord::try_from).collect()
    }

    /// One run.
    pub async fn run_detail(&self, id: RunId) -> Result<RunRecord> {
        let row = sqlx::query_as!(
            RunRow,
            r#"SELECT id AS "id!", model_id, model_name, backend, prompt, settings_json, status, output,
                      output_tokens_json, error, stop_reason, started_at, finished_at, wall_s, steps,
                      forwards, tokens_per_forward, simulated_npu_s, energy_mj, answer_tokens, trace_frames,
                      EXISTS (SELECT 1 FROM run_timelines t WHERE t.run_id = runs.id) AS "has_timeline!: bool"
               FROM runs WHERE id = ?"#,
            id
        )
        .fetch_optional(&self.pool)
        .await?
        .ok_or_else(|| StoreError::not_found("run", id))?;
        row.try_into()
    }

    /// The whole step trace of a run, in order.
    pub async fn run_trace(&self, id: RunId) -> Result<Vec<StepFrame>> {
        self.run_trace_range(id, 0, u64::MAX).await
    }

    /// `count` frames of a run's trace starting at frame `start` (for scrubbing long traces).
    pub async fn run_trace_range(&self, id: RunId, start: u64, count: u64) -> Result<Vec<StepFrame>> {
        // Make "no such run" distinguishable from "no trace".
        self.run_exists(id).await?;
        let start_i = start.min(i64::MAX as u64) as i64;
        let end = start.saturating_add(count);
        let end_i = end.min(i64::MAX as u64) as i64;
        let chunks = sqlx::query!(
            r#"SELECT first_frame, n_frames, encoding, data FROM trace_chunks
               WHERE run_id = ?1 AND first_frame + n_frames > ?2 AND first_frame < ?3
               ORDER BY first_frame"#,
            id,
            start_i,
            end_i
        )
        .fetch_all(&self.pool)
        .await?;
        let mut out = Vec::new();
        for c in chunks {
            if c.encoding != trace_codec::FRAMES_V1 {
                return Err(StoreError::corrupt(
                    format!("trace of run {id}"),
                    format!("unknown encoding `{}`", c.encoding),
                ));
            }
            let frames = trace_codec::decode_chunk(&c.data)?;
            if frames.len() as i64 != c.n_frames {
                return Err(StoreError::corrupt(
                    format!("trace of run {id}"),
                    format!("chunk at frame {} holds {} frames, expected {}", c.first_frame, frames.len(), c.n_frames),
                ));
            }
            for (i, f) in frames.into_iter().enumerate() {
                let idx = c.first_frame as u64 + i as u64;
                if idx >= start && idx < end {
                    out.push(f);
                }
            }
        }
        Ok(out)
    }

    /// Appends frames to a run's trace in one transaction (the recorder calls this in batches;
    /// exposed for importing traces and for the benchmark of unbatched writes).
    pub async fn append_trace(&self, id: RunId, frames: &[StepFrame]) -> Result<()> {
        if frames.is_empty() {
            return Ok(());
        }
        let data = trace_codec::encode_chunk(frames);
        let mut tx = self.write_tx().await?;
        append_chunk(&mut tx, id, frames.len(), &data).await?;
        tx.commit().await?;
        Ok(())
    }

    /// The vNPU timeline stored with a run, if any.
    pub async fn run_timeline(&self, id: RunId) -> Result<Option<StoredTimeline>> {
        self.run_exists(id).await?;
        let row = sqlx::query!("SELECT encoding, data FROM run_timelines WHERE run_id = ?", id)
            .fetch_optional(&self.pool)
            .await?;
        match row {
            None => Ok(None),
            Some(r) if r.encoding == TIMELINE_V1 => decode_timeline(&r.data).map(Some),
            Some(r) => {
                Err(StoreError::corrupt(format!("timeline of run {id}"), format!("unknown encoding `{}`", r.encoding)))
            }
        }
    }

    /// Stores (or replaces) the timeline of a run.
    pub async fn set_run_timeline(&self, id: RunId, timeline: &StoredTimeline) -> Result<()> {
        self.run_exists(id).await?;
        let data = encode_timeline(timeline)?;
        sqlx::query!(
            r#"INSERT INTO run_timelines (run_id, encoding, data) VALUES (?, ?, ?)
               ON CONFLICT (run_id) DO UPDATE SET encoding = excluded.encoding, data = excluded.data"#,
            id,
            TIMELINE_V1,
            data
        )
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    /// Deletes a run with its trace and timeline (messages that referenced it keep their text).
    pub async fn delete_run(&self, id: RunId) -> Result<()> {
        let r = sqlx::query!("DELETE FROM runs WHERE id = ?", id).execute(&self.pool).await?;
        if r.rows_affected() == 0 {
            return Err(StoreError::not_found("run", id));
        }
        Ok(())
    }

    /// Two runs side by side: both records, the settings that differ, output agreement and
    /// metric ratios (`b / a`).
    pub async fn compare_runs(&self, a: RunId, b: RunId) -> Result<RunComparison> {
        let ra = self.run_detail(a).await?;
        let rb = self.run_detail(b).await?;
        let to_map = |s: &DecodeSettings| match serde_json::to_value(s) {
            Ok(serde_json::Value::Object(m)) => m,
            _ => serde_json::Map::new(),
        };
        let (ma, mb) = (to_map(&ra.settings), to_map(&rb.settings));
        let mut keys: Vec<&String> = ma.keys().chain(mb.keys()).collect();
        keys.sort();
        keys.dedup();
        let null = serde_json::Value::Null;
        let settings_diff = keys
            .into_iter()
            .filter_map(|k| {
                let (va, vb) = (ma.get(k).unwrap_or(&null), mb.get(k).unwrap_or(&null));
                (va != vb).then(|| SettingDiff { key: k.clone(), a: va.clone(), b: vb.clone() })
            })
            .collect();
        let same_output = matches!((&ra.output, &rb.output), (Some(x), Some(y)) if x == y);
        let first_token_difference = match (&ra.output_tokens, &rb.output_tokens) {
            (Some(x), Some(y)) => {
                x.iter().zip(y).position(|(p, q)| p != q).or((x.len() != y.len()).then(|| x.len().min(y.len())))
            }
            _ => None,
        };
        let mut ratios = BTreeMap::new();
        let (xa, xb) = (&ra.metrics, &rb.metrics);
        let pairs = [
            ("wall_s", xa.wall_s, xb.wall_s),
            ("steps", xa.steps.map(|v| v as f64), xb.steps.map(|v| v as f64)),
            ("forwards", xa.forwards.map(|v| v as f64), xb.forwards.map(|v| v as f64)),
            ("tokens_per_forward", xa.tokens_per_forward, xb.tokens_per_forward),
            ("simulated_npu_s", xa.simulated_npu_s, xb.simulated_npu_s),
            ("energy_mj", xa.energy_mj, xb.energy_mj),
        ];
        for (k, va, vb) in pairs {
            if let (Some(va), Some(vb)) = (va, vb) {
                if va != 0.0 {
                    ratios.insert(k.to_owned(), vb / va);
                }
            }
        }
        Ok(RunComparison { a: ra, b: rb, settings_diff, same_output, first_token_difference, ratios })
    }

    async fn run_exists(&self, id: RunId) -> Result<()> {
        sqlx::query_scalar!("SELECT id FROM runs WHERE id = ?", id)
            .fetch_optional(&self.pool)
            .await?
            .map(|_| ())
            .ok_or_else(|| StoreError::not_found("run", id))
    }
}

/// Inserts one compressed chunk after the frames already stored, inside `tx`.
pub(crate) async fn append_chunk(
    tx: &mut sqlx::Transaction<'_, sqlx::Sqlite>,
    id: RunId,
    n_frames: usize,
    data: &[u8],
) -> Result<()> {
    let n = n_frames as i64;
    let first = sqlx::query_scalar!(
        r#"UPDATE runs SET trace_frames = trace_frames + ?1 WHERE id = ?2 RETURNING trace_frames - ?1 AS "first!: i64""#,
        n,
        id
    )
    .fetch_optional(&mut **tx)
    .await?
    .ok_or_else(|| StoreError::not_found("run", id))?;
    sqlx::query!(
        "INSERT INTO trace_chunks (run_id, first_frame, n_frames, encoding, data) VALUES (?, ?, ?, ?, ?)",
        id,
        first,
        n,
        trace_codec::FRAMES_V1,
        data
    )
    .execute(&mut **tx)
    .await?;
    Ok(())
}
