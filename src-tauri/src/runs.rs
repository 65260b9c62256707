//! Runs: lists, details with step frames and timeline, comparisons, Perfetto export, and
//! re-running one prompt with several presets.

use std::path::Path;
use std::sync::Arc;

use unmask_engine::decode::spec_ar::SpecArStats;
use unmask_engine::model::ChatMessage;
use unmask_engine::run::stop_ids;
use unmask_engine::trace::to_chrome_trace;
use unmask_store::{ModelId, RunId, RunRecord, RunSpeculation, StoredTimeline};

use crate::dto::{BackendChoice, DecodeSettings, RunDetail, RunStatus, RunSummary, SpeculationSummary};
use crate::error::{AppError, AppErrorKind, AppResult};
use crate::generate::frame_delta;
use crate::sink::NullSink;
use crate::state::AppState;
use crate::timeline;

/// Most runs one list returns.
pub const MAX_LIST: u32 = 1000;

/// The UI summary of a stored run.
pub fn summary_of(r: &RunRecord) -> RunSummary {
    RunSummary {
        id: r.id,
        model_name: r.model_name.clone(),
        backend: r.backend.to_string(),
        prompt: r.prompt.clone(),
        output: r.output.clone().unwrap_or_default(),
        status: match r.status {
            unmask_store::RunStatus::Running => RunStatus::Running,
            unmask_store::RunStatus::Completed => RunStatus::Completed,
            unmask_store::RunStatus::Cancelled => RunStatus::Cancelled,
            unmask_store::RunStatus::Failed => RunStatus::Failed,
            unmask_store::RunStatus::Interrupted => RunStatus::Interrupted,
        },
        settings: DecodeSettings::from_engine(&r.settings),
        started_ms: r.started_at,
        wall_s: r.metrics.wall_s,
        forwards: r.metrics.forwards,
        tokens_per_forward: r.metrics.tokens_per_forward,
        simulated_s: r.metrics.simulated_npu_s,
        energy_j: r.metrics.energy_mj.map(|mj| mj / 1e3),
        steps: r.metrics.steps.unwrap_or(r.trace_frames),
        answer_tokens: r.metrics.answer_tokens.map(|n| u32::try_from(n).unwrap_or(u32::MAX)),
        // Kept in its own table: filled in where a run is shown alone.
        speculation: None,
    }
}

/// The UI form of a run's stored speculative-decoding record (`None` when its counters are not
/// the engine's: a record from another version is not worth a failed view).
pub fn speculation_summary(sp: &RunSpeculation) -> Option<SpeculationSummary> {
    let stats: SpecArStats = serde_json::from_value(sp.stats.clone()).ok()?;
    let n = |v: usize| v as u64;
    Some(SpeculationSummary {
        draft_model: sp.draft_model.clone(),
        schedule: stats.schedule.map(|s| s.to_string()),
        drafted: n(stats.drafted),
        judged: n(stats.offered),
        accepted: n(stats.accepted),
        rejected: n(stats.offered.saturating_sub(stats.accepted)),
        verify_forwards: n(stats.verify_forwards),
        draft_forwards: n(stats.draft_forwards),
    })
}

impl AppState {
    /// The latest runs, of one model or of all.
    pub async fn list_runs(&self, model_id: Option<ModelId>, limit: u32) -> AppResult<Vec<RunSummary>> {
        let limit = limit.clamp(1, MAX_LIST);
        let runs = match model_id {
            Some(id) => self.store.runs_of_model(id, limit, 0).await?,
            None => self.store.recent_runs(limit, 0).await?,
        };
        Ok(runs.iter().map(summary_of).collect())
    }

