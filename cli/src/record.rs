//! Recording a decode as a run in the store: settings and prompt up front, every step frame
//! while it decodes (buffered, written in batches by the store's background writer), then the
//! output, metrics, energy and the vNPU timeline.

use anyhow::{Context, Result};
use unmask_engine::decode::{DecodeSettings, StepFrame};
use unmask_engine::run::{BackendSpec, RunOutcome};
use unmask_store::{NewRun, RunRecorder};

use crate::data::{Data, ResolvedModel};

/// A run being recorded.
pub struct Recording<'a> {
    data: &'a Data,
    rec: RunRecorder,
    /// Display name of the draft model of a speculative run.
    draft: Option<String>,
}

impl<'a> Recording<'a> {
    /// Starts a run (status `running`).
    pub fn start(
        data: &'a Data,
        model: &ResolvedModel,
        backend: &BackendSpec,
        prompt: &str,
        settings: &DecodeSettings,
    ) -> Result<Recording<'a>> {
        let new = match &model.record {
            Some(m) => NewRun::new(m, backend, prompt, settings.clone()),
            None => NewRun {
                model_id: None,
                model_name: model.name.clone(),
                backend: backend.clone(),
                prompt: prompt.to_owned(),
                settings: settings.clone(),
            },
        };
        let rec = data.block_on(data.store().start_run(new)).context("recording the run")?;
        Ok(Recording { data, rec, draft: None })
    }

    /// Names the draft model of a speculative run (stored with its counters when it finishes).
    pub fn with_draft(mut self, draft: Option<String>) -> Self {
        self.draft = draft;
        self
    }

    /// Records one step frame (a copy; no I/O on this thread).
    pub fn record(&mut self, f: &StepFrame) {
        self.rec.record(f);
    }

    /// Ends the run as completed; returns its id.
    pub fn finish(mut self, o: &RunOutcome) -> Result<i64> {
        let (outcome, timeline) = unmask_store::recorded_outcome(o);
        if let Some(t) = timeline {
            self.rec.set_timeline(t);
        }
        let id = self.rec.id();
        self.data.block_on(self.rec.finish(outcome)).context("saving the run")?;
        self.data
            .block_on(self.data.store().put_run_counters(id, o, self.draft.as_deref()))
            .context("saving the run's MoE / speculative-decoding counters")?;
        Ok(id)
    }

    /// Ends the run as failed with the decode's error.
    pub fn fail(self, err: &anyhow::Error) -> Result<()> {
        self.data.block_on(self.rec.fail(crate::exit::one_line(err))).context("saving the failed run")?;
        Ok(())
    }
}