    /// A run with every step frame (token text from the run's model when it is still there) and
    /// its timeline.
    pub async fn get_run(&self, id: RunId) -> AppResult<RunDetail> {
        let r = self.store.run_detail(id).await?;
        let trace = self.store.run_trace(id).await?;
        let model = match r.model_id {
            Some(mid) => self.store.get_model(mid).await.ok(),
            None => None,
        };
        let loaded = match &model {
            Some(m) => self.load(m).await.ok(),
            None => None,
        };
        let frames = match &loaded {
            Some(l) => {
                let stop = stop_ids(&l.transformer.config, &r.settings, &l.tokenizer, &l.template);
                trace.iter().map(|f| frame_delta(f, &|t| l.tokenizer.token_text(t), &stop)).collect()
            }
            // The model was deleted: the ids are all that is left (and which of them end the answer
            // is not known without its tokenizer).
            None => trace.iter().map(|f| frame_delta(f, &|t| format!("#{t}"), &[])).collect(),
        };
        // The prompt length is where the first block starts (every generated position lies after
        // it); the store keeps the settings, so the canvas is prompt + gen_length.
        let first_block = trace.first().map(|f| f.block.0);
        let first_change = trace.iter().flat_map(|f| f.changes.iter().map(|c| c.pos)).min();
        let prompt_tokens = match (first_block, first_change) {
            (Some(a), Some(b)) => a.min(b),
            (Some(a), None) | (None, Some(a)) => a,
            (None, None) => 0,
        };
        let tl = self.store.run_timeline(id).await?;
        let mut summary = summary_of(&r);
        summary.speculation = self.store.run_speculation(id).await?.as_ref().and_then(speculation_summary);
        Ok(RunDetail {
            summary,
            prompt_tokens: prompt_tokens as u32,
            canvas_length: (prompt_tokens + r.settings.gen_length) as u32,
            frames,
            timeline: tl.as_ref().map(timeline::view),
        })
    }

    /// Several runs side by side (in the order given).
    pub async fn compare_runs(&self, ids: &[RunId]) -> AppResult<Vec<RunDetail>> {
        if ids.len() < 2 {
            return Err(AppError::invalid("pick at least two runs to compare"));
        }
        let mut out = Vec::with_capacity(ids.len());
        for &id in ids {
            out.push(self.get_run(id).await?);
        }
        Ok(out)
    }

    /// The Chrome-trace / Perfetto JSON of a run's timeline (simulated for vNPU runs, measured
    /// per step for CPU runs).
    pub async fn perfetto_json(&self, run_id: RunId) -> AppResult<String> {
        let stored: StoredTimeline = match self.store.run_timeline(run_id).await? {
            Some(t) => t,
            None => {
                self.store.run_detail(run_id).await?;
                timeline::measured_from_frames(&self.store.run_trace(run_id).await?)
            }
        };
        let power = stored.power.clone().unwrap_or_else(timeline::zero_power);
        serde_json::to_string(&to_chrome_trace(&stored.timeline, &power))
            .map_err(|e| AppError::internal(format!("trace JSON: {e}")))
    }

    /// Writes [`perfetto_json`](Self::perfetto_json) to `path`; returns the bytes written.
    pub async fn export_perfetto(&self, run_id: RunId, path: &Path) -> AppResult<u64> {
        let json = self.perfetto_json(run_id).await?;
        tokio::fs::write(path, json.as_bytes())
            .await
            .map_err(|e| AppError::new(AppErrorKind::Io, format!("{}: {e}", path.display())))?;
        Ok(json.len() as u64)
    }

    /// Runs `prompt` once per preset (one after the other, no conversation), for the compare view.
    pub async fn rerun_with_presets(
        &self,
        prompt: &str,
        model_id: Option<ModelId>,
        preset_ids: &[i64],
    ) -> AppResult<Vec<RunSummary>> {
        if preset_ids.is_empty() {
            return Err(AppError::invalid("pick at least one preset"));
        }
        if prompt.trim().is_empty() {
            return Err(AppError::invalid("the prompt is empty"));
        }
        let model = self.resolve_model(model_id).await?;
        let loaded = self.load(&model).await?;
        let text = loaded.template.render(&[ChatMessage::user(prompt)], true);
        let ids = loaded.tokenizer.encode(&text)?;
        let mut out = Vec::new();
        for &pid in preset_ids {
            let preset = self.store.get_preset(pid).await?;
            let backend =
                BackendChoice::from_spec(preset.backend.as_ref().unwrap_or(&unmask_engine::run::BackendSpec::Cpu));
            let rec = self
                .decode_run(
                    &model,
                    loaded.clone(),
                    ids.clone(),
                    prompt,
                    preset.settings.clone(),
                    &backend,
                    None,
                    Arc::new(NullSink),
                    None,
                )
                .await?;
            out.push(summary_of(&rec));
        }
        Ok(out)
    }
}
